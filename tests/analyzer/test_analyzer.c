/*
 * Analyzer tests: unit logic through the wdaz library, and the command line on synthetic dumps
 * from gen_dumps (one scenario per test, the exact suspect asserted from --json output).
 * Usage: test_analyzer GEN_DUMPS ANALYZER
 */
#include <CUnit/Basic.h>
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "incarnation.h"
#include "load.h"
#include "model.h"
#include "verdict.h"

static const char *g_gen, *g_az;
static char g_tmp[256];

/* ---- helpers ---- */

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof(cmd), fmt, ap);
  va_end(ap);
  int st = system(cmd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) n = 0;
  if (buf) buf[n] = '\0';
  fclose(f);
  return buf;
}

static int gen(const char *name, const char *args) {
  return sh("rm -rf %s/%s && %s %s/%s %s", g_tmp, name, g_gen, g_tmp, name, args);
}

/* Run the analyzer with --json on a directory; returns the parsed report (NULL on failure). */
static cJSON *analyze_json(const char *name, const char *extra, int *rc) {
  char out[512];
  snprintf(out, sizeof(out), "%s/%s.out.json", g_tmp, name);
  *rc = sh("%s --json %s %s/%s >%s 2>%s/%s.err", g_az, extra, g_tmp, name, out, g_tmp, name);
  char *text = slurp(out);
  cJSON *j = text ? cJSON_Parse(text) : NULL;
  free(text);
  return j;
}

/* Generates a scenario's dumps into NAME/ and analyzes them with --json (want_rc: the analyzer's
 * exit status, -1 = any). Returns the report; a failed generation or no report ends the test. */
static cJSON *gen_report(const char *name, const char *gen_args, int want_rc) {
  CU_ASSERT_EQUAL_FATAL(gen(name, gen_args), 0);
  int rc;
  cJSON *rep = analyze_json(name, "", &rc);
  if (want_rc >= 0) CU_ASSERT_EQUAL(rc, want_rc);
  CU_ASSERT_PTR_NOT_NULL_FATAL(rep);
  return rep;
}

static cJSON *comm0(cJSON *rep) {
  return cJSON_GetArrayItem(cJSON_GetObjectItem(rep, "comms"), 0);
}

static const char *sget(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItem(o, k);
  return cJSON_IsString(v) ? v->valuestring : "";
}

static double nget(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItem(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : -999;
}

/* Asserts the communicator's verdict and that its first suspect is (rank, reason, culprit). */
static const cJSON *expect_suspect(cJSON *rep, const char *verdict, int rank, const char *reason) {
  const cJSON *c = comm0(rep);
  CU_ASSERT_PTR_NOT_NULL_FATAL(c);
  CU_ASSERT_STRING_EQUAL(sget(c, "verdict"), verdict);
  const cJSON *sus = cJSON_GetObjectItem(c, "suspects");
  const cJSON *s = cJSON_GetArrayItem(sus, 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  CU_ASSERT_EQUAL(nget(s, "rank"), rank);
  CU_ASSERT_STRING_EQUAL(sget(s, "reason"), reason);
  CU_ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(s, "culprit")));
  return s;
}

static int count_culprits(const cJSON *c) {
  int n = 0;
  const cJSON *s;
  cJSON_ArrayForEach(s, cJSON_GetObjectItem(c, "suspects")) n +=
      cJSON_IsTrue(cJSON_GetObjectItem(s, "culprit"));
  return n;
}

/* ---- unit logic ---- */

static void test_ranges(void) {
  char buf[64];
  int a[] = {0, 1, 2, 4, 5, 6, 7};
  wd_az_ranges(a, 7, buf, sizeof(buf));
  CU_ASSERT_STRING_EQUAL(buf, "0-2,4-7");
  int b[] = {3};
  wd_az_ranges(b, 1, buf, sizeof(buf));
  CU_ASSERT_STRING_EQUAL(buf, "3");
  wd_az_ranges(NULL, 0, buf, sizeof(buf));
  CU_ASSERT_STRING_EQUAL(buf, "");
  int c[] = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23};
  wd_az_ranges(c, 12, buf, 16);
  CU_ASSERT_TRUE(strlen(buf) < 16);
  CU_ASSERT_PTR_NOT_NULL(strstr(buf, "..."));
}

static int load_text(wd_az_set *set, const char *text, char *why) {
  why[0] = '\0';
  return wd_az_load_buffer(set, "mem", text, strlen(text), why, 256);
}

static void test_load_rejects(void) {
  wd_az_set set;
  memset(&set, 0, sizeof(set));
  char why[256];
  CU_ASSERT_EQUAL(load_text(&set, "", why), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(why, "empty"));
  CU_ASSERT_EQUAL(load_text(&set, "{\"format\":\"nccl-watchdog-dump\",\"vers", why), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(why, "truncated"));
  CU_ASSERT_EQUAL(load_text(&set, "{\"traceEvents\":[]}", why), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(why, "foreign"));
  CU_ASSERT_EQUAL(load_text(&set, "{\"format\":\"nccl-watchdog-dump\",\"version\":2}", why), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(why, "future"));
  CU_ASSERT_EQUAL(load_text(&set, "{\"format\":\"nccl-watchdog-dump\",\"version\":1,\"host\":"
                                  "\"h\",\"pid\":1,\"comms\":[]}", why), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(why, "wall_ns"));
  CU_ASSERT_EQUAL(set.ndumps, 0);
  CU_ASSERT_EQUAL(set.ncranks, 0);
  wd_az_set_free(&set);
}

