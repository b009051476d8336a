/*
 * How much of a busy ring a dump keeps: writer threads append to one ring as fast as they can
 * while the main thread takes snapshots the way a dump does. Prints the mean share of the ring
 * copied intact, torn (a writer inside the slot) and overwritten during the copy.
 *   bench_snapshot [-t writers] [-c capacity] [-s snapshots]
 */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "flightrec/ring.h"

static _Atomic int stop;

static void *writer(void *arg) {
  wd_ring *r = arg;
  wd_record rec;
  memset(&rec, 0, sizeof(rec));
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    rec.n++;
    wd_ring_write(r, &rec);
  }
  return NULL;
}

int main(int argc, char **argv) {
  int writers = 1, snaps = 200;
  uint32_t cap = 8192;
  int c;
  while ((c = getopt(argc, argv, "t:c:s:")) != -1) {
    switch (c) {
    case 't': writers = atoi(optarg); break;
    case 'c': cap = (uint32_t)strtoul(optarg, NULL, 10); break;
    case 's': snaps = atoi(optarg); break;
    default: fprintf(stderr, "usage: %s [-t writers] [-c capacity] [-s snapshots]\n", argv[0]); return 2;
    }
  }
  if (writers < 1 || writers > 64 || snaps < 1) return 2;
  wd_ring r;
  if (wd_ring_init(&r, cap) != 0) return 1;
  cap = wd_ring_capacity(&r);
  wd_record *out = calloc(cap, sizeof(*out));
  pthread_t t[64];
  for (int i = 0; i < writers; i++) pthread_create(&t[i], NULL, writer, &r);
  /* Let the ring fill and wrap before the first snapshot. */
  while (atomic_load(&r.head) < 4ull * cap) nanosleep(&(struct timespec){0, 1000000}, NULL);
  double kept = 0, torn = 0, lapped = 0, ns = 0;
  for (int i = 0; i < snaps; i++) {
    uint32_t tn = 0;
    uint64_t lost = 0;
    uint64_t head = atomic_load(&r.head);
    uint64_t t0 = wd_now_ns();
    uint32_t n = wd_ring_snapshot(&r, out, cap, &tn, &lost);
    ns += (double)(wd_now_ns() - t0);
    uint64_t first = head > cap ? head - cap : 0;
    kept += n;
    torn += tn;
    lapped += lost > first ? (double)(lost - first) : 0;
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < writers; i++) pthread_join(t[i], NULL);
  printf("bench_snapshot writers=%d capacity=%u snapshots=%d kept_pct=%.1f torn_pct=%.1f "
         "overwritten_pct=%.1f us_per_snapshot=%.1f\n",
         writers, cap, snaps, 100.0 * kept / snaps / cap, 100.0 * torn / snaps / cap,
         100.0 * lapped / snaps / cap, ns / snaps / 1000.0);
  free(out);
  wd_ring_destroy(&r);
  return 0;
}
