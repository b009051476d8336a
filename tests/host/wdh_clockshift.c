/*
 * A wall clock set wrong, for one process tree (LD_PRELOAD): Linux has no namespace for
 * CLOCK_REALTIME, so a node whose NTP went wrong is played by moving what clock_gettime, time and
 * gettimeofday say of the wall clock by WDH_WALL_SHIFT_MS. The monotonic clocks are left alone
 * (a time namespace moves those); the kernel's own stamps (file times) stay true, as a shared
 * file system's server would keep them.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static long long shift_ns(void) {
  static int known;
  static long long ns;
  if (!known) { /* a benign race: every thread computes the same value */
    const char *e = getenv("WDH_WALL_SHIFT_MS");
    ns = e ? atoll(e) * 1000000LL : 0;
    known = 1;
  }
  return ns;
}

static void add_ns(struct timespec *ts, long long ns) {
  long long t = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + ns;
  ts->tv_sec = (time_t)(t / 1000000000LL);
  ts->tv_nsec = (long)(t % 1000000000LL);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
  static int (*real)(clockid_t, struct timespec *);
  if (!real) *(void **)&real = dlsym(RTLD_NEXT, "clock_gettime");
  int rc = real(id, ts);
  if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) add_ns(ts, shift_ns());
  return rc;
}

time_t time(time_t *out) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (out) *out = ts.tv_sec;
  return ts.tv_sec;
}

int gettimeofday(struct timeval *tv, void *tz) {
  (void)tz;
  struct timespec ts;
  int rc = clock_gettime(CLOCK_REALTIME, &ts);
  tv->tv_sec = ts.tv_sec; /* glibc declares tv non-null */
  tv->tv_usec = ts.tv_nsec / 1000;
  return rc;
}