/* Only documented fields, optional ones absent, unknown ones ignored, backtraces disabled. */
static void test_load_minimal(void) {
  static const char *doc =
      "{\"format\":\"nccl-watchdog-dump\",\"version\":1,\"host\":\"n1\",\"pid\":42,"
      "\"future\":{\"x\":1},\"time\":{\"wall_ns\":\"0x100\"},\"threads\":{\"disabled\":true},"
      "\"comms\":[{\"commId\":\"0xabc\",\"rank\":1,\"nranks\":2,"
      "\"seq\":[{\"func\":\"AllReduce\",\"lastEnqueued\":5,\"lastCompleted\":4}],"
      "\"inflight\":[{\"slot\":1,\"type\":\"Coll\",\"status\":\"stalled\",\"func\":\"AllReduce\","
      "\"seq\":5,\"sinceProgressMs\":1000,\"children\":[{\"type\":\"ProxyOp\",\"peer\":0,"
      "\"channel\":3,\"stopped\":false,\"sinceProgressMs\":900,\"children\":[{\"type\":"
      "\"ProxyStep\",\"step\":2,\"state\":\"RecvWait\",\"stopped\":false,\"sinceProgressMs\":"
      "1000}]}]}]},{\"commId\":\"0xdef\",\"rank\":5,\"nranks\":2}]}";
  wd_az_set set;
  memset(&set, 0, sizeof(set));
  char why[256];
  CU_ASSERT_EQUAL_FATAL(load_text(&set, doc, why), 0);
  CU_ASSERT_EQUAL(set.ndumps, 1);
  CU_ASSERT_EQUAL(set.ncranks, 1); /* rank 5 of 2 is dropped */
  CU_ASSERT_TRUE(set.dumps[0].threads_disabled);
  CU_ASSERT_EQUAL(set.dumps[0].wall_ns, 0x100);
  const wd_az_crank *cr = &set.cranks[0];
  CU_ASSERT_EQUAL(cr->comm_id, 0xabc);
  CU_ASSERT_EQUAL(cr->nops, 1);
  CU_ASSERT_EQUAL(cr->ops[0].seq, 5);
  CU_ASSERT_TRUE(cr->ops[0].wait.valid);
  CU_ASSERT_EQUAL(cr->ops[0].wait.peer, 0);
  CU_ASSERT_EQUAL(cr->ops[0].wait.channel, 3);
  CU_ASSERT_EQUAL(cr->ops[0].wait.step, 2);
  CU_ASSERT_STRING_EQUAL(wd_az_s(cr->ops[0].wait.state), "RecvWait");
  CU_ASSERT_EQUAL(wd_az_enq(cr, wd_az_intern("AllReduce")), 5);
  /* Rank 0 left no dump: it is the only explanation, so it is the culprit. */
  wd_az_select(&set, 0);
  wd_az_opts o = {0};
  wd_az_result res;
  CU_ASSERT_EQUAL_FATAL(wd_az_analyze(&set, &o, &res), 0);
  CU_ASSERT_EQUAL(res.comms[0].verdict, WD_AZ_HANG);
  CU_ASSERT_EQUAL_FATAL(res.comms[0].nsus, 2);
  CU_ASSERT_EQUAL(res.comms[0].sus[0].rank, 0);
  CU_ASSERT_EQUAL(res.comms[0].sus[0].reason, WD_AZ_MISSING);
  CU_ASSERT_TRUE(res.comms[0].sus[0].culprit);
  /* Rank 1 waits on it in the network: listed, not blamed. */
  CU_ASSERT_EQUAL(res.comms[0].sus[1].rank, 1);
  CU_ASSERT_EQUAL(res.comms[0].sus[1].reason, WD_AZ_NETWORK_STALL);
  CU_ASSERT_FALSE(res.comms[0].sus[1].culprit);
  CU_ASSERT_TRUE(res.comms[0].sus[1].peer_is_suspect);
  CU_ASSERT_PTR_NOT_NULL(strstr(res.summary, "rank 0 left no dump (crashed, killed, or its host is gone); rank 1 waits on it"));
  wd_az_result_free(&res);
  wd_az_set_free(&set);
}

/* Every prefix and some byte flips of a real-looking dump: rejected or loaded, never a crash. */
static void test_load_truncations(void) {
  CU_ASSERT_EQUAL_FATAL(gen("small", "--ranks 2 --scenario not-entered --ring 16 --victim 1"), 0);
  char path[512];
  snprintf(path, sizeof(path), "%s/small/node000-10000-0001-stall.json", g_tmp);
  char *doc = slurp(path);
  CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
  size_t len = strlen(doc), loaded = 0;
  wd_az_set set;
  memset(&set, 0, sizeof(set));
  char why[256];
  for (size_t n = 0; n + 1 < len; n += 7) loaded += wd_az_load_buffer(&set, "p", doc, n, why, 256) == 0;
  CU_ASSERT_EQUAL(loaded, 0); /* the newline at the end is the only optional byte */
  CU_ASSERT_EQUAL(wd_az_load_buffer(&set, "p", doc, len, why, 256), 0);
  for (size_t i = 0; i < len; i += 13) {
    char saved = doc[i];
    doc[i] = (char)(saved ^ 0x5a);
    wd_az_load_buffer(&set, "flip", doc, len, why, 256);
    doc[i] = saved;
  }
  wd_az_select(&set, 0);
  wd_az_opts o = {0};
  wd_az_result res;
  CU_ASSERT_EQUAL(wd_az_analyze(&set, &o, &res), 0);
  wd_az_result_free(&res);
  wd_az_set_free(&set);
  wd_az_load_release();
  free(doc);
}

/* ---- scenarios through the command line ---- */

static void test_healthy(void) {
  cJSON *rep = gen_report("healthy", "--ranks 8 --scenario healthy --ring 200", 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(sget(rep, "summary"), "no hang found"));
  const cJSON *c = comm0(rep);
  CU_ASSERT_STRING_EQUAL(sget(c, "verdict"), "no_hang");
  CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(c, "suspects")), 0);
  CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(c, "ranksPresent")), 8);
  CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(c, "ranksMissing")), 0);
  CU_ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItem(c, "stuck")));
  CU_ASSERT_STRING_EQUAL(sget(c, "commId"), "0x6b8b4567327b23c6");
  CU_ASSERT_STRING_EQUAL(sget(c, "commName"), "default_pg");
  cJSON_Delete(rep);
}

