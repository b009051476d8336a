/*
 * Scenario 2: a hang. One ProxyStep is left in RecvWait; the watchdog must write one `stall` dump
 * within timeout + 2 polls naming the communicator, rank, function and seq, with the open tree
 * Coll -> ProxyOp -> ProxyStep(RecvWait); one dump per episode; re-armed after progress resumes.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_host.h"

#define TIMEOUT_MS 300
#define POLL_MS 50
#define COMM_ID 0x0123456789abcdefull

static cJSON *find_child(cJSON *node, const char *type, int channel, int is_send) {
  cJSON *kids = cJSON_GetObjectItemCaseSensitive(node, "children");
  cJSON *k;
  cJSON_ArrayForEach(k, kids) {
    const char *t = wdh_jstr(k, "type");
    if (!t || strcmp(t, type) != 0) continue;
    if (channel >= 0 && (int)wdh_jnum(k, "channel", -1) != channel) continue;
    if (is_send >= 0 && cJSON_IsTrue(cJSON_GetObjectItem(k, "isSend")) != is_send) continue;
    return k;
  }
  return NULL;
}

/* Checks one stall dump against what the host did. */
static void check_stall_dump(const char *path, uint64_t seq, int channel, int step) {
  cJSON *j = wdh_json_load(path);
  WDH_CHECK(j != NULL, "cannot parse %s", path);
  if (!j) return;
  WDH_CHECK(wdh_validate_dump(path) == 0, "%s does not validate", path);
  const char *fmt = wdh_jstr(j, "format");
  WDH_CHECK(fmt && strcmp(fmt, "nccl-watchdog-dump") == 0, "format %s", fmt ? fmt : "(none)");
  const char *reason = wdh_jstr(j, "reason");
  WDH_CHECK(reason && strcmp(reason, "stall") == 0, "reason %s", reason ? reason : "(none)");
  WDH_CHECK((pid_t)wdh_jnum(j, "pid", -1) == getpid(), "pid %g", wdh_jnum(j, "pid", -1));

  const char *cid = wdh_jstr(j, "trigger.stalls.0.commId");
  WDH_CHECK(cid && strtoull(cid, NULL, 16) == COMM_ID, "stall commId %s", cid ? cid : "(none)");
  WDH_CHECK(wdh_jnum(j, "trigger.stalls.0.rank", -1) == 3, "stall rank %g",
            wdh_jnum(j, "trigger.stalls.0.rank", -1));
  const char *func = wdh_jstr(j, "trigger.stalls.0.func");
  WDH_CHECK(func && strcmp(func, "AllReduce") == 0, "stall func %s", func ? func : "(none)");
  WDH_CHECK(wdh_jnum(j, "trigger.stalls.0.seq", -2) == (double)seq, "stall seq %g, expected %llu",
            wdh_jnum(j, "trigger.stalls.0.seq", -2), (unsigned long long)seq);
  double since = wdh_jnum(j, "trigger.stalls.0.sinceProgressMs", -1);
  WDH_CHECK(since >= TIMEOUT_MS * 0.95 && since <= TIMEOUT_MS + 2 * POLL_MS + 50,
            "sinceProgressMs %.1f outside [timeout, timeout + 2 polls]", since);
  const char *waiting = wdh_jstr(j, "trigger.stalls.0.waitingOn");
  WDH_CHECK(waiting && strstr(waiting, "RecvWait"), "waitingOn %s",
            waiting ? waiting : "(none)");

  /* The comm and its open tree. */
  cJSON *comm = NULL, *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "comms")) {
    const char *id = wdh_jstr(c, "commId");
    if (id && strtoull(id, NULL, 16) == COMM_ID) comm = c;
  }
  WDH_CHECK(comm != NULL, "comm 0x%llx not in dump", (unsigned long long)COMM_ID);
  if (comm) {
    WDH_CHECK(wdh_jnum(comm, "rank", -1) == 3 && wdh_jnum(comm, "nranks", -1) == 8,
              "comm rank/nranks %g/%g", wdh_jnum(comm, "rank", -1), wdh_jnum(comm, "nranks", -1));
    const char *name = wdh_jstr(comm, "commName");
    WDH_CHECK(name && strcmp(name, "hang-comm") == 0, "commName %s", name ? name : "(none)");
    cJSON *coll = NULL, *n;
    cJSON_ArrayForEach(n, cJSON_GetObjectItem(comm, "inflight")) {
      const char *t = wdh_jstr(n, "type");
      if (t && strcmp(t, "Coll") == 0 && wdh_jnum(n, "seq", -1) == (double)seq) coll = n;
    }
    WDH_CHECK(coll != NULL, "no in-flight Coll with seq %llu", (unsigned long long)seq);
    if (coll) {
      const char *st = wdh_jstr(coll, "status");
      WDH_CHECK(st && strcmp(st, "stalled") == 0, "Coll status %s", st ? st : "(none)");
      const char *f = wdh_jstr(coll, "func");
      WDH_CHECK(f && strcmp(f, "AllReduce") == 0, "Coll func %s", f ? f : "(none)");
      cJSON *pop = find_child(coll, "ProxyOp", channel, 0);
      WDH_CHECK(pop != NULL, "no recv ProxyOp on channel %d under the Coll", channel);
      if (pop) {
        WDH_CHECK(wdh_jnum(pop, "stepsDone", -1) == step, "stepsDone %g, expected %d",
                  wdh_jnum(pop, "stepsDone", -1), step);
        WDH_CHECK(wdh_jnum(pop, "pid", -1) == getpid(), "ProxyOp pid");
        cJSON *ps = find_child(pop, "ProxyStep", -1, -1);
        WDH_CHECK(ps != NULL, "no ProxyStep under the hung ProxyOp");
        if (ps) {
          const char *state = wdh_jstr(ps, "state");
          WDH_CHECK(state && strcmp(state, "RecvWait") == 0, "ProxyStep state %s",
                    state ? state : "(none)");
          WDH_CHECK(wdh_jnum(ps, "step", -1) == step, "ProxyStep step %g",
                    wdh_jnum(ps, "step", -1));
        }
      }
      /* The other channel finished: its children are not in the tree any more. */
      cJSON *other = find_child(coll, "ProxyOp", channel == 0 ? 1 : 0, -1);
      WDH_CHECK(other == NULL, "finished channel still has an open ProxyOp");
    }
  }
  cJSON *threads = cJSON_GetObjectItem(j, "threads");
  WDH_CHECK(threads != NULL, "no threads section");
  wdh_json_free(j);
}

