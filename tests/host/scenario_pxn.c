/*
 * Scenario 6: PXN. Another process's proxy thread calls startEvent with that process's context
 * pointer (never created here, never to be dereferenced: an unmapped address) and parent, and a
 * ProxyOp of our own context can carry another process's pid. Such events and their ProxySteps
 * must be kept as `detached`, never crash, never fail a callback, never be reported as our stall.
 */
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "nccl_host.h"

#define TIMEOUT_MS 300

int main(void) {
  const char *path = wdh_plugin_path();
  if (!path) return 77;
  char *dir = wdh_scenario_dir("pxn", "300ms", "50ms");
  wdh_plugin p;
  if (wdh_load(&p, path, 0) != 0) return 1;
  wdh_comm c;
  wdh_comm_init(&c, &p, 0x7070707070707070ull, "pxn", 2, 8, 1);

  /* A reserved, inaccessible page: any dereference of the foreign pointers faults. */
  char *guard = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  WDH_CHECK(guard != MAP_FAILED, "mmap");
  void *foreign_ctx = guard + 64, *foreign_parent = guard + 512;
  pid_t other = getpid() + 100000;

  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&c, NULL, &cfg, 5);
  /* Finished PXN ops, and one left open (its last step in RecvWait). */
  for (int i = 0; i < 50; i++) wdh_pxn_op(&p, foreign_ctx, foreign_parent, other, i % 4, 3, i & 1,
                                          4, 0);
  void *open_op = wdh_pxn_op(&p, foreign_ctx, foreign_parent, other, 2, 5, 0, 3, 1);
  WDH_CHECK(open_op != NULL, "the plugin dropped a PXN ProxyOp (expected it kept as detached)");
  /* Our context, but another process's pid: detached as well. */
  void *mixed = wdh_pxn_op(&p, c.ctx, foreign_parent, other, 1, 6, 1, 2, 1);
  (void)mixed;
  /* A ProxyOp with a foreign context and OUR pid (misbehaving peer): still never dereferenced. */
  wdh_pxn_op(&p, foreign_ctx, foreign_parent, getpid(), 0, 1, 0, 2, 0);
  /* A PXN send of local rank 5 of another process, handed to the network and left open: the
   * descriptor's rank is the originating one (plugin/profiler.cc), kept as originRank. */
  wdh_pxn_send(&p, foreign_ctx, foreign_parent, other + 1, 5, 3, 7, 4, 2);
  wdh_run_ops(&c, NULL, &cfg, 5);

  /* Longer than the timeout: detached events are not our stalls. */
  wdh_sleep_ms(3 * TIMEOUT_MS);
  WDH_CHECK(wdh_list_dumps(dir, "stall", NULL, 0) == 0, "%d stall dumps for PXN events",
            wdh_list_dumps(dir, "stall", NULL, 0));

  cJSON *j = wdh_signal_snapshot(dir);
  if (j) {
    cJSON *det = wdh_jpath(j, "detached");
    WDH_CHECK(det != NULL, "no detached section");
    int open_foreign = 0, open_steps = 0;
    cJSON *n;
    cJSON_ArrayForEach(n, cJSON_GetObjectItem(det, "open")) {
      const char *type = wdh_jstr(n, "type");
      if (type && !strcmp(type, "ProxyOp") && wdh_jnum(n, "pid", -1) == other) {
        open_foreign++;
        cJSON *k;
        cJSON_ArrayForEach(k, cJSON_GetObjectItem(n, "children")) {
          const char *kt = wdh_jstr(k, "type");
          if (kt && !strcmp(kt, "ProxyStep")) open_steps++;
        }
      }
      if (type && !strcmp(type, "ProxyStep")) open_steps++; /* listed flat instead */
    }
    WDH_CHECK(open_foreign == 2, "%d open foreign-pid ProxyOps in detached.open, expected 2",
              open_foreign);
    int origin = -1, posted = 0;
    cJSON_ArrayForEach(n, cJSON_GetObjectItem(det, "open")) {
      if (wdh_jnum(n, "pid", -1) != other + 1) continue;
      origin = (int)wdh_jnum(n, "originRank", -1);
      cJSON *k;
      cJSON_ArrayForEach(k, cJSON_GetObjectItem(n, "children")) {
        const char *st = wdh_jstr(k, "state");
        posted += st && !strcmp(st, "SendWait");
      }
    }
    WDH_CHECK(origin == 5, "the PXN send's originRank is %d, expected 5", origin);
    WDH_CHECK(posted == 2, "%d of its steps in SendWait, expected 2", posted);
    WDH_CHECK(open_steps >= 2, "%d open detached ProxySteps, expected 2", open_steps);
    int recs = cJSON_GetArraySize(wdh_jpath(j, "detached.ring.records"));
    WDH_CHECK(recs > 100, "%d records in the detached ring", recs);
    /* None of it leaks into our comm's trees. */
    cJSON_ArrayForEach(n, (cJSON *)wdh_jpath(j, "comms.0.inflight")) {
      WDH_CHECK(wdh_jnum(n, "pid", getpid()) != other, "foreign ProxyOp in comm inflight");
    }
    wdh_json_free(j);
  }
  wdh_comm_finalize(&c);
  wdh_unload(&p);
  munmap(guard, 4096);
  return wdh_scenario_end("scenario_pxn", dir);
}