static void test_not_entered(void) {
  cJSON *rep = gen_report("ne", "--ranks 8 --scenario not-entered --ring 200", 0);
  const cJSON *s = expect_suspect(rep, "hang", 3, "not_entered");
  CU_ASSERT_EQUAL(count_culprits(comm0(rep)), 1);
  CU_ASSERT_STRING_EQUAL(sget(s, "host"), "node000");
  CU_ASSERT_EQUAL(nget(s, "pid"), 10003);
  /* What it was doing instead: its main thread's stack. */
  const cJSON *fr = cJSON_GetArrayItem(cJSON_GetObjectItem(s, "topFrames"), 1);
  CU_ASSERT_TRUE(cJSON_IsString(fr) && strstr(fr->valuestring, "recv_batch") != NULL);
  CU_ASSERT_PTR_NOT_NULL(strstr(sget(s, "doing"), "last in: AllReduce seq 88411"));
  const char *sum = sget(rep, "summary");
  CU_ASSERT_PTR_NOT_NULL(strstr(sum, "rank 3 never entered AllReduce seq 88412"));
  CU_ASSERT_PTR_NOT_NULL(strstr(sum, "ranks 0-2,4-7 are waiting in it"));
  const cJSON *stuck = cJSON_GetObjectItem(comm0(rep), "stuck");
  CU_ASSERT_EQUAL(nget(stuck, "seq"), 88412);
  CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(stuck, "ranksWaiting")), 7);
  const cJSON *f = cJSON_GetArrayItem(cJSON_GetObjectItem(comm0(rep), "functions"), 0);
  CU_ASSERT_STRING_EQUAL(sget(f, "func"), "AllReduce");
  CU_ASSERT_EQUAL(nget(f, "firstDivergingSeq"), 88412);
  cJSON_Delete(rep);
}

static void test_not_entered_wrapped_multi_comm(void) {
  cJSON *rep =
      gen_report("ne2", "--ranks 16 --scenario not-entered --ring 40 --comms 2 --victim 11", -1);
  expect_suspect(rep, "hang", 11, "not_entered");
  CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(rep, "comms")), 2);
  const cJSON *c1 = cJSON_GetArrayItem(cJSON_GetObjectItem(rep, "comms"), 1);
  CU_ASSERT_STRING_EQUAL(sget(c1, "verdict"), "no_hang");
  CU_ASSERT_STRING_EQUAL(sget(c1, "commName"), "pg_1");
  cJSON_Delete(rep);
}

static void test_missing_rank(void) {
  cJSON *rep = gen_report("miss", "--ranks 8 --scenario missing-rank --ring 200", 0);
  expect_suspect(rep, "hang", 3, "missing");
  const cJSON *missing = cJSON_GetObjectItem(comm0(rep), "ranksMissing");
  CU_ASSERT_EQUAL(cJSON_GetArraySize(missing), 1);
  CU_ASSERT_EQUAL(cJSON_GetArrayItem(missing, 0)->valueint, 3);
  CU_ASSERT_EQUAL(count_culprits(comm0(rep)), 1);
  cJSON_Delete(rep);
}

static void test_mismatch(void) {
  cJSON *rep = gen_report("mm", "--ranks 8 --scenario mismatch --ring 200", -1);
  const cJSON *s = expect_suspect(rep, "hang", 3, "mismatch");
  CU_ASSERT_STRING_EQUAL(sget(s, "func"), "AllGather");
  CU_ASSERT_EQUAL(nget(s, "seq"), 902);
  CU_ASSERT_EQUAL(count_culprits(comm0(rep)), 1);
  cJSON_Delete(rep);
}

static void test_network_stall(void) {
  cJSON *rep = gen_report("net", "--ranks 8 --scenario network-stall --ring 200 --victim 5", -1);
  const cJSON *s = expect_suspect(rep, "hang", 5, "network_stall");
  CU_ASSERT_EQUAL(nget(s, "peer"), 4);
  CU_ASSERT_EQUAL(nget(s, "channel"), 1);
  CU_ASSERT_EQUAL(nget(s, "step"), 4);
  CU_ASSERT_STRING_EQUAL(sget(s, "state"), "RecvWait");
  CU_ASSERT_FALSE(cJSON_IsTrue(cJSON_GetObjectItem(s, "peerIsSuspect")));
  CU_ASSERT_EQUAL(count_culprits(comm0(rep)), 1);
  cJSON_Delete(rep);
}

/* Rings of different depth: the common window only, and no divergence. */
static void test_wrapped(void) {
  cJSON *rep = gen_report("wrap", "--ranks 8 --scenario wrapped --ring 120", -1);
  const cJSON *c = comm0(rep);
  CU_ASSERT_STRING_EQUAL(sget(c, "verdict"), "no_hang");
  CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(c, "suspects")), 0);
  const cJSON *f;
  cJSON_ArrayForEach(f, cJSON_GetObjectItem(c, "functions")) {
    CU_ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItem(f, "firstDivergingSeq")));
    CU_ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItem(f, "historyDivergingSeq")));
  }
  /* Odd ranks keep less history: the compared window starts where theirs does. */
  const cJSON *ar = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "functions"), 0);
  const cJSON *win = cJSON_GetObjectItem(ar, "historyCompared");
  CU_ASSERT_TRUE(nget(win, "from") > 88411 - 20);
  CU_ASSERT_EQUAL(nget(win, "to"), 88411);
  cJSON_Delete(rep);
}

/* Broken files are skipped with one line each; exit 0 when others are fine, 3 when none. */
static void test_bad_files(void) {
  CU_ASSERT_EQUAL_FATAL(gen("bad", "--ranks 2 --scenario healthy --ring 16"), 0);
  sh("cd %s/bad && : >empty.json && head -c 300 node000-10000-0001-signal.json >trunc.json && "
     "echo '{\"a\":1}' >foreign.json && sed 's/\"version\":1/\"version\":9/' "
     "node000-10001-0001-signal.json >future.json && echo junk >notes.txt",
     g_tmp);
  int rc;
  cJSON *rep = analyze_json("bad", "", &rc);
  CU_ASSERT_EQUAL(rc, 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(rep);
  CU_ASSERT_EQUAL(nget(rep, "dumpsRead"), 2);
  CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(rep, "skipped")), 4);
  char path[512];
  snprintf(path, sizeof(path), "%s/bad.err", g_tmp);
  char *err = slurp(path);
  CU_ASSERT_PTR_NOT_NULL_FATAL(err);
  int lines = 0;
  for (char *p = err; *p; p++) lines += *p == '\n';
  CU_ASSERT_EQUAL(lines, 4);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "empty.json: empty file"));
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "future.json: future format version 9"));
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "foreign.json: foreign JSON"));
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "trunc.json: truncated"));
  free(err);
  cJSON_Delete(rep);
  CU_ASSERT_EQUAL(sh("cd %s/bad && rm node0*.json", g_tmp), 0);
  CU_ASSERT_EQUAL(sh("%s %s/bad >/dev/null 2>&1", g_az, g_tmp), 3);
  CU_ASSERT_EQUAL(sh("%s >/dev/null 2>&1", g_az), 2);
  CU_ASSERT_EQUAL(sh("%s --nope %s/bad >/dev/null 2>&1", g_az, g_tmp), 2);
}

