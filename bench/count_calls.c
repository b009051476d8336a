/*
 * LD_PRELOAD shim: counts allocator calls, mutex locks and the libc system-call wrappers a plugin
 * could reach from its hot path, inside a window the benchmark opens after warm-up.
 *
 * The benchmark calls wd_bench_window(1) on each driver thread once warm-up is over and
 * wd_bench_window(0) at the end (it declares the function weak, so it runs without the shim too).
 * Calls are counted per thread class: "window" threads (the driver threads inside their window)
 * and "other" threads (the plugin's own watchdog thread, for instance) while any window is open.
 * At exit the shim prints one line per class to stderr:
 *   count_calls window: malloc=0 calloc=0 realloc=0 free=0 ... syscalls=0
 * System calls made without a libc wrapper (inline futex in pthread, raw `syscall` instructions)
 * are invisible here: bench/run-bench.sh also runs the bench under `strace -f` for those.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

enum {
  C_MALLOC, C_CALLOC, C_REALLOC, C_FREE, C_MEMALIGN, C_MUTEX, C_WRITE, C_READ, C_OPEN, C_CLOSE,
  C_SYSCALL, C_NANOSLEEP, C_COUNT
};
static const char *const c_names[C_COUNT] = {"malloc", "calloc", "realloc", "free", "memalign",
                                             "mutex_lock", "write", "read", "open", "close",
                                             "syscall", "nanosleep"};

static _Atomic long c_window[C_COUNT], c_other[C_COUNT];
static _Atomic int c_open_windows;
static __thread int c_in_window;
static __thread int c_busy; /* our own printing must not count */

static inline void c_count(int what) {
  if (c_busy) return;
  if (c_in_window)
    atomic_fetch_add_explicit(&c_window[what], 1, memory_order_relaxed);
  else if (atomic_load_explicit(&c_open_windows, memory_order_relaxed) > 0)
    atomic_fetch_add_explicit(&c_other[what], 1, memory_order_relaxed);
}

EXPORT void wd_bench_window(int open) {
  if (open && !c_in_window) {
    c_in_window = 1;
    atomic_fetch_add(&c_open_windows, 1);
  } else if (!open && c_in_window) {
    c_in_window = 0;
    atomic_fetch_sub(&c_open_windows, 1);
  }
}

/* glibc's allocator entry points, so no dlsym is needed (dlsym itself may allocate). */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);

EXPORT void *malloc(size_t n) {
  c_count(C_MALLOC);
  return __libc_malloc(n);
}
EXPORT void *calloc(size_t a, size_t b) {
  c_count(C_CALLOC);
  return __libc_calloc(a, b);
}
EXPORT void *realloc(void *p, size_t n) {
  c_count(C_REALLOC);
  return __libc_realloc(p, n);
}
EXPORT void free(void *p) {
  if (p) c_count(C_FREE);
  __libc_free(p);
}
EXPORT int posix_memalign(void **out, size_t align, size_t n) {
  c_count(C_MEMALIGN);
  void *p = __libc_memalign(align, n);
  if (!p) return 12; /* ENOMEM */
  *out = p;
  return 0;
}
EXPORT void *aligned_alloc(size_t align, size_t n) {
  c_count(C_MEMALIGN);
  return __libc_memalign(align, n);
}

/* The rest go through dlsym(RTLD_NEXT), resolved on first use. */
#define NEXT(name)                                                                         \
  static __typeof__(&name) next_##name;                                                    \
  if (!next_##name) next_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name)

EXPORT int pthread_mutex_lock(pthread_mutex_t *m) {
  NEXT(pthread_mutex_lock);
  c_count(C_MUTEX);
  return next_pthread_mutex_lock(m);
}
EXPORT int pthread_mutex_trylock(pthread_mutex_t *m) {
  NEXT(pthread_mutex_trylock);
  c_count(C_MUTEX);
  return next_pthread_mutex_trylock(m);
}
EXPORT ssize_t write(int fd, const void *buf, size_t n) {
  NEXT(write);
  c_count(C_WRITE);
  return next_write(fd, buf, n);
}
EXPORT ssize_t read(int fd, void *buf, size_t n) {
  NEXT(read);
  c_count(C_READ);
  return next_read(fd, buf, n);
}
EXPORT int open(const char *path, int flags, ...) {
  NEXT(open);
  va_list ap;
  va_start(ap, flags);
  mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
  va_end(ap);
  c_count(C_OPEN);
  return next_open(path, flags, mode);
}
EXPORT int openat(int dirfd, const char *path, int flags, ...) {
  NEXT(openat);
  va_list ap;
  va_start(ap, flags);
  mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
  va_end(ap);
  c_count(C_OPEN);
  return next_openat(dirfd, path, flags, mode);
}
EXPORT int close(int fd) {
  NEXT(close);
  c_count(C_CLOSE);
  return next_close(fd);
}
EXPORT long syscall(long nr, ...) {
  NEXT(syscall);
  va_list ap;
  va_start(ap, nr);
  long a[6];
  for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
  va_end(ap);
  c_count(C_SYSCALL);
  return next_syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
EXPORT int nanosleep(const struct timespec *req, struct timespec *rem) {
  NEXT(nanosleep);
  c_count(C_NANOSLEEP);
  return next_nanosleep(req, rem);
}

static void c_print(const char *label, _Atomic long *counts) {
  char line[512];
  int off = snprintf(line, sizeof(line), "count_calls %s:", label);
  long total = 0;
  for (int i = 0; i < C_COUNT; i++) {
    long v = atomic_load(&counts[i]);
    total += v;
    off += snprintf(line + off, sizeof(line) - off, " %s=%ld", c_names[i], v);
  }
  snprintf(line + off, sizeof(line) - off, " total=%ld\n", total);
  fputs(line, stderr);
}

__attribute__((destructor)) static void c_report(void) {
  c_busy = 1;
  c_print("window", c_window);
  c_print("other-threads", c_other);
}
