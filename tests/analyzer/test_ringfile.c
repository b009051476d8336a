/*
 * Ring files: the plugin's writer (src/flightrec/ringfile.c) against the analyzer's decoder
 * (tools/analyze/ringfile.c). A file torn at any byte, truncated anywhere or of another version
 * is reported, never trusted, never a crash (CI runs this under ASan+UBSan).
 */
#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/host.h"
#include "flightrec/ring.h"
#include "flightrec/ringfile.h"
#include "incarnation.h"
#include "load.h"
#include "model.h"
#include "ringfile.h"

static char g_dir[256];

/* Coll starts seq 0..n-1 (AllReduce, ncclFloat32 from the file's string table), 1 us apart. */
static void put_colls(wd_ring *r, uint64_t t0, int n) {
  for (int i = 0; i < n; i++) {
    wd_record rec;
    memset(&rec, 0, sizeof rec);
    rec.type = WD_T_COLL;
    rec.phase = WD_PH_START;
    rec.func = 1;
    rec.dtype = 2;
    rec.a = (uint64_t)i;
    rec.ts_ns = t0 + (uint64_t)i * 1000;
    rec.count = 1024;
    wd_ring_write(r, &rec);
  }
}

/* The identity a communicator's init gives a file (one node, ABI v6). */
static void name_file(wd_rf_header *h, int rank, int nranks, uint64_t comm_id, const char *host, const char *name) {
  h->rank = rank;
  h->nranks = nranks;
  h->nnodes = 1;
  h->abi = 6;
  h->comm_id = comm_id;
  snprintf(h->host, sizeof h->host, "%s", host);
  snprintf(h->comm_name, sizeof h->comm_name, "%s", name);
}

/* A file for comm 0xabc rank 2 of 4: 40 Coll starts (seq 0..39) through a 16-record ring, 5
 * ProxyOp starts in the proxy ring. Returns its bytes (malloc'ed). */
static char *make_file(size_t *len, char *path, size_t path_len) {
  wd_ringfile f;
  if (wd_ringfile_create(&f, g_dir, "testhost", 16, 16) != 0) return NULL;
  snprintf(path, path_len, "%s", f.path);
  wd_ring r, pr;
  wd_ring_init_at(&r, 16, wd_ringfile_ring(&f, 0), 16);
  wd_ring_init_at(&pr, 16, wd_ringfile_ring(&f, 1), 16);
  wd_rf_header *h = wd_ringfile_header(&f);
  name_file(h, 2, 4, 0xabc, "testhost", "pm");
  wd_ringfile_seal_identity(&f);
  /* As strtab.c does when the process interns a string: into every open file. */
  wd_ringfile_note_string(1, "AllReduce");
  wd_ringfile_note_string(2, "ncclFloat32");
  wd_ringfile_live_begin(&f);
  h->nseq = 1;
  h->seq[0] = (wd_rf_seq){.func = 1, .enqueued = 38, .completed = 37};
  wd_ringfile_live_end(&f);
  put_colls(&r, h->bind_mono_ns, 40);
  for (int i = 0; i < 5; i++) {
    wd_record rec;
    memset(&rec, 0, sizeof rec);
    rec.type = WD_T_PROXYOP;
    rec.phase = WD_PH_START;
    rec.ts_ns = h->bind_mono_ns + 50000;
    wd_ring_write(&pr, &rec);
  }
  *len = (size_t)f.bytes;
  char *buf = malloc(*len);
  if (buf) memcpy(buf, f.base, *len);
  wd_ringfile_close(&f, 1); /* kept: as a killed process leaves it */
  return buf;
}

static double jnum(cJSON *o, const char *a, const char *b) {
  cJSON *x = cJSON_GetObjectItem(o, a);
  if (b) x = cJSON_GetObjectItem(x, b);
  return cJSON_IsNumber(x) ? x->valuedouble : -1e9;
}

/* The completion words: kept as operations complete, so a process killed between two refreshes
 * of the live part still says what it completed; a function whose probe is full is not kept
 * (the live part's counters stand); a file whose live part is torn still says it. */