/* The newest dump per (host, pid, comm rank) is used unless --all-dumps. */
static void test_newest_dump(void) {
  CU_ASSERT_EQUAL_FATAL(gen("old", "--ranks 4 --scenario healthy --ring 16"), 0);
  CU_ASSERT_EQUAL_FATAL(gen("new", "--ranks 4 --scenario not-entered --ring 16 --victim 2"), 0);
  /* Rank 0's later dump ("peer", 200 ms later) shows it stuck in AllReduce seq 88412. */
  CU_ASSERT_EQUAL(sh("cp %s/new/node000-10000-0001-peer.json %s/old/", g_tmp, g_tmp), 0);
  int rc;
  cJSON *rep = analyze_json("old", "", &rc);
  CU_ASSERT_PTR_NOT_NULL_FATAL(rep);
  CU_ASSERT_EQUAL(nget(rep, "dumpsRead"), 5);
  CU_ASSERT_EQUAL(nget(rep, "dumpsUsed"), 4);
  const cJSON *r0 = cJSON_GetArrayItem(cJSON_GetObjectItem(comm0(rep), "ranks"), 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(sget(r0, "file"), "peer.json"));
  CU_ASSERT_STRING_EQUAL(sget(comm0(rep), "verdict"), "hang");
  cJSON_Delete(rep);
  rep = analyze_json("old", "--all-dumps", &rc);
  CU_ASSERT_PTR_NOT_NULL_FATAL(rep);
  CU_ASSERT_EQUAL(nget(rep, "dumpsUsed"), 5);
  cJSON_Delete(rep);
}

/* Rewrites a generated snapshot as a stall dump naming AllReduce seq 40 of rank 0. */
static int make_stall_dump(const char *from, const char *to) {
  char *text = slurp(from);
  cJSON *d = text ? cJSON_Parse(text) : NULL;
  free(text);
  if (!d) return -1;
  cJSON_ReplaceItemInObject(d, "reason", cJSON_CreateString("stall"));
  cJSON *t = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(t, "stalls"), *st = cJSON_CreateObject();
  cJSON_AddStringToObject(st, "commId", "0x6b8b4567327b23c6");
  cJSON_AddStringToObject(st, "commName", "default_pg");
  cJSON_AddNumberToObject(st, "rank", 0);
  cJSON_AddStringToObject(st, "type", "Coll");
  cJSON_AddStringToObject(st, "func", "AllReduce");
  cJSON_AddNumberToObject(st, "seq", 40);
  cJSON_AddNumberToObject(st, "sinceProgressMs", 3000);
  cJSON_AddItemToArray(arr, st);
  cJSON_ReplaceItemInObject(d, "trigger", t);
  char *out = cJSON_Print(d);
  cJSON_Delete(d);
  FILE *f = out ? fopen(to, "w") : NULL;
  int rc = f && fputs(out, f) >= 0 ? 0 : -1;
  if (f) fclose(f);
  free(out);
  return rc;
}

/* The plugin saw an operation stuck for its timeout: a judged episode with that stall dump and
 * nothing else stuck reads NO VERDICT, never OK (issue: a stall dump, then "no hang found"). */
static void test_stall_never_ok(void) {
  CU_ASSERT_EQUAL_FATAL(gen("stallok", "--ranks 4 --scenario healthy --ring 16"), 0);
  char from[512], to[512];
  snprintf(from, sizeof from, "%s/stallok/node000-10000-0001-signal.json", g_tmp);
  snprintf(to, sizeof to, "%s/stallok/node000-10000-0001-stall.json", g_tmp);
  CU_ASSERT_EQUAL_FATAL(make_stall_dump(from, to), 0);
  CU_ASSERT_EQUAL(unlink(from), 0);
  int rc;
  cJSON *rep = analyze_json("stallok", "", &rc);
  CU_ASSERT_PTR_NOT_NULL_FATAL(rep);
  const char *sum = sget(rep, "summary");
  CU_ASSERT_PTR_NOT_NULL(strstr(sum, "NO VERDICT: the stall dump of host node000 pid 10000 says AllReduce seq 40"));
  CU_ASSERT_PTR_NULL(strstr(sum, "OK"));
  cJSON_Delete(rep);
}

/* 40 graphs each with a launch its GPU is inside (short of any timeout) on rank 0: the bound
 * keeps 32; "no hang" cannot rest on what it left out, and the line says so. */
static void test_glaunch_cut(void) {
  CU_ASSERT_EQUAL_FATAL(gen("glcut", "--ranks 4 --scenario healthy --ring 16"), 0);
  char path[512];
  snprintf(path, sizeof path, "%s/glcut/node000-10000-0001-signal.json", g_tmp);
  char *text = slurp(path);
  cJSON *d = text ? cJSON_Parse(text) : NULL;
  free(text);
  CU_ASSERT_PTR_NOT_NULL_FATAL(d);
  cJSON *arr = cJSON_AddArrayToObject(cJSON_GetArrayItem(cJSON_GetObjectItem(d, "comms"), 0), "graphLaunches");
  for (int g = 1; g <= 40; g++) {
    cJSON *l = cJSON_CreateObject();
    cJSON_AddNumberToObject(l, "graph", g);
    cJSON_AddNumberToObject(l, "launch", 1);
    cJSON_AddStringToObject(l, "func", "AllReduce");
    cJSON_AddNumberToObject(l, "replays", 1);
    cJSON_AddStringToObject(l, "state", "inProgress");
    cJSON_AddNumberToObject(l, "forMs", 5);
    cJSON_AddItemToArray(arr, l);
  }
  char *out = cJSON_Print(d);
  cJSON_Delete(d);
  FILE *f = fopen(path, "w");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fputs(out, f);
  fclose(f);
  free(out);
  int rc;
  cJSON *rep = analyze_json("glcut", "", &rc);
  CU_ASSERT_PTR_NOT_NULL_FATAL(rep);
  CU_ASSERT_PTR_NOT_NULL(strstr(sget(rep, "summary"), "NO VERDICT: no hang found in what was read, but the "
                                                     "analyzer's bound (32 per rank) left out 8 captured launches"));
  cJSON_Delete(rep);
}

