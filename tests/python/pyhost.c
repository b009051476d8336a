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

/* One rank of a job (the demo): init its communicator, then one AllReduce per call, the proxy
 * part on the calling thread. */
__attribute__((visibility("default"))) int pyhost_rank_init(const char *plugin_path,
                                                            unsigned long long comm_id,
                                                            const char *name, int rank, int nranks) {
  if (wdh_load(&g_plugin, plugin_path, 0) != 0) return -1;
  if (wdh_comm_init(&g_comm, &g_plugin, comm_id, name, nranks, nranks, rank) != 0 || !g_comm.ctx)
    return -1;
  return 0;
}

__attribute__((visibility("default"))) int pyhost_allreduce(unsigned long long count) {
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.count = (size_t)count;
  wdh_op op;
  return wdh_op_run(&g_comm, &cfg, &op);
}

__attribute__((visibility("default"))) int pyhost_finish(void) {
  wdh_comm_finalize(&g_comm);
  wdh_unload(&g_plugin);
  return (int)wdh_failures();
}