static void test_done(void) {
  wd_ringfile f;
  CU_ASSERT_EQUAL_FATAL(wd_ringfile_create(&f, g_dir, "testhost", 16, 16), 0);
  wd_ring r;
  wd_ring_init_at(&r, 16, wd_ringfile_ring(&f, 0), 16);
  wd_rf_header *h = wd_ringfile_header(&f);
  name_file(h, 0, 2, 0xd0e, "testhost", "done");
  wd_ringfile_seal_identity(&f);
  wd_ringfile_note_string(1, "AllReduce");
  wd_rf_header *kept = wd_ringfile_done_reset(&f);
  CU_ASSERT_PTR_NOT_NULL_FATAL(kept);
  uint64_t *done = kept->done;
  CU_ASSERT_PTR_NOT_NULL_FATAL(done);
  wd_ringfile_live_begin(&f);
  h->nseq = 1;
  h->seq[0] = (wd_rf_seq){.func = 1, .enqueued = 38, .completed = 37};
  h->p2p_enqueued = 9;
  h->p2p_completed = 5;
  wd_ringfile_live_end(&f);
  put_colls(&r, h->bind_mono_ns, 40);
  /* Since the refresh: AllReduce 38 and 39 completed (in any order), 7 P2p. */
  wd_rf_done_put(done, 1, 0, 39);
  wd_rf_done_put(done, 1, 0, 38);
  h->p2p_done = 7;
  /* Functions whose ids probe the same words: four fit, a fifth is not kept. */
  for (unsigned k = 1; k <= 4; k++) wd_rf_done_put(done, 1 + 24 * k, 0, 100 + k);
  for (unsigned k = 1; k <= 3; k++) CU_ASSERT_EQUAL(wd_rf_done_get(done, 1 + 24 * k, 0), 100 + (int64_t)k);
  CU_ASSERT_EQUAL(wd_rf_done_get(done, 1 + 24 * 4, 0), -1);
  CU_ASSERT_EQUAL(wd_rf_done_get(done, 1, 0), 39);
  CU_ASSERT_EQUAL(wd_rf_done_get(done, 1, 1), -1); /* CeColl AllReduce: another word */
  size_t len = (size_t)f.bytes;
  char *buf = malloc(len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
  memcpy(buf, f.base, len);
  char path[600], why[256] = "";
  snprintf(path, sizeof path, "%s", f.path);
  wd_ringfile_close(&f, 0);
  for (int torn = 0; torn < 2; torn++) {
    if (torn) ((wd_rf_header *)buf)->live_gen |= 1; /* killed inside a refresh */
    cJSON *doc = wd_az_ringfile_decode(buf, len, path, why, sizeof why);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "comms"), 0);
    cJSON *s = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "seq"), 0);
    CU_ASSERT_EQUAL(jnum(s, "lastEnqueued", NULL), 39);
    CU_ASSERT_EQUAL(jnum(s, "lastCompleted", NULL), 39);
    CU_ASSERT_EQUAL(jnum(c, "p2p", "completed"), 7);
    /* Nothing of AllReduce in flight: 38 and 39 completed. */
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(c, "inflight")), 0);
    cJSON_Delete(doc);
  }
  /* Without the words (an earlier plugin's file): the live part's 37, 38 and 39 in flight. */
  ((wd_rf_header *)buf)->live_gen &= ~1ull;
  ((wd_rf_header *)buf)->done_magic = 0;
  cJSON *doc = wd_az_ringfile_decode(buf, len, path, why, sizeof why);
  CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
  cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "comms"), 0);
  CU_ASSERT_EQUAL(jnum(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "seq"), 0), "lastCompleted", NULL), 37);
  CU_ASSERT_EQUAL(jnum(c, "p2p", "completed"), 5);
  CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(c, "inflight")), 2);
  cJSON_Delete(doc);
  free(buf);
}

/* A process killed before the watchdog allocated its ring whole: the records wrapped within the
 * part allocated at creation, and the decoder finds the newest of them there. */
