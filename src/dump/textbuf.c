/* The growing text buffer (textbuf.h). */
#include "dump/textbuf.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define WD_HUGE (2u << 20)

/*
 * The document buffer (tens of MB) is an anonymous mapping aligned to 2 MB and advised for
 * transparent huge pages: faulting in 4 KB pages one by one costs more than formatting the whole
 * dump on some virtual machines. Without THP it is an ordinary mapping.
 */
static int thp_available(void) {
  static atomic_int cached = -1; /* racing first calls compute the same value */
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
    char buf[128] = "";
    int fd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ssize_t n = read(fd, buf, sizeof(buf) - 1);
      buf[n > 0 ? n : 0] = 0;
      close(fd);
    }
    v = strstr(buf, "[always]") || strstr(buf, "[madvise]");
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}

char *wd_map_big(size_t len) {
  size_t span = len + WD_HUGE;
  char *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  uintptr_t a = ((uintptr_t)p + WD_HUGE - 1) & ~(uintptr_t)(WD_HUGE - 1);
  size_t head = a - (uintptr_t)p, tail = span - head - len;
  if (head) munmap(p, head);
  if (tail) munmap((char *)a + len, tail);
  madvise((void *)a, len, MADV_HUGEPAGE); /* advice only: fine when it fails */
#ifdef MADV_POPULATE_WRITE
  /* Without THP, fault everything in with one call instead of one trap per 4 KB page (with THP,
   * lazy faults are cheaper). Fails harmlessly (EINVAL) on kernels before 5.14. */
  if (!thp_available()) madvise((void *)a, len, MADV_POPULATE_WRITE);
#endif
  return (char *)a;
}

int wd_sb_reserve(wd_sb *b, size_t n) {
  if (b->oom) return -1;
  /* The sums and the doubling below must not wrap. */
  if (n >= SIZE_MAX / 2 || b->len >= SIZE_MAX / 2 - n) {
    b->oom = 1;
    return -1;
  }
  if (b->len + n + 1 <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + n + 1) cap *= 2;
  char *p;
  if (b->mapped) {
    cap = (cap + WD_HUGE - 1) & ~(size_t)(WD_HUGE - 1);
    p = wd_map_big(cap);
    if (p && b->p) {
      memcpy(p, b->p, b->len);
      munmap(b->p, b->cap);
    }
  } else {
    p = realloc(b->p, cap);
  }
  if (!p) {
    b->oom = 1;
    return -1;
  }
  b->p = p;
  b->cap = cap;
  return 0;
}

void wd_sb_free(wd_sb *b) {
  if (b->mapped && b->p)
    munmap(b->p, b->cap);
  else
    free(b->p);
  memset(b, 0, sizeof(*b));
}