int main(void) {
  const char *path = wdh_plugin_path();
  if (!path) return 77;
  char *dir = wdh_scenario_dir("hang", "300ms", "50ms");
  wdh_plugin p;
  if (wdh_load(&p, path, 0) != 0) return 1;
  wdh_comm c;
  wdh_comm_init(&c, &p, COMM_ID, "hang-comm", 2, 8, 3);
  wdh_proxy *px = wdh_proxy_create();
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&c, px, &cfg, 5);
  wdh_proxy_destroy(px);

  /* seq 5 hangs on channel 1, step 2 of its recv ProxyOp. */
  cfg.hang_channel = 1;
  cfg.hang_step = 2;
  wdh_op op;
  wdh_op_enqueue(&c, &cfg, &op);
  WDH_CHECK(op.seq == 5, "seq %llu", (unsigned long long)op.seq);
  WDH_CHECK(wdh_op_proxy(&op) == 1, "the op did not hang");
  uint64_t t0 = wdh_now_ns();
  int n = wdh_wait_dumps(dir, "stall", 1, TIMEOUT_MS + 2 * POLL_MS + 2000);
  double waited = (wdh_now_ns() - t0) / 1e6;
  WDH_CHECK(n == 1, "%d stall dumps after %.0f ms", n, waited);
  WDH_CHECK(waited <= TIMEOUT_MS + 2 * POLL_MS + 500, "stall dump took %.0f ms", waited);
  if (n >= 1) {
    char *paths[4];
    int k = wdh_list_dumps(dir, "stall", paths, 4);
    check_stall_dump(paths[0], 5, 1, 2);
    wdh_free_paths(paths, k < 4 ? k : 4);
  }
  WDH_CHECK(wdh_log_contains(NCCL_LOG_WARN, "AllReduce") >= 1, "no WARN line naming the stall");

  /* Same episode: no second dump. A trigger file for the peers. */
  wdh_sleep_ms(3 * TIMEOUT_MS);
  WDH_CHECK(wdh_list_dumps(dir, "stall", NULL, 0) == 1, "%d stall dumps for one episode",
            wdh_list_dumps(dir, "stall", NULL, 0));
  WDH_CHECK(wdh_list_dumps(dir, "peer", NULL, 0) == 0, "a peer dump for our own trigger");
  char cmd[4200];
  snprintf(cmd, sizeof(cmd), "ls %s/triggers | grep -q '^episode-1\\.trigger$'", dir);
  WDH_CHECK(system(cmd) == 0, "no trigger file in %s", dir);

  /* Progress resumes: the op completes, traffic goes on, no new dump. */
  wdh_op_resume(&op);
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&c, NULL, &cfg, 20);
  wdh_sleep_ms(2 * TIMEOUT_MS);
  WDH_CHECK(wdh_list_dumps(dir, "stall", NULL, 0) == 1, "dump after the hang resolved");

  /* A new hang is a new episode: re-armed. */
  cfg.hang_channel = 0;
  cfg.hang_step = 0;
  wdh_op op2;
  wdh_op_enqueue(&c, &cfg, &op2);
  wdh_op_proxy(&op2);
  n = wdh_wait_dumps(dir, "stall", 2, TIMEOUT_MS + 2 * POLL_MS + 2000);
  WDH_CHECK(n == 2, "second episode: %d stall dumps", n);
  if (n == 2) {
    char *paths[4];
    int k = wdh_list_dumps(dir, "stall", paths, 4);
    check_stall_dump(paths[1], op2.seq, 0, 0);
    wdh_free_paths(paths, k < 4 ? k : 4);
  }
  wdh_op_resume(&op2);

  wdh_comm_finalize(&c);
  wdh_unload(&p);
  return wdh_scenario_end("scenario_hang", dir);
}