static void test_wrapped(void) {
  wd_ringfile f;
  CU_ASSERT_EQUAL_FATAL(wd_ringfile_create(&f, g_dir, "testhost", 1024, 16), 0);
  wd_ring r, pr;
  wd_ring_init_at(&r, 1024, wd_ringfile_ring(&f, 0), WD_RF_INITIAL_RECORDS);
  wd_ring_init_at(&pr, 16, wd_ringfile_ring(&f, 1), 16);
  wd_rf_header *h = wd_ringfile_header(&f);
  h->rank = 0;
  h->nranks = 2;
  h->comm_id = 0xabd;
  wd_ringfile_seal_identity(&f);
  put_colls(&r, h->bind_mono_ns, 300);
  char why[256] = "";
  cJSON *doc = wd_az_ringfile_decode(f.base, (size_t)f.bytes, f.path, why, sizeof why);
  CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
  cJSON *ring = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "comms"), 0), "ring");
  cJSON *recs = cJSON_GetObjectItem(ring, "records");
  CU_ASSERT_EQUAL(cJSON_GetArraySize(recs), (int)WD_RF_INITIAL_RECORDS); /* 172..299 */
  CU_ASSERT_EQUAL(jnum(ring, "written", NULL), 300);
  CU_ASSERT_EQUAL(jnum(ring, "lost", NULL), 300 - WD_RF_INITIAL_RECORDS);
  CU_ASSERT_EQUAL(jnum(ring, "torn", NULL), 0);
  CU_ASSERT_EQUAL(jnum(cJSON_GetArrayItem(recs, 0), "seq", NULL), 300 - WD_RF_INITIAL_RECORDS);
  CU_ASSERT_EQUAL(jnum(cJSON_GetArrayItem(recs, (int)WD_RF_INITIAL_RECORDS - 1), "seq", NULL), 299);
  cJSON_Delete(doc);
  wd_ringfile_close(&f, 0);
}

/* The files of one process decoded as one dump (the salvage of a running process): against a
 * later reference instant, the dump's time is that instant and every record's offset from it
 * grows by the difference; an instant a day away is not believed. */
static void test_decode_at(void) {
  size_t len;
  char path[600];
  char *buf = make_file(&len, path, sizeof path);
  CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
  char why[256] = "";
  cJSON *a = wd_az_ringfile_decode(buf, len, path, why, sizeof why);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a);
  uint64_t ma = strtoull(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "time"), "mono_ns")), NULL, 16);
  cJSON *b = wd_az_ringfile_decode_at(buf, len, path, ma + 1500000000ull, why, sizeof why);
  cJSON *c = wd_az_ringfile_decode_at(buf, len, path, ma + 2 * 86400ull * 1000000000ull, why, sizeof why);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(c);
  uint64_t mb = strtoull(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "time"), "mono_ns")), NULL, 16);
  uint64_t mc = strtoull(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "time"), "mono_ns")), NULL, 16);
  CU_ASSERT_EQUAL(mb, ma + 1500000000ull);
  CU_ASSERT_EQUAL(mc, ma);
  cJSON *ra = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(a, "comms"), 0), "ring"), "records");
  cJSON *rb = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(b, "comms"), 0), "ring"), "records");
  CU_ASSERT_TRUE_FATAL(cJSON_GetArraySize(ra) > 0 && cJSON_GetArraySize(ra) == cJSON_GetArraySize(rb));
  for (int i = 0; i < cJSON_GetArraySize(ra); i++)
    CU_ASSERT_DOUBLE_EQUAL(jnum(cJSON_GetArrayItem(ra, i), "t", NULL) - 1500000000.0,
                           jnum(cJSON_GetArrayItem(rb, i), "t", NULL), 0.5);
  cJSON_Delete(a);
  cJSON_Delete(b);
  cJSON_Delete(c);
  free(buf);
}

