/*
 * What the CUDA-event path adds per kernel launch: KernelLaunch start and stop (as NCCL calls
 * them around cuLaunchKernelEx, enqueue.cc ncclLaunchKernel) under a GroupApi, against the
 * stand-in driver, with NCCL_WATCHDOG_GPU_EVENTS on or off. The stand-in's calls cost a few
 * atomics; the real driver's cuEventRecord costs more and is measured on a GPU machine
 * (tests/gpu/overhead.sh).
 *   bench_launch PLUGIN.so on|off [-n launches] [-r runs]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_host.h"

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s PLUGIN.so on|off [-n launches] [-r runs]\n", argv[0]);
    return 2;
  }
  const char *plugin = argv[1];
  int on = strcmp(argv[2], "on") == 0;
  long n = 200000;
  int runs = 5;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-n")) n = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "-r")) runs = atoi(argv[i + 1]);
  }
  setenv("NCCL_WATCHDOG_GPU_EVENTS", on ? "1" : "0", 1);
  setenv("NCCL_WATCHDOG_TIMEOUT", "1h", 1);
  if (wdh_fake_cuda_load() != 0) return 1;
  wdh_plugin p;
  if (wdh_load(&p, plugin, 6) != 0) return 1;
  wdh_comm c;
  wdh_comm_init(&c, &p, 0xbe11c4, "bench-launch", 1, 2, 0);
  if (!c.ctx) return 1;
  double best = 1e30;
  for (int r = 0; r < runs; r++) {
    uint64_t t0 = wdh_now_ns();
    for (long i = 0; i < n; i++) {
      wdh_descr d;
      memset(&d, 0, sizeof(d));
      d.type = ncclProfileGroupApi;
      d.group_depth = 1;
      void *g = wdh_start(&p, c.ctx, &d);
      memset(&d, 0, sizeof(d));
      d.type = ncclProfileKernelLaunch;
      d.parent = g;
      d.stream = c.stream;
      void *k = wdh_start(&p, c.ctx, &d);
      uint64_t pos = wdh_gpu_launch(&c);
      wdh_stop(&p, k);
      wdh_stop(&p, g);
      wdh_gpu_complete(&c, pos);
    }
    double ns = (double)(wdh_now_ns() - t0) / (double)n;
    if (ns < best) best = ns;
  }
  printf("bench_launch gpu_events=%s launches=%ld runs=%d ns_per_launch=%.1f records=%ld\n",
         on ? "on" : "off", n, runs, best, wdh_fake_records());
  wdh_comm_finalize(&c);
  wdh_unload(&p);
  return 0;
}