static int count_ph(const cJSON *events, const char *ph) {
  int n = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, events) n += strcmp(sget(e, "ph"), ph) == 0;
  return n;
}

static void test_trace(void) {
  CU_ASSERT_EQUAL_FATAL(gen("tr", "--ranks 4 --scenario not-entered --ring 40"), 0);
  CU_ASSERT_EQUAL(sh("%s --trace %s/tr.trace.json %s/tr >/dev/null", g_az, g_tmp, g_tmp), 0);
  char path[512];
  snprintf(path, sizeof(path), "%s/tr.trace.json", g_tmp);
  char *text = slurp(path);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  cJSON *t = cJSON_Parse(text);
  free(text);
  CU_ASSERT_PTR_NOT_NULL_FATAL(t);
  const cJSON *ev = cJSON_GetObjectItem(t, "traceEvents");
  CU_ASSERT_TRUE(cJSON_IsArray(ev));
  CU_ASSERT_TRUE(count_ph(ev, "X") > 10);
  CU_ASSERT_TRUE(count_ph(ev, "i") > 0);
  CU_ASSERT_TRUE(count_ph(ev, "s") > 0);
  CU_ASSERT_EQUAL(count_ph(ev, "s"), count_ph(ev, "f"));
  int procs = 0, open = 0, negative = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, ev) {
    if (strcmp(sget(e, "name"), "process_name") == 0) {
      procs++;
      if (nget(e, "pid") == 1)
        CU_ASSERT_STRING_EQUAL(sget(cJSON_GetObjectItem(e, "args"), "name"), "global rank 0 (node000:10000)");
    }
    open += cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "open"));
    negative += cJSON_GetObjectItem(e, "ts") && nget(e, "ts") < 0;
  }
  CU_ASSERT_EQUAL(procs, 4);
  CU_ASSERT_TRUE(open > 0); /* the stalled operations of ranks 0-2 */
  /* Completed steps come as spans; the open one from the open tree (its start is in no ring). */
  int step_done = 0, step_open = 0;
  cJSON_ArrayForEach(e, ev) {
    if (strcmp(sget(e, "ph"), "X") || strcmp(sget(e, "cat"), "ProxyStep")) continue;
    if (cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "open"))) step_open++;
    else step_done += nget(e, "dur") > 500.0 && strcmp(sget(cJSON_GetObjectItem(e, "args"), "lastState"), "RecvWait") == 0;
  }
  CU_ASSERT_TRUE(step_done > 10);
  CU_ASSERT_TRUE(step_open >= 3);
  CU_ASSERT_EQUAL(negative, 0);
  /* Markers: one dump marker per process, the stall the watchdog detected; a counter track of
   * completed seqs per communicator rank that climbs. */
  int dumps = 0, stalls = 0, counters = 0, climbs = 1;
  double last = -1;
  cJSON_ArrayForEach(e, ev) {
    const char *name = sget(e, "name");
    dumps += !strncmp(name, "dump (", 6);
    stalls += !strcmp(name, "stall detected");
    if (strcmp(sget(e, "ph"), "C") || nget(e, "pid") != 1) continue;
    counters++;
    double v = nget(cJSON_GetObjectItem(e, "args"), "AllReduce");
    if (v != -999 && last >= 0 && v < last) climbs = 0;
    if (v != -999) last = v;
  }
  CU_ASSERT_EQUAL(dumps, 4);
  CU_ASSERT_EQUAL(stalls, 1); /* the one stall dump of the not-entered scenario */
  CU_ASSERT_TRUE(counters > 5);
  CU_ASSERT_TRUE(climbs);
  const cJSON *other = cJSON_GetObjectItem(t, "otherData");
  CU_ASSERT_TRUE(nget(other, "slices") > 0);
  cJSON_Delete(t);
}

/* ---- 3-D parallel jobs: one verdict for the whole job (gen_dumps --layout) ---- */

static const cJSON *comm_named(const cJSON *rep, const char *name) {
  const cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(rep, "comms")) if (!strcmp(sget(c, "commName"), name)) return c;
  return NULL;
}

/* The text report of NAME/ (generated before), NULL when the analyzer wrote nothing. */
static char *analyze_text(const char *name, const char *extra) {
  char out[512];
  snprintf(out, sizeof(out), "%s/%s.out.txt", g_tmp, name);
  sh("%s -q %s %s/%s >%s 2>&1", g_az, extra, g_tmp, name, out);
  return slurp(out);
}

/* Threads that read and parse (--jobs) change the time, not the report: a 3-D job of 32 dumps,
 * some compressed, with unreadable files among them, gives byte-identical --json and the same
 * skipped-file messages with 1 and with 4 threads. */