static void test_decode(void) {
  size_t len;
  char path[600];
  char *buf = make_file(&len, path, sizeof path);
  CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
  /* Private, exclusive, named with host and pid. */
  CU_ASSERT_PTR_NOT_NULL(strstr(path, "testhost-"));
  char why[256] = "";
  cJSON *doc = wd_az_ringfile_decode(buf, len, path, why, sizeof why);
  CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
  CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(doc, "reason")), "postmortem");
  CU_ASSERT_EQUAL(jnum(doc, "pid", NULL), getpid());
  cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "comms"), 0);
  CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(c, "commId")), "0xabc");
  CU_ASSERT_EQUAL(jnum(c, "rank", NULL), 2);
  CU_ASSERT_EQUAL(jnum(c, "nranks", NULL), 4);
  /* The newest of header and records: the ring saw seq 39 after the last refresh said 38. */
  cJSON *s = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "seq"), 0);
  CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(s, "func")), "AllReduce");
  CU_ASSERT_EQUAL(jnum(s, "lastEnqueued", NULL), 39);
  CU_ASSERT_EQUAL(jnum(s, "lastCompleted", NULL), 37);
  cJSON *ring = cJSON_GetObjectItem(c, "ring");
  CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(ring, "records")), 16);
  CU_ASSERT_EQUAL(jnum(ring, "written", NULL), 40);
  CU_ASSERT_EQUAL(jnum(ring, "torn", NULL), 0);
  cJSON *last = cJSON_GetArrayItem(cJSON_GetObjectItem(ring, "records"), 15);
  CU_ASSERT_EQUAL(jnum(last, "seq", NULL), 39);
  CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "proxyRing"), "records")), 5);
  cJSON_Delete(doc);

  /* The analyzer reads it as a dump. */
  wd_az_set set;
  memset(&set, 0, sizeof set);
  CU_ASSERT_EQUAL(wd_az_load_buffer(&set, path, buf, len, why, sizeof why), 0);
  CU_ASSERT_EQUAL(set.ndumps, 1);
  wd_az_set_free(&set);
  wd_az_load_release();

  /* A record torn by one byte is counted, not trusted. */
  const wd_rf_header *h = (const wd_rf_header *)buf;
  buf[h->ring_off + 5 * sizeof(wd_record) + 20] ^= 0x40;
  doc = wd_az_ringfile_decode(buf, len, path, why, sizeof why);
  CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
  ring = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "comms"), 0), "ring");
  CU_ASSERT_EQUAL(jnum(ring, "torn", NULL), 1);
  CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(ring, "records")), 15);
  cJSON_Delete(doc);
  unlink(path);
  free(buf);
}

static void test_corrupt(void) {
  size_t len;
  char path[600];
  char *orig = make_file(&len, path, sizeof path);
  CU_ASSERT_PTR_NOT_NULL_FATAL(orig);
  unlink(path);
  char *buf = malloc(len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
  char why[256];
  int rejected_ident = 0, ident_bytes = (int)offsetof(wd_rf_header, ident_sum) + 8;
  /* Every byte of the header and string table, and every 7th byte of the rings, each flipped
   * alone: decoded or reported, never a crash; any change to the identity is caught. */
  for (size_t i = 0; i < len; i += i < WD_RF_HEADER_BYTES + WD_RF_STRINGS * WD_RF_STRLEN ? 1 : 7) {
    memcpy(buf, orig, len);
    buf[i] ^= (char)0xa5;
    cJSON *doc = wd_az_ringfile_decode(buf, len, "x", why, sizeof why);
    if (i < (size_t)ident_bytes && !doc) rejected_ident++;
    cJSON_Delete(doc);
  }
  CU_ASSERT_EQUAL(rejected_ident, ident_bytes);
  /* Truncated anywhere. */
  for (size_t n = 0; n < len; n += 61) {
    cJSON *doc = wd_az_ringfile_decode(orig, n, "x", why, sizeof why);
    CU_ASSERT_PTR_NULL(doc);
    cJSON_Delete(doc);
  }
  /* Another version: said so. */
  memcpy(buf, orig, len);
  ((wd_rf_header *)buf)->version = WD_RF_VERSION + 1;
  CU_ASSERT_PTR_NULL(wd_az_ringfile_decode(buf, len, "x", why, sizeof why));
  CU_ASSERT_PTR_NOT_NULL(strstr(why, "version 4"));
  /* Version 2 (before the open-events list) still decodes, without the list. */
  memcpy(buf, orig, len);
  ((wd_rf_header *)buf)->version = 2;
  ((wd_rf_header *)buf)->nopen = 1;
  ((wd_rf_header *)buf)->ident_sum = wd_rf_ident_sum((wd_rf_header *)buf);
  cJSON *v2 = wd_az_ringfile_decode(buf, len, "x", why, sizeof why);
  CU_ASSERT_PTR_NOT_NULL_FATAL(v2);
  cJSON *c2 = cJSON_GetArrayItem(cJSON_GetObjectItem(v2, "comms"), 0);
  CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(c2, "open")), 0);
  cJSON_Delete(v2);
  /* Random garbage after a valid magic. */
  srand(7);
  for (int k = 0; k < 200; k++) {
    for (size_t i = 8; i < len; i++) buf[i] = (char)rand();
    memcpy(buf, WD_RF_MAGIC, 8);
    cJSON_Delete(wd_az_ringfile_decode(buf, len, "x", why, sizeof why));
  }
  free(buf);
  free(orig);
}

