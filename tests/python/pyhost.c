/*
 * The test host as a shared library, for Python tests driven through ctypes: a Python process
 * loads the plugin the way NCCL would and runs a few collectives on one communicator.
 */
#include <stdio.h>

#include "nccl_host.h"

static wdh_plugin g_plugin;
static wdh_comm g_comm;

__attribute__((visibility("default"))) int pyhost_start(const char *plugin_path) {
  if (wdh_load(&g_plugin, plugin_path, 0) != 0) return -1;
  if (wdh_comm_init(&g_comm, &g_plugin, 0x9900aa11ull, "py", 1, 2, 0) != 0 || !g_comm.ctx) return -1;
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&g_comm, NULL, &cfg, 3);
  return 0;
}

/* One rank of a job (the demo): each call inits one more communicator of this process (the
 * plugin is loaded by the first) and returns its index; then one operation per call, the proxy
 * part on the calling thread. */
#define PYHOST_COMMS 4
static wdh_comm g_comms[PYHOST_COMMS];
static int g_ncomms, g_loaded;

__attribute__((visibility("default"))) int pyhost_rank_init(const char *plugin_path,
                                                            unsigned long long comm_id,
                                                            const char *name, int rank, int nranks) {
  if (g_ncomms == PYHOST_COMMS) return -1;
  if (!g_loaded && wdh_load(&g_plugin, plugin_path, 0) != 0) return -1;
  g_loaded = 1;
  wdh_comm *c = &g_comms[g_ncomms];
  if (wdh_comm_init(c, &g_plugin, comm_id, name, nranks, nranks, rank) != 0 || !c->ctx) return -1;
  return g_ncomms++;
}

static int run(int comm, const wdh_op_cfg *cfg) {
  if (comm < 0 || comm >= g_ncomms) return -1;
  wdh_op op;
  return wdh_op_run(&g_comms[comm], cfg, &op);
}

__attribute__((visibility("default"))) int pyhost_allreduce(int comm, unsigned long long count) {
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.count = (size_t)count;
  return run(comm, &cfg);
}

/* A pipeline Send to (send 1) or Recv from (send 0) peer. */
__attribute__((visibility("default"))) int pyhost_p2p(int comm, int send, int peer,
                                                      unsigned long long count) {
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.kind = send ? WDH_OP_SEND : WDH_OP_RECV;
  cfg.peer = peer;
  cfg.n_channels = 1;
  cfg.count = (size_t)count;
  return run(comm, &cfg);
}

__attribute__((visibility("default"))) int pyhost_finish(void) {
  if (g_ncomms == 0 && g_comm.ctx) wdh_comm_finalize(&g_comm); /* pyhost_start's */
  for (int i = g_ncomms - 1; i >= 0; i--) wdh_comm_finalize(&g_comms[i]);
  g_ncomms = 0;
  g_loaded = 0;
  wdh_unload(&g_plugin);
  return (int)wdh_failures();
}

/* An AllReduce whose recv step on channel 0 never completes (a hang), left in flight. */
static wdh_op g_hung;
__attribute__((visibility("default"))) int pyhost_hang(void) {
  if (!g_comm.ctx) return -1;
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.hang_channel = 0;
  wdh_op_run(&g_comm, &cfg, &g_hung);
  return 0;
}

__attribute__((visibility("default"))) void pyhost_unhang(void) { wdh_op_resume(&g_hung); }

/* Lines the plugin logged through NCCL's logger (level -1: any) that contain substr. */
__attribute__((visibility("default"))) int pyhost_log_contains(int level, const char *substr) {
  return wdh_log_contains(level, substr);
}