static void test_jobs(void) {
  CU_ASSERT_EQUAL_FATAL(gen("jobs", "--layout 2x4x4 --scenario job-root --ring 64"), 0);
  CU_ASSERT_EQUAL(sh("cd %s/jobs && gzip node001-*.json && : >empty.json && echo junk >bad.json && "
                     "head -c 200 $(ls node002-*.json | head -1) >trunc.json",
                     g_tmp),
                  0);
  int rc1 = sh("%s --json -j 1 %s/jobs >%s/jobs.1.json 2>%s/jobs.1.err", g_az, g_tmp, g_tmp, g_tmp);
  int rc4 = sh("%s --json --jobs=4 %s/jobs >%s/jobs.4.json 2>%s/jobs.4.err", g_az, g_tmp, g_tmp, g_tmp);
  CU_ASSERT_EQUAL(rc1, 0);
  CU_ASSERT_EQUAL(rc4, 0);
  CU_ASSERT_EQUAL(sh("cmp -s %s/jobs.1.json %s/jobs.4.json", g_tmp, g_tmp), 0);
  CU_ASSERT_EQUAL(sh("cmp -s %s/jobs.1.err %s/jobs.4.err", g_tmp, g_tmp), 0);
  char path[512];
  snprintf(path, sizeof(path), "%s/jobs.4.json", g_tmp);
  char *text = slurp(path);
  cJSON *rep = text ? cJSON_Parse(text) : NULL;
  free(text);
  CU_ASSERT_PTR_NOT_NULL_FATAL(rep);
  CU_ASSERT_EQUAL(nget(rep, "dumpsRead"), 32);
  CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(rep, "skipped")), 3);
  const cJSON *root = cJSON_GetObjectItem(cJSON_GetObjectItem(rep, "job"), "root");
  CU_ASSERT_EQUAL(nget(root, "globalRank"), 20);
  cJSON_Delete(rep);
  CU_ASSERT_EQUAL(sh("%s -j 0 %s/jobs >/dev/null 2>&1", g_az, g_tmp), 2);
}

static void test_job_root(void) {
  cJSON *rep = gen_report("j_root", "--layout 2x4x4 --scenario job-root --ring 64", 0);
  const cJSON *job = cJSON_GetObjectItem(rep, "job");
  CU_ASSERT_PTR_NOT_NULL_FATAL(job);
  CU_ASSERT_FALSE(cJSON_IsTrue(cJSON_GetObjectItem(job, "deadlock")));
  const cJSON *root = cJSON_GetObjectItem(job, "root");
  CU_ASSERT_EQUAL(nget(root, "globalRank"), 20);
  CU_ASSERT_STRING_EQUAL(sget(root, "host"), "node002");
  CU_ASSERT_STRING_EQUAL(sget(root, "reason"), "not_entered");
  CU_ASSERT_EQUAL(nget(root, "gpu"), 4);
  const cJSON *chain = cJSON_GetObjectItem(job, "chain");
  CU_ASSERT_EQUAL(cJSON_GetArraySize(chain), 2);
  CU_ASSERT_EQUAL(strncmp(sget(cJSON_GetArrayItem(chain, 0), "commName"), "dp_t0_p", 7), 0);
  CU_ASSERT_STRING_EQUAL(sget(cJSON_GetArrayItem(chain, 1), "commName"), "pp_t0_d2");
  CU_ASSERT_EQUAL(nget(cJSON_GetArrayItem(chain, 1), "onGlobalRank"), 20);
  /* Per communicator, the tensor-parallel group also names the root, with its global rank. */
  const cJSON *tp = comm_named(rep, "tp_p2_d2");
  CU_ASSERT_STRING_EQUAL(sget(tp, "verdict"), "hang");
  const cJSON *s = cJSON_GetArrayItem(cJSON_GetObjectItem(tp, "suspects"), 0);
  CU_ASSERT_EQUAL(nget(s, "globalRank"), 20);
  cJSON_Delete(rep);
  char *text = analyze_text("j_root", "");
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  static const char want[] = "JOB: root cause rank 2 of pp_t0_d2 (global rank 20 on host node002, GPU 4";
  CU_ASSERT_EQUAL(strncmp(text, want, sizeof want - 1), 0);
  char *nl = strchr(text, '\n');
  if (nl) *nl = '\0';
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "DataLoader_next"));       /* what it is doing */
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "-> which waits in pp_t0_d2 Send to rank 2")); /* the chain */
  free(text);
}

static void test_job_deadlock(void) {
  cJSON *rep = gen_report("j_dl", "--layout 2x4x4 --scenario job-deadlock --ring 64", 0);
  const cJSON *job = cJSON_GetObjectItem(rep, "job");
  CU_ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(job, "deadlock")));
  CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(job, "root"));
  /* four communicators, and back to the first process */
  CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(job, "chain")), 5);
  cJSON_Delete(rep);
  char *text = analyze_text("j_dl", "");
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_EQUAL(strncmp(text, "JOB: deadlock across 4 communicators", 36), 0);
  free(text);
}

static void test_p2p_mismatch(void) {
  cJSON *rep = gen_report("j_p2p", "--layout 2x4x4 --scenario p2p-mismatch --ring 64", 0);
  const cJSON *pp = comm_named(rep, "pp_t0_d2");
  CU_ASSERT_STRING_EQUAL(sget(pp, "verdict"), "hang");
  const cJSON *sus = cJSON_GetObjectItem(pp, "suspects");
  CU_ASSERT_EQUAL(nget(cJSON_GetArrayItem(sus, 0), "rank"), 2);
  CU_ASSERT_STRING_EQUAL(sget(cJSON_GetArrayItem(sus, 0), "reason"), "p2p_mismatch");
  CU_ASSERT_PTR_NOT_NULL(strstr(sget(cJSON_GetArrayItem(sus, 0), "detail"),
                                "is in Recv from rank 3 instead of the Recv from rank 1"));
  CU_ASSERT_EQUAL(nget(cJSON_GetArrayItem(sus, 1), "rank"), 3);
  CU_ASSERT_STRING_EQUAL(sget(cJSON_GetArrayItem(sus, 1), "reason"), "p2p_mismatch");
  CU_ASSERT_EQUAL(count_culprits(pp), 2);
  CU_ASSERT_FALSE(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(rep, "job"), "deadlock")));
  cJSON_Delete(rep);
}

static void expect_link_end(const cJSON *s, int rank, int peer, const char *host) {
  CU_ASSERT_EQUAL(nget(s, "rank"), rank);
  CU_ASSERT_STRING_EQUAL(sget(s, "reason"), "dead_link");
  CU_ASSERT_EQUAL(nget(s, "linkPeer"), peer);
  CU_ASSERT_EQUAL(nget(s, "linkChannel"), 1);
  CU_ASSERT_STRING_EQUAL(sget(s, "host"), host);
}

