/*
 * Memory benchmark: resident set size after 1 M and after 10 M allreduce lifecycles on one
 * communicator (flat after warm-up means no leak and no growth on the hot path), the memory a
 * communicator that carries no traffic costs (resident, and the node memory of its ring file),
 * and the memory one more communicator costs at default settings once its rings are full.
 *
 *   bench_memory PLUGIN.so [-a first] [-b second] [-c comms]
 *
 * Prints:
 *   memory rss_first_kib=.. rss_second_kib=.. first=N second=M growth_kib=..
 *   memory idle_rss_kib=.. idle_ringfile_kib=.. idle_comms=16
 *   memory per_comm_kib=.. comms=C record_bytes=80 ring=R proxy_ring=P max_events=E
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flightrec/record.h"
#include "nccl_host.h"
#include "lifecycle.h"
#include "base/config.h"

/* Bytes the files of the ring directory hold (allocated blocks: tmpfs pages of /dev/shm). */
static long dir_kib(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  long kib = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) kib += (long)st.st_blocks / 2;
  }
  closedir(d);
  return kib;
}

static void drive(bl_comm *c, long n) {
  for (long i = 0; i < n; i++) bl_proxy_part(c, bl_app_part(c));
}

int main(int argc, char **argv) {
  if (argc < 2 || argv[1][0] == '-') {
    fprintf(stderr, "usage: bench_memory PLUGIN.so [-a first] [-b second] [-c comms]\n");
    return 2;
  }
  long first = 1000000, second = 10000000;
  int ncomms = 8, opt;
  optind = 2;
  while ((opt = getopt(argc, argv, "a:b:c:")) != -1) {
    if (opt == 'a') first = atol(optarg);
    else if (opt == 'b') second = atol(optarg);
    else if (opt == 'c') ncomms = atoi(optarg);
    else return 2;
  }
  if (first < 1 || second < first || ncomms < 1 || ncomms > 64) return 2;

  wdh_plugin plugin;
  if (wdh_load(&plugin, argv[1], 0) != 0 || !plugin.v6) return 1;
  wdh_comm comms[65];
  bl_comm cs[65];
  for (int i = 0; i <= ncomms; i++) {
    char name[32];
    snprintf(name, sizeof(name), "mem%d", i);
    wdh_comm_init(&comms[i], &plugin, 0x2000 + i, name, 2, 2, 0);
    cs[i] = (bl_comm){.t = plugin.v6, .ctx = comms[i].ctx, .pid = getpid(), .steps = 4};
    if (i == 0) break; /* the others are created after the steady-state run */
  }

  /* Steady state: the rings wrap long before `first` lifecycles (8192 records each). */
  drive(&cs[0], first);
  long rss_first = wdh_rss_kib();
  drive(&cs[0], second - first);
  long rss_second = wdh_rss_kib();
  printf("memory rss_first_kib=%ld rss_second_kib=%ld first=%ld second=%ld growth_kib=%ld\n",
         rss_first, rss_second, first, second, rss_second - rss_first);

  /* Communicators that carry no traffic (memory on demand). */
  enum { IDLE = 16 };
  wd_config dcfg;
  wd_config_defaults(&dcfg);
  const char *rdir = getenv("NCCL_WATCHDOG_RING_DIR") ? getenv("NCCL_WATCHDOG_RING_DIR") : dcfg.ring_dir;
  long rss0 = wdh_rss_kib(), files0 = dir_kib(rdir);
  wdh_comm idle[IDLE];
  for (int i = 0; i < IDLE; i++) {
    char name[32];
    snprintf(name, sizeof(name), "idle%d", i);
    wdh_comm_init(&idle[i], &plugin, 0x3000 + i, name, 2, 2, 0);
  }
  long rss1 = wdh_rss_kib(), files1 = dir_kib(rdir);
  printf("memory idle_rss_kib=%.1f idle_ringfile_kib=%.1f idle_comms=%d\n",
         (double)(rss1 - rss0) / IDLE, (double)(files1 - files0) / IDLE, IDLE);
  for (int i = 0; i < IDLE; i++) wdh_comm_finalize(&idle[i]);

  /* Per communicator: create ncomms more and fill every ring. */
  long before = wdh_rss_kib();
  for (int i = 1; i <= ncomms; i++) {
    char name[32];
    snprintf(name, sizeof(name), "mem%d", i);
    wdh_comm_init(&comms[i], &plugin, 0x2000 + i, name, 2, 2, 0);
    cs[i] = (bl_comm){.t = plugin.v6, .ctx = comms[i].ctx, .pid = getpid(), .steps = 4};
    drive(&cs[i], 1);
  }
  /* Ring files are allocated whole at the watchdog's first poll after traffic (1 s default). */
  wdh_sleep_ms(1500);
  for (int i = 1; i <= ncomms; i++) drive(&cs[i], 20000);
  long after = wdh_rss_kib();
  wd_config cfg;
  wd_config_defaults(&cfg);
  printf("memory per_comm_kib=%ld comms=%d record_bytes=%zu ring=%u proxy_ring=%u "
         "max_events=%u\n",
         (after - before) / ncomms, ncomms, sizeof(wd_record), cfg.ring_size, cfg.proxy_ring_size,
         cfg.max_events);

  for (int i = 0; i <= ncomms; i++) wdh_comm_finalize(&comms[i]);
  wdh_unload(&plugin);
  return wdh_failures() ? 1 : 0;
}
