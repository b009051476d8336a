/* The record clock and the per-thread id cache (see clock.h). */
#include "base/clock.h"

#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

__thread int wd_tid_cache __attribute__((tls_model("initial-exec")));
int wd_clock_id = CLOCK_MONOTONIC_COARSE;
_Atomic(wd_clock_fn_t) wd_clock_fn = clock_gettime;

/* The vDSO's clock_gettime, by the name vdso(7) gives it on this architecture. glibc lists the
 * vDSO among the loaded objects under its soname; elsewhere (another libc, valgrind, which hides
 * the vDSO) the lookup fails and libc's function stays. */
static wd_clock_fn_t wd_vdso_clock(void) {
#if defined(__x86_64__) || defined(__i386__) || defined(__riscv)
  static const char sym[] = "__vdso_clock_gettime";
#elif defined(__aarch64__) || defined(__powerpc64__) || defined(__s390x__)
  static const char sym[] = "__kernel_clock_gettime";
#else
  return NULL;
#endif
  void *h = dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (h == NULL) return NULL;
  wd_clock_fn_t f;
  void *p = dlsym(h, sym);
  _Static_assert(sizeof f == sizeof p, "a function pointer is a data pointer's size (POSIX dlsym)");
  __builtin_memcpy(&f, &p, sizeof f);
  dlclose(h); /* the vDSO stays mapped for the process's life */
  return f;
}

int wd_clock_setup(int precise) {
  wd_clock_id = precise ? CLOCK_MONOTONIC : CLOCK_MONOTONIC_COARSE;
  wd_clock_fn_t f = wd_vdso_clock();
  /* Trusted only when it answers, on the same time line as libc's (one coarse tick apart at
   * most, with room for a preemption between the reads). */
  struct timespec a, b, c;
  if (f && clock_gettime(wd_clock_id, &a) == 0 && f(wd_clock_id, &b) == 0 &&
      clock_gettime(wd_clock_id, &c) == 0) {
    int64_t ta = (int64_t)a.tv_sec * 1000000000 + a.tv_nsec;
    int64_t tb = (int64_t)b.tv_sec * 1000000000 + b.tv_nsec;
    int64_t tc = (int64_t)c.tv_sec * 1000000000 + c.tv_nsec;
    if (tb >= ta && tb <= tc) {
      atomic_store_explicit(&wd_clock_fn, f, memory_order_relaxed);
      return 1;
    }
  }
  atomic_store_explicit(&wd_clock_fn, clock_gettime, memory_order_relaxed);
  return 0;
}

int wd_tid_slow(void) {
  wd_tid_cache = (int)syscall(SYS_gettid);
  return wd_tid_cache;
}

void wd_tid_forget(void) { wd_tid_cache = 0; }
