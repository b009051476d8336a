/*
 * Scenario 4: a long healthy run (thousands of ops over several timeouts, app + proxy threads)
 * produces no dump; then a SIGUSR1 snapshot whose rings match what the host did: the last Coll in
 * the ring is the last one issued, seqs are consecutive, the ring wrapped, nothing is in flight,
 * and the host's proxy thread is listed with a backtrace.
 */
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_host.h"

#define TIMEOUT_MS 200
#define COMM_ID 0x4242424242424242ull

static void check_ring(cJSON *comm, uint64_t last_seq) {
  cJSON *ring = cJSON_GetObjectItem(comm, "ring");
  WDH_CHECK(ring != NULL, "no ring");
  if (!ring) return;
  double cap = wdh_jnum(ring, "capacity", -1), written = wdh_jnum(ring, "written", -1);
  WDH_CHECK(cap == 256, "ring capacity %g, configured 256", cap);
  WDH_CHECK(written > cap, "ring did not wrap: written %g", written);
  WDH_CHECK(wdh_jnum(ring, "lost", -1) > 0, "wrapped ring lost nothing?");
  WDH_CHECK(wdh_jnum(ring, "torn", -1) == 0, "torn records in an idle ring");
  cJSON *recs = cJSON_GetObjectItem(ring, "records");
  int n = cJSON_GetArraySize(recs);
  WDH_CHECK(n > 0 && n <= cap, "%d records", n);
  double prev_t = -1e300, last_coll_seq = -1, prev_seq = -1;
  int colls = 0, gaps = 0, proxy_in_ring = 0;
  cJSON *r;
  cJSON_ArrayForEach(r, recs) {
    double t = wdh_jnum(r, "t", 1);
    WDH_CHECK(t <= 0 && t >= prev_t, "record times not oldest first: %g after %g", t, prev_t);
    prev_t = t;
    const char *type = wdh_jstr(r, "type"), *ph = wdh_jstr(r, "ph");
    if (type && (strcmp(type, "ProxyStep") == 0 || strcmp(type, "ProxyOp") == 0))
      proxy_in_ring++;
    if (!type || !ph || strcmp(type, "Coll") || strcmp(ph, "start")) continue;
    double seq = wdh_jnum(r, "seq", -1);
    if (prev_seq >= 0 && seq != prev_seq + 1) gaps++;
    prev_seq = seq;
    last_coll_seq = seq;
    colls++;
    const char *f = wdh_jstr(r, "func");
    WDH_CHECK(f && strcmp(f, "AllReduce") == 0, "Coll func %s", f ? f : "(none)");
  }
  WDH_CHECK(colls > 10, "only %d Coll starts in the ring", colls);
  WDH_CHECK(gaps == 0, "%d gaps in Coll seqs", gaps);
  WDH_CHECK(last_coll_seq == (double)last_seq, "last Coll seq in ring %g, last issued %llu",
            last_coll_seq, (unsigned long long)last_seq);
  WDH_CHECK(proxy_in_ring == 0, "%d proxy-level records in the op-level ring", proxy_in_ring);
  cJSON *pring = cJSON_GetObjectItem(comm, "proxyRing");
  WDH_CHECK(pring && cJSON_GetArraySize(cJSON_GetObjectItem(pring, "records")) > 0,
            "empty proxyRing");
}

int main(void) {
  const char *path = wdh_plugin_path();
  if (!path) return 77;
  char *dir = wdh_scenario_dir("healthy", "200ms", "20ms");
  setenv("NCCL_WATCHDOG_RING_SIZE", "256", 1);
  wdh_plugin p;
  if (wdh_load(&p, path, 0) != 0) return 1;
  wdh_comm c;
  wdh_comm_init(&c, &p, COMM_ID, "healthy", 1, 4, 2);
  wdh_proxy *px = wdh_proxy_create();
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  uint64_t t0 = wdh_now_ns();
  int ops = 0;
  while (ops < 3000 || wdh_now_ns() - t0 < 8ull * TIMEOUT_MS * 1000000ull) {
    wdh_run_ops(&c, px, &cfg, 100);
    ops += 100;
    WDH_CHECK(wdh_list_dumps(dir, NULL, NULL, 0) == 0, "dump during a healthy run after %d ops",
              ops);
    if (wdh_check_failures()) break;
  }
  wdh_sleep_ms(2 * TIMEOUT_MS);
  WDH_CHECK(wdh_list_dumps(dir, NULL, NULL, 0) == 0, "%d dumps after a healthy run",
            wdh_list_dumps(dir, NULL, NULL, 0));

  cJSON *j = wdh_signal_snapshot(dir);
  if (j) {
    const char *reason = wdh_jstr(j, "reason");
    WDH_CHECK(reason && !strcmp(reason, "signal"), "reason %s", reason ? reason : "(none)");
    const char *sig = wdh_jstr(j, "trigger.signal");
    WDH_CHECK(sig && !strcmp(sig, "SIGUSR1"), "trigger.signal %s", sig ? sig : "(none)");
    cJSON *comm = wdh_jpath(j, "comms.0");
    WDH_CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(j, "comms")) == 1, "comms count");
    const char *cid = wdh_jstr(comm, "commId");
    WDH_CHECK(cid && strtoull(cid, NULL, 16) == COMM_ID, "commId %s", cid ? cid : "(none)");
    uint64_t last = (uint64_t)ops - 1;
    cJSON *s;
    int found = 0;
    cJSON_ArrayForEach(s, cJSON_GetObjectItem(comm, "seq")) {
      const char *f = wdh_jstr(s, "func");
      if (!f || strcmp(f, "AllReduce")) continue;
      found = 1;
      WDH_CHECK(wdh_jnum(s, "lastEnqueued", -2) == (double)last, "lastEnqueued %g vs %llu",
                wdh_jnum(s, "lastEnqueued", -2), (unsigned long long)last);
      WDH_CHECK(wdh_jnum(s, "lastCompleted", -2) == (double)last, "lastCompleted %g vs %llu",
                wdh_jnum(s, "lastCompleted", -2), (unsigned long long)last);
    }
    WDH_CHECK(found, "no AllReduce entry in seq[]");
    WDH_CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(comm, "inflight")) == 0,
              "%d in-flight trees in an idle comm",
              cJSON_GetArraySize(cJSON_GetObjectItem(comm, "inflight")));
    check_ring(comm, last);
    /* The host's proxy thread, with frames, symbolized at least once. */
    cJSON *t;
    int proxy_seen = 0, symbols = 0;
    cJSON_ArrayForEach(t, (cJSON *)wdh_jpath(j, "threads.list")) {
      const char *name = wdh_jstr(t, "name");
      cJSON *fr;
      cJSON_ArrayForEach(fr, cJSON_GetObjectItem(t, "frames")) if (wdh_jstr(fr, "symbol"))
          symbols++;
      if (name && !strcmp(name, "wdh-proxy")) {
        proxy_seen = 1;
        const char *st = wdh_jstr(t, "status");
        WDH_CHECK(st && !strcmp(st, "ok"), "proxy thread status %s", st ? st : "(none)");
        WDH_CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(t, "frames")) > 0,
                  "no frames for the proxy thread");
      }
    }
    WDH_CHECK(proxy_seen, "the host's proxy thread is not listed");
    WDH_CHECK(symbols > 0, "no symbolized frame in any thread");
    wdh_json_free(j);
  }
  wdh_proxy_destroy(px);
  wdh_comm_finalize(&c);
  wdh_unload(&p);
  printf("healthy run: %d ops\n", ops);
  return wdh_scenario_end("scenario_healthy", dir);
}
