/*
 * One rank of the simulated job that `make demo` runs (tests/demo/run-demo.sh).
 *
 *   demo_rank PLUGIN RANK NRANKS DUMP_DIR [HANG_RANK] [HANG_SEQ]
 *       plays NCCL for one rank: an application thread enqueues AllReduces, a proxy thread drives
 *       their network steps. HANG_RANK stops calling the collective after HANG_SEQ-1 (it is
 *       "stuck in its data loader"); the others enter AllReduce #HANG_SEQ and wait forever for
 *       data from the missing rank. Exits once the dumps have settled (or after 25 s).
 *   demo_rank --summary DUMP_DIR
 *       one line per dump: file, reason, rank, and what it says.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_host.h"

#define DEMO_COMM_ID 0x5eed00d5c0ffee01ull

/* Names that show up in the dump's backtraces: that is the point of the demo. */
__attribute__((noinline)) static void demo_data_loader_wait(unsigned ms) {
  wdh_sleep_ms(ms);
  __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void demo_stream_synchronize(unsigned ms) {
  wdh_sleep_ms(ms);
  __asm__ volatile("" ::: "memory");
}

static int settled(const char *dir, int *last, uint64_t *since) {
  int n = wdh_list_dumps(dir, NULL, NULL, 0);
  uint64_t now = wdh_now_ns();
  if (n != *last) {
    *last = n;
    *since = now;
  }
  return n > 0 && now - *since > 1500000000ull;
}

static int rank_main(const char *plugin, int rank, int nranks, const char *dir, int hang_rank,
                     int hang_seq) {
  wdh_plugin p;
  if (wdh_load(&p, plugin, 0) != 0) return 2;
  wdh_comm c;
  char name[32];
  snprintf(name, sizeof(name), "demo_pg");
  wdh_comm_init(&c, &p, DEMO_COMM_ID, name, nranks, nranks, rank);
  wdh_proxy *px = wdh_proxy_create();
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.count = 4 << 20;
  for (int s = 0; s < hang_seq; s++) {
    wdh_run_ops(&c, px, &cfg, 1);
    wdh_sleep_ms(5); /* the "forward/backward" between two AllReduces */
  }
  if (rank == hang_rank) {
    printf("rank %d (pid %d): completed AllReduce #0..#%d, now stuck in its data loader: it "
           "never calls AllReduce #%d\n",
           rank, (int)getpid(), hang_seq - 1, hang_seq);
    fflush(stdout);
  } else {
    /* The ring's recv from the missing rank never completes. */
    cfg.hang_channel = 0;
    cfg.hang_step = 0;
    wdh_op op;
    wdh_op_enqueue(&c, &cfg, &op);
    wdh_proxy_submit(px, &op);
    printf("rank %d (pid %d): entered AllReduce #%d, waiting for data that never comes\n", rank,
           (int)getpid(), hang_seq);
    fflush(stdout);
  }
  int last = -1;
  uint64_t since = wdh_now_ns(), end = since + 25000000000ull;
  while (!settled(dir, &last, &since) && wdh_now_ns() < end) {
    if (rank == hang_rank)
      demo_data_loader_wait(50);
    else
      demo_stream_synchronize(50);
  }
  /* A scheduler would kill the hung job; here every rank leaves cleanly (finalize with an op
   * still in flight, as on NCCL's abort path) so that the demo can go on. */
  wdh_proxy_destroy(px);
  wdh_comm_finalize(&c);
  wdh_unload(&p);
  return 0;
}

static int cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int summary(const char *dir) {
  char *paths[256];
  int n = wdh_list_dumps(dir, NULL, paths, 256);
  if (n > 256) n = 256;
  qsort(paths, (size_t)n, sizeof(char *), cmp);
  for (int i = 0; i < n; i++) {
    cJSON *j = wdh_json_load(paths[i]);
    const char *base = strrchr(paths[i], '/') ? strrchr(paths[i], '/') + 1 : paths[i];
    if (!j) {
      printf("  %-40s (unreadable)\n", base);
      continue;
    }
    const char *reason = wdh_jstr(j, "reason");
    int rank = (int)wdh_jnum(j, "comms.0.rank", -1);
    char what[512] = "";
    if (reason && !strcmp(reason, "stall")) {
      const char *func = wdh_jstr(j, "trigger.stalls.0.func");
      const char *wait = wdh_jstr(j, "trigger.stalls.0.waitingOn");
      snprintf(what, sizeof(what), "its watchdog fired: %s #%.0f, no progress for %.1f s (%s)",
               func ? func : "?", wdh_jnum(j, "trigger.stalls.0.seq", -1),
               wdh_jnum(j, "trigger.stalls.0.sinceProgressMs", 0) / 1000.0, wait ? wait : "?");
    } else if (reason && !strcmp(reason, "peer")) {
      snprintf(what, sizeof(what), "dumped on the trigger of pid %.0f (rank %.0f)",
               wdh_jnum(j, "trigger.origin.pid", -1),
               wdh_jnum(j, "trigger.origin.stalls.0.rank", -1));
      double enq = -1, done = -1;
      cJSON *s;
      cJSON_ArrayForEach(s, (cJSON *)wdh_jpath(j, "comms.0.seq")) {
        const char *f = wdh_jstr(s, "func");
        if (f && !strcmp(f, "AllReduce")) {
          enq = wdh_jnum(s, "lastEnqueued", -1);
          done = wdh_jnum(s, "lastCompleted", -1);
        }
      }
      size_t len = strlen(what);
      snprintf(what + len, sizeof(what) - len,
               "; its last AllReduce enqueued #%.0f, completed #%.0f", enq, done);
    } else {
      snprintf(what, sizeof(what), "%s dump", reason ? reason : "?");
    }
    printf("  rank %d  %-34s %s\n", rank, base, what);
    wdh_json_free(j);
  }
  wdh_free_paths(paths, n);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--summary")) return summary(argv[2]);
  if (argc < 5) {
    fprintf(stderr, "usage: %s PLUGIN RANK NRANKS DUMP_DIR [HANG_RANK] [HANG_SEQ]\n"
                    "       %s --summary DUMP_DIR\n",
            argv[0], argv[0]);
    return 2;
  }
  int hang_rank = argc > 5 ? atoi(argv[5]) : 2;
  int hang_seq = argc > 6 ? atoi(argv[6]) : 40;
  return rank_main(argv[1], atoi(argv[2]), atoi(argv[3]), argv[4], hang_rank, hang_seq);
}
