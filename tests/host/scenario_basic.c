/*
 * Scenario 1: basic lifecycle under ABI v6, v5 and v4. Two communicators, allreduces and p2p with
 * an application and a proxy thread, NULL handles, NULL contexts, unknown types and NULL strings:
 * every callback returns ncclSuccess, nothing crashes, no dump is written. Also: a bad
 * configuration value gives one WARN naming it, and NCCL_WATCHDOG_ENABLE=0 gives a NULL context.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_host.h"

static void tolerate_odd_calls(wdh_plugin *p, wdh_comm *c) {
  wdh_descr d;
  long before = wdh_failures();
  /* NULL context, every type. */
  for (int bit = 0; bit < 15; bit++) {
    memset(&d, 0, sizeof(d));
    d.type = 1ull << bit;
    void *h = wdh_start(p, NULL, &d);
    WDH_CHECK(h == NULL, "NULL context must give a NULL handle (type 1<<%d)", bit);
    wdh_state(p, h, ncclProfilerProxyStepRecvWait, 0);
    wdh_stop(p, h);
  }
  /* NULL handles. */
  wdh_stop(p, NULL);
  wdh_state(p, NULL, ncclProfilerProxyStepSendWait, 42);
  wdh_state(p, NULL, ncclProfilerKernelChStop, 1);
  /* Unknown type on a real context. */
  memset(&d, 0, sizeof(d));
  d.type = 1ull << 20;
  void *h = wdh_start(p, c->ctx, &d);
  wdh_state(p, h, 99, 0);
  wdh_stop(p, h);
  /* Type 0 and several bits at once. */
  d.type = 0;
  h = wdh_start(p, c->ctx, &d);
  wdh_stop(p, h);
  d.type = ncclProfileColl | ncclProfileP2p;
  h = wdh_start(p, c->ctx, &d);
  wdh_stop(p, h);
  /* NULL strings in every string field, NULL parents. */
  memset(&d, 0, sizeof(d));
  d.type = ncclProfileColl;
  d.n_channels = 1;
  void *coll = wdh_start(p, c->ctx, &d);
  wdh_stop(p, coll);
  memset(&d, 0, sizeof(d));
  d.type = ncclProfileKernelCh;
  d.parent = coll;
  void *kch = wdh_start(p, c->ctx, &d);
  wdh_state(p, kch, ncclProfilerKernelChStop, 0);
  wdh_stop(p, kch);
  if (p->version >= 5) {
    d.type = ncclProfileCollApi;
    d.parent = NULL;
    h = wdh_start(p, c->ctx, &d);
    wdh_stop(p, h);
    d.type = ncclProfileP2pApi;
    h = wdh_start(p, c->ctx, &d);
    wdh_stop(p, h);
  }
  d.type = ncclProfileP2p;
  h = wdh_start(p, c->ctx, &d);
  wdh_stop(p, h);
  /* ProxyStep with a NULL parent, ProxyCtrl states, NetPlugin. */
  d.type = ncclProfileProxyStep;
  d.parent = NULL;
  h = wdh_start(p, c->ctx, &d);
  wdh_state(p, h, ncclProfilerProxyStepRecvWait, 0);
  wdh_stop(p, h);
  d.type = ncclProfileProxyCtrl;
  h = wdh_start(p, c->ctx, &d);
  wdh_state(p, h, ncclProfilerProxyCtrlAppend, 3);
  wdh_state(p, h, ncclProfilerProxyCtrlSleep, 0);
  wdh_stop(p, h);
  d.type = ncclProfileNetPlugin;
  h = wdh_start(p, c->ctx, &d);
  wdh_state(p, h, ncclProfilerNetPluginUpdate, 0);
  wdh_stop(p, h);
  WDH_CHECK(wdh_failures() == before, "odd calls: %ld callback failures",
            wdh_failures() - before);
}

static void one_version(const char *path, int version, const char *dir) {
  wdh_plugin p;
  if (wdh_load(&p, path, version) != 0) {
    WDH_CHECK(0, "cannot load %s as v%d", path, version);
    return;
  }
  WDH_CHECK(p.version == version, "loaded v%d, wanted v%d", p.version, version);
  WDH_CHECK(p.name && strcmp(p.name, "nccl-watchdog") == 0, "plugin name %s",
            p.name ? p.name : "(null)");
  wdh_log_clear();
  wdh_comm a, b;
  WDH_CHECK(wdh_comm_init(&a, &p, 0x1111222233334444ull, "comm-a", 1, 4, 1) == ncclSuccess,
            "init a");
  WDH_CHECK(wdh_comm_init(&b, &p, 0x5555666677778888ull, NULL, 1, 2, 0) == ncclSuccess,
            "init b with a NULL name");
  WDH_CHECK(a.ctx != NULL && b.ctx != NULL, "contexts %p %p", a.ctx, b.ctx);
  WDH_CHECK(wdh_activation_mask == 0x65f, "default mask 0x%x, expected 0x65f",
            wdh_activation_mask);
  WDH_CHECK(wdh_log_count(NCCL_LOG_WARN) == 0, "%d WARN lines with a valid config",
            wdh_log_count(NCCL_LOG_WARN));

  wdh_proxy *px = wdh_proxy_create();
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&a, px, &cfg, 300);
  wdh_run_ops(&b, px, &cfg, 100);
  cfg.func = "AllGather";
  cfg.n_steps = 0;
  wdh_run_ops(&a, px, &cfg, 50);
  /* p2p both ways. */
  wdh_op_cfg_default(&cfg);
  cfg.kind = WDH_OP_SEND;
  cfg.peer = 2;
  cfg.n_channels = 1;
  wdh_run_ops(&a, px, &cfg, 50);
  cfg.kind = WDH_OP_RECV;
  wdh_run_ops(&a, px, &cfg, 50);
  /* Children that run while the Coll is still open, and ops without any child. */
  wdh_op_cfg_default(&cfg);
  cfg.children_first = 1;
  wdh_run_ops(&b, NULL, &cfg, 20);
  wdh_op_cfg_default(&cfg);
  cfg.no_proxy = 1;
  wdh_run_ops(&b, px, &cfg, 20);
  /* Everything in the mask, including events the plugin does not need. */
  int saved = wdh_activation_mask;
  wdh_op_cfg_default(&cfg);
  cfg.mask = 0x7fff;
  wdh_run_ops(&a, px, &cfg, 20);
  WDH_CHECK(wdh_activation_mask == saved, "mask changed during traffic");
  wdh_proxy_destroy(px);

  tolerate_odd_calls(&p, &a);

  /* Several polls with nothing in flight. */
  wdh_sleep_ms(400);
  WDH_CHECK(wdh_list_dumps(dir, NULL, NULL, 0) == 0, "v%d: %d dumps in a healthy run", version,
            wdh_list_dumps(dir, NULL, NULL, 0));
  WDH_CHECK(wdh_comm_finalize(&a) == ncclSuccess, "finalize a");
  WDH_CHECK(wdh_comm_finalize(&b) == ncclSuccess, "finalize b");
  wdh_unload(&p);
}