static void test_dead_link(void) {
  cJSON *rep = gen_report("j_link", "--layout 2x4x4 --scenario dead-link --ring 64", 0);
  const cJSON *dp = comm_named(rep, "dp_t0_p2");
  CU_ASSERT_STRING_EQUAL(sget(dp, "verdict"), "hang");
  CU_ASSERT_EQUAL(count_culprits(dp), 2);
  const cJSON *sus = cJSON_GetObjectItem(dp, "suspects");
  expect_link_end(cJSON_GetArrayItem(sus, 0), 1, 2, "node001");
  expect_link_end(cJSON_GetArrayItem(sus, 1), 2, 1, "node002");
  CU_ASSERT_PTR_NOT_NULL(strstr(sget(rep, "summary"), "dead link between rank 1 (host node001) "
                                                      "and rank 2 (host node002) on channel 1"));
  const cJSON *job = cJSON_GetObjectItem(rep, "job");
  CU_ASSERT_FALSE(cJSON_IsTrue(cJSON_GetObjectItem(job, "deadlock")));
  CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(job, "networkHost")); /* one link: no host to blame */
  cJSON_Delete(rep);
}

/* ---- dead links by the steps' states ---- */

/* The two ends of the link from rank 7 (node000) to rank 8 (node001) on channel 1, and nobody
 * else; the summary names them with their hosts. */
static void expect_state_link(cJSON *rep, int pxn) {
  const cJSON *c = comm0(rep);
  CU_ASSERT_STRING_EQUAL(sget(c, "verdict"), "hang");
  CU_ASSERT_EQUAL(count_culprits(c), 2);
  const cJSON *sus = cJSON_GetObjectItem(c, "suspects");
  const cJSON *a = cJSON_GetArrayItem(sus, 0), *b = cJSON_GetArrayItem(sus, 1);
  CU_ASSERT_EQUAL(nget(a, "rank"), 7);
  CU_ASSERT_STRING_EQUAL(sget(a, "reason"), "dead_link");
  CU_ASSERT_EQUAL(nget(a, "linkPeer"), 8);
  CU_ASSERT_EQUAL(nget(a, "linkChannel"), 1);
  CU_ASSERT_EQUAL(nget(b, "rank"), 8);
  CU_ASSERT_EQUAL(nget(b, "linkPeer"), 7);
  const char *sum = sget(rep, "summary");
  CU_ASSERT_PTR_NOT_NULL(strstr(sum, "dead link between rank 7 (host node000) and rank 8 (host "
                                     "node001) on channel 1: rank 7's send"));
  CU_ASSERT_PTR_NOT_NULL(strstr(sum, "handed step 4 to the network"));
  CU_ASSERT_PTR_NOT_NULL(strstr(sum, "rank 8 has received nothing for it (RecvWait"));
  CU_ASSERT_EQUAL(strstr(sum, "PXN send, progressed by rank 6's process") != NULL, pxn);
}

static void test_link_tick(void) {
  /* Every rank stalled within 50 ms of the others: time cannot tell, the states can. */
  cJSON *rep = gen_report("s_tick", "--ranks 16 --victim 8 --scenario link-tick --ring 64", 0);
  expect_state_link(rep, 0);
  cJSON_Delete(rep);
}

static void test_pxn_link(void) {
  cJSON *rep = gen_report("s_pxn", "--ranks 16 --victim 8 --scenario pxn-link --ring 64", 0);
  expect_state_link(rep, 1);
  cJSON_Delete(rep);
  /* Every process pid 4242 (PID namespaces): the originating rank joins the send to rank 7. */
  rep = gen_report("s_pxn_pid", "--ranks 16 --victim 8 --scenario pxn-link --ring 64 --same-pid", 0);
  expect_state_link(rep, 1);
  cJSON_Delete(rep);
}

static void test_pxn_p2p(void) {
  cJSON *rep = gen_report("s_pxn_p2p", "--ranks 16 --victim 8 --scenario pxn-p2p --ring 64", 0);
  expect_state_link(rep, 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(sget(rep, "summary"), "ranks 7-8 are waiting in point-to-point"));
  cJSON_Delete(rep);
}

static void test_dead_host(void) {
  cJSON *rep = gen_report("j_host", "--layout 2x4x4 --scenario dead-host --ring 64", 0);
  const cJSON *h = cJSON_GetObjectItem(cJSON_GetObjectItem(rep, "job"), "networkHost");
  CU_ASSERT_STRING_EQUAL(sget(h, "host"), "node002");
  CU_ASSERT_EQUAL(nget(h, "processes"), 8);
  cJSON_Delete(rep);
  char *text = analyze_text("j_host", "");
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_EQUAL(strncmp(text, "HOST: 8 processes of host node002 wait on the network", 53), 0);
  free(text);
}

static void test_straggler(void) {
  cJSON *rep = gen_report("j_strag", "--layout 2x4x4 --scenario straggler --ring 64", 0);
  CU_ASSERT_EQUAL(strncmp(sget(rep, "summary"), "OK:", 3), 0); /* late is not hung */
  int nstrag = 0, nsus = 0;
  const cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(rep, "comms")) {
    CU_ASSERT_STRING_EQUAL(sget(c, "verdict"), "no_hang");
    nsus += cJSON_GetArraySize(cJSON_GetObjectItem(c, "suspects"));
    const cJSON *g;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(c, "stragglers")) {
      nstrag++;
      CU_ASSERT_EQUAL(nget(g, "globalRank"), 20);
      CU_ASSERT_TRUE(nget(g, "lagMs") > 1900 && nget(g, "lagMs") < 2100);
    }
  }
  CU_ASSERT_EQUAL(nsus, 0);
  CU_ASSERT_EQUAL(nstrag, 2); /* its pp and dp groups; a 2-rank tp group has no median */
  cJSON_Delete(rep);
  char *text = analyze_text("j_strag", "");
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  char *l2 = text ? strchr(text, '\n') : NULL;
  CU_ASSERT_PTR_NOT_NULL_FATAL(l2);
  CU_ASSERT_EQUAL(strncmp(l2 + 1, "STRAGGLERS (slow, not hung): global rank 20 on host node002", 59), 0);
  free(text);
  /* A higher threshold: no straggler. */
  int rc;
  rep = analyze_json("j_strag", "--straggler-ms=2500", &rc);
  CU_ASSERT_PTR_NOT_NULL_FATAL(rep);
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(rep, "comms"))
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(c, "stragglers")), 0);
  cJSON_Delete(rep);
}

