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

__attribute__((visibility("default"))) int pyhost_finish(void) {
  wdh_comm_finalize(&g_comm);
  wdh_unload(&g_plugin);
  return (int)wdh_failures();
}