/* A malformed value: one WARN that names the variable; the job goes on. */
static void bad_config(const char *path) {
  setenv("NCCL_WATCHDOG_TIMEOUT", "banana", 1);
  wdh_plugin p;
  if (wdh_load(&p, path, 0) != 0) {
    WDH_CHECK(0, "load");
    return;
  }
  wdh_log_clear();
  wdh_comm c;
  WDH_CHECK(wdh_comm_init(&c, &p, 42, "bad", 1, 1, 0) == ncclSuccess, "init with a bad value");
  WDH_CHECK(c.ctx != NULL, "bad value must not disable the plugin");
  WDH_CHECK(wdh_log_contains(NCCL_LOG_WARN, "NCCL_WATCHDOG_TIMEOUT") == 1,
            "expected one WARN naming NCCL_WATCHDOG_TIMEOUT, got %d",
            wdh_log_contains(NCCL_LOG_WARN, "NCCL_WATCHDOG_TIMEOUT"));
  WDH_CHECK(wdh_log_contains(NCCL_LOG_WARN, "banana") == 1, "WARN must quote the bad value");
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&c, NULL, &cfg, 10);
  wdh_comm_finalize(&c);
  wdh_unload(&p);
  unsetenv("NCCL_WATCHDOG_TIMEOUT");
}

/* A misspelt variable (NCCL_WATCHDOG_TIMOUT): one WARN naming it, read from the real environment
 * (the plugin once passed its own lookup function, which skipped this check). */
static void typo(const char *path) {
  setenv("NCCL_WATCHDOG_TIMOUT", "5m", 1);
  wdh_plugin p;
  if (wdh_load(&p, path, 0) != 0) {
    WDH_CHECK(0, "load");
    return;
  }
  wdh_log_clear();
  wdh_comm c;
  WDH_CHECK(wdh_comm_init(&c, &p, 44, "typo", 1, 1, 0) == ncclSuccess, "init with a typo");
  WDH_CHECK(wdh_log_contains(NCCL_LOG_WARN, "unknown variable") == 1 &&
                wdh_log_contains(NCCL_LOG_WARN, "NCCL_WATCHDOG_TIMOUT") == 1,
            "expected one WARN naming NCCL_WATCHDOG_TIMOUT, got %d",
            wdh_log_contains(NCCL_LOG_WARN, "NCCL_WATCHDOG_TIMOUT"));
  wdh_comm_finalize(&c);
  wdh_unload(&p);
  unsetenv("NCCL_WATCHDOG_TIMOUT");
}

static void disabled(const char *path, const char *dir) {
  setenv("NCCL_WATCHDOG_ENABLE", "0", 1);
  wdh_plugin p;
  if (wdh_load(&p, path, 0) != 0) {
    WDH_CHECK(0, "load");
    return;
  }
  wdh_comm c;
  WDH_CHECK(wdh_comm_init(&c, &p, 43, "off", 1, 1, 0) == ncclSuccess, "init disabled");
  WDH_CHECK(c.ctx == NULL, "ENABLE=0 must give a NULL context, got %p", c.ctx);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&c, NULL, &cfg, 10); /* NCCL still calls startEvent with a NULL context */
  wdh_comm_finalize(&c);           /* skipped for NULL, as NCCL does */
  wdh_unload(&p);
  unsetenv("NCCL_WATCHDOG_ENABLE");
  WDH_CHECK(wdh_list_dumps(dir, NULL, NULL, 0) == 0, "dumps while disabled");
}

int main(void) {
  const char *path = wdh_plugin_path();
  if (!path) {
    fprintf(stderr, "WDH_PLUGIN not set\n");
    return 77;
  }
  char *dir = wdh_scenario_dir("basic", "2s", "50ms");
  for (int v = 6; v >= 4; v--) one_version(path, v, dir);
  bad_config(path);
  typo(path);
  setenv("NCCL_WATCHDOG_TIMEOUT", "2s", 1);
  disabled(path, dir);
  return wdh_scenario_end("scenario_basic", dir);
}