static void test_crashed(void) {
  cJSON *rep = gen_report("j_died", "--layout 2x4x4 --scenario crashed --ring 64", 0);
  const cJSON *root = cJSON_GetObjectItem(cJSON_GetObjectItem(rep, "job"), "root");
  CU_ASSERT_STRING_EQUAL(sget(root, "reason"), "died");
  CU_ASSERT_EQUAL(nget(root, "globalRank"), 20);
  cJSON_Delete(rep);
  rep = gen_report("j_gone", "--layout 2x4x4 --scenario vanished --ring 64", 0);
  const cJSON *chain = cJSON_GetObjectItem(cJSON_GetObjectItem(rep, "job"), "chain");
  const cJSON *last = cJSON_GetArrayItem(chain, cJSON_GetArraySize(chain) - 1);
  CU_ASSERT_STRING_EQUAL(sget(last, "commName"), "pp_t0_d2");
  CU_ASSERT_EQUAL(nget(last, "onRank"), 2);
  CU_ASSERT_STRING_EQUAL(sget(last, "onReason"), "missing");
  cJSON_Delete(rep);
}

static void test_healthy_3d(void) {
  cJSON *rep = gen_report("j_ok", "--layout 2x4x4 --scenario healthy --ring 64", 0);
  CU_ASSERT_EQUAL(strncmp(sget(rep, "summary"), "OK: no hang found in 32 communicators", 37), 0);
  CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(rep, "job"));
  const cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(rep, "comms")) {
    CU_ASSERT_STRING_EQUAL(sget(c, "verdict"), "no_hang");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(c, "stragglers")), 0);
  }
  cJSON_Delete(rep);
}

/* GNU conventions: --opt=value, bundled short options, "--", errors naming the option. */
static void test_cli(void) {
  CU_ASSERT_EQUAL_FATAL(gen("cli", "--ranks=4 --scenario=healthy --ring=16"), 0);
  CU_ASSERT_EQUAL(sh("%s -vq --stall-ms=5 -- %s/cli >/dev/null", g_az, g_tmp), 0);
  CU_ASSERT_EQUAL(sh("%s --bogus %s/cli >%s/cli.err 2>&1", g_az, g_tmp, g_tmp), 2);
  char path[512];
  snprintf(path, sizeof path, "%s/cli.err", g_tmp);
  char *err = slurp(path);
  CU_ASSERT_PTR_NOT_NULL(err && strstr(err, "--bogus: unknown option"));
  free(err);
  CU_ASSERT_EQUAL(sh("%s --stall-ms=abc %s/cli >%s/cli.err 2>&1", g_az, g_tmp, g_tmp), 2);
  err = slurp(path);
  CU_ASSERT_PTR_NOT_NULL(err && strstr(err, "--stall-ms=abc"));
  free(err);
  CU_ASSERT_EQUAL(sh("%s --version | grep -Eq '^nccl-watchdog-analyze [0-9]+\\.[0-9]+'", g_az), 0);
  CU_ASSERT_EQUAL(sh("%s --help | grep -q 'examples:'", g_az), 0);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: test_analyzer GEN_DUMPS ANALYZER\n");
    return 2;
  }
  g_gen = argv[1];
  g_az = argv[2];
  const char *tmp = getenv("TMPDIR");
  snprintf(g_tmp, sizeof(g_tmp), "%s/wd-az-test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(g_tmp)) return 2;
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  CU_pSuite unit = CU_add_suite("analyzer_unit", NULL, NULL);
  CU_add_test(unit, "ranges", test_ranges);
  CU_add_test(unit, "load_rejects", test_load_rejects);
  CU_add_test(unit, "load_minimal", test_load_minimal);
  CU_add_test(unit, "load_truncations", test_load_truncations);
  CU_pSuite cli = CU_add_suite("analyzer_cli", NULL, NULL);
  CU_add_test(cli, "healthy", test_healthy);
  CU_add_test(cli, "not_entered", test_not_entered);
  CU_add_test(cli, "not_entered_wrapped_multi_comm", test_not_entered_wrapped_multi_comm);
  CU_add_test(cli, "missing_rank", test_missing_rank);
  CU_add_test(cli, "mismatch", test_mismatch);
  CU_add_test(cli, "network_stall", test_network_stall);
  CU_add_test(cli, "wrapped", test_wrapped);
  CU_add_test(cli, "bad_files", test_bad_files);
  CU_add_test(cli, "newest_dump", test_newest_dump);
  CU_add_test(cli, "stall_never_ok", test_stall_never_ok);
  CU_add_test(cli, "glaunch_cut", test_glaunch_cut);
  CU_add_test(cli, "trace", test_trace);
  CU_add_test(cli, "cli", test_cli);
  CU_pSuite job = CU_add_suite("analyzer_job_3d", NULL, NULL);
  CU_add_test(job, "job_root", test_job_root);
  CU_add_test(job, "job_deadlock", test_job_deadlock);
  CU_add_test(job, "p2p_mismatch", test_p2p_mismatch);
  CU_add_test(job, "dead_link", test_dead_link);
  CU_add_test(job, "link_tick", test_link_tick);
  CU_add_test(job, "pxn_link", test_pxn_link);
  CU_add_test(job, "pxn_p2p", test_pxn_p2p);
  CU_add_test(job, "dead_host", test_dead_host);
  CU_add_test(job, "straggler", test_straggler);
  CU_add_test(job, "crashed", test_crashed);
  CU_add_test(job, "healthy_3d", test_healthy_3d);
  CU_add_test(job, "jobs", test_jobs);
  CU_basic_set_mode(CU_BRM_VERBOSE);
  CU_basic_run_tests();
  unsigned failed = CU_get_number_of_tests_failed() + CU_get_number_of_failures();
  CU_cleanup_registry();
  wd_az_strings_free();
  if (!failed) sh("rm -rf %s", g_tmp);
  return failed ? 1 : 0;
}