/* A ring file of process getpid() that says it started start_ns, in PID namespace pidns, on this
 * machine (boot id, host name): its path in out. */
static int make_placed(const wd_process_id *me, uint64_t start_ns, uint64_t pidns, char *out, size_t len) {
  wd_ringfile_set_process(start_ns, me->boot_id, pidns);
  wd_ringfile f;
  if (wd_ringfile_create(&f, g_dir, "here", 16, 16) != 0) return -1;
  snprintf(out, len, "%s", f.path);
  wd_rf_header *h = wd_ringfile_header(&f);
  char host[64];
  wd_hostname(host, sizeof host);
  name_file(h, 0, 2, 0xd0d, host, "placed");
  wd_ringfile_seal_identity(&f);
  wd_ringfile_live_begin(&f);
  wd_ringfile_live_end(&f);
  wd_ringfile_close(&f, 1);
  return 0;
}

/* Whether the analyzer tells a ring file of a running process of this machine from a dead one's
 * by /proc, and only where /proc speaks of that process: the same PID namespace and start. */
static void test_placed(void) {
  wd_process_id me;
  wd_process_identity(&me);
  if (!me.start_wall_ns || !me.boot_id[0] || !me.pidns_ino) {
    printf("skipped: no /proc identity here\n");
    return;
  }
  char alive[600], other_ns[600], reused[600];
  CU_ASSERT_EQUAL_FATAL(make_placed(&me, me.start_wall_ns, me.pidns_ino, alive, sizeof alive), 0);
  CU_ASSERT_EQUAL_FATAL(make_placed(&me, me.start_wall_ns, me.pidns_ino + 1, other_ns, sizeof other_ns), 0);
  CU_ASSERT_EQUAL_FATAL(make_placed(&me, me.start_wall_ns - 10000000000ull, me.pidns_ino, reused, sizeof reused), 0);
  wd_ringfile_set_process(0, "", 0);
  wd_az_set set;
  memset(&set, 0, sizeof set);
  CU_ASSERT_EQUAL(wd_az_load_path(&set, alive, 1), 0);
  CU_ASSERT_EQUAL(wd_az_load_path(&set, other_ns, 1), 0);
  CU_ASSERT_EQUAL(wd_az_load_path(&set, reused, 1), 0);
  CU_ASSERT_EQUAL_FATAL(set.ndumps, 3);
  wd_az_select(&set, 0);
  for (size_t i = 0; i < set.ndumps; i++) {
    const char *reason = wd_az_s(set.dumps[i].reason);
    const char *want = !strcmp(set.dumps[i].path, alive) ? "live" : "postmortem";
    if (strcmp(reason, want) != 0) printf("%s: %s, want %s\n", set.dumps[i].path, reason, want);
    CU_ASSERT_STRING_EQUAL(reason, want);
  }
  CU_ASSERT_PTR_NOT_NULL(strstr(set.attempt_note, "1 ring file of running processes"));
  wd_az_set_free(&set);
  wd_az_load_release();
  unlink(alive);
  unlink(other_ns);
  unlink(reused);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/wd-rf-test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(g_dir)) return 2;
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  CU_pSuite s = CU_add_suite("ringfile", NULL, NULL);
  CU_add_test(s, "write, decode, load, a torn record", test_decode);
  CU_add_test(s, "records wrapped before the ring was allocated whole", test_wrapped);
  CU_add_test(s, "completions kept as they happen", test_done);
  CU_add_test(s, "one process's files against one instant", test_decode_at);
  CU_add_test(s, "every byte corrupted, truncations, versions, garbage", test_corrupt);
  CU_add_test(s, "a running process's file told apart by /proc, only its own", test_placed);
  CU_basic_set_mode(CU_BRM_VERBOSE);
  CU_basic_run_tests();
  unsigned failed = CU_get_number_of_failures();
  CU_cleanup_registry();
  rmdir(g_dir);
  return failed ? 1 : 0;
}
