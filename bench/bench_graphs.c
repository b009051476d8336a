/*
 * CUDA graphs at serving scale, against the stand-in driver: what a communicator with 4,096
 * followed captured launches keeps resident, and what one replay of a 160-launch graph costs on
 * the host. Run once with the plugin and once with a reference plugin (the empty one: no host
 * node, no event records) in the same run; the difference is the plugin's own share (the
 * stand-in driver's nodes for NCCL's kernels are in both).
 *   bench_graphs PLUGIN.so [-l launches] [-p per_graph] [-n replays]
 * Prints one line: plugin=... launches=... graphs=... comm_kib=... captured_kib=... replay_ns=...
 * comm_kib: resident memory a communicator added at init; captured_kib: what its captures added.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_host.h"

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PLUGIN.so [-l launches] [-p per_graph] [-n replays]\n", argv[0]);
    return 2;
  }
  const char *plugin = argv[1];
  int launches = 4096, per = 160;
  long replays = 20000;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-l")) launches = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-p")) per = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-n")) replays = atol(argv[i + 1]);
  }
  if (per < 1 || launches < per) return 2;
  setenv("NCCL_WATCHDOG_TIMEOUT", "1h", 1);
  if (wdh_fake_cuda_load() != 0) return 1;
  wdh_plugin p;
  if (wdh_load(&p, plugin, 7) != 0) return 1;
  /* A warm-up communicator first: the plugin's process-wide start (its watchdog thread, tables)
   * is not a communicator's. */
  wdh_comm warm;
  wdh_comm_init(&warm, &p, 0xbe11c0, "warm", 1, 2, 0);
  long r0 = wdh_rss_kib();
  wdh_comm c;
  wdh_comm_init(&c, &p, 0xbe11c1, "serve", 1, 2, 0);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.no_proxy = 1;
  wdh_run_ops(&c, NULL, &cfg, 4);
  long r1 = wdh_rss_kib();
  int graphs = 0, last = 0, left = launches;
  while (left > 0) {
    int n = left < per ? left : per;
    int gid = wdh_gpu_capture_allreduces(&c, n, 0, 0);
    if (gid <= 0) break;
    last = gid;
    graphs++;
    left -= n;
  }
  void *s2 = wdh_gpu_stream_new();
  /* Every graph replayed once, so each launch's records and counters are touched. */
  for (int g = last - graphs + 1; g <= last; g++) wdh_gpu_complete_on(s2, wdh_gpu_graph_launch_on(s2, g) + (uint64_t)per);
  long r2 = wdh_rss_kib();
  /* Cost per replay of the last graph, launched and completed on the replay stream. */
  double best = 1e30;
  for (int run = 0; run < 5; run++) {
    uint64_t t0 = wdh_now_ns();
    for (long r = 0; r < replays; r++) wdh_gpu_complete_on(s2, wdh_gpu_graph_launch_on(s2, last) + (uint64_t)per);
    double ns = (double)(wdh_now_ns() - t0) / (double)replays;
    if (ns < best) best = ns;
  }
  printf("bench_graphs plugin=%s launches=%d graphs=%d per_graph=%d comm_kib=%ld captured_kib=%ld replay_ns=%.0f\n",
         strrchr(plugin, '/') ? strrchr(plugin, '/') + 1 : plugin, launches - left, graphs, per, r1 - r0, r2 - r1,
         best);
  wdh_comm_finalize(&c);
  wdh_comm_finalize(&warm);
  wdh_unload(&p);
  return 0;
}
