/* Python stacks through the interpreter's own traceback dumper (python.h). */
#include "stacks/python.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <pthread.h>
#include <setjmp.h>

#define WD_PY_TEXT_MAX (512L * 1024) /* 100 threads x 100 frames fit several times */

typedef int (*wd_py_is_init_fn)(void);
typedef const char *(*wd_py_dump_fn)(int fd, void *interp, void *tstate);

/* Offset of the kernel thread id inside glibc's thread descriptor (what pthread_t points at),
 * found on this thread: the word equal to our tid. -1 when not found. */
static long wd_py_tid_offset(void) {
  static long cached = -2;
  if (cached != -2) return cached;
  cached = -1;
  unsigned char buf[2048];
  struct iovec local = {buf, sizeof buf}, remote = {(void *)pthread_self(), sizeof buf};
  if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof buf) return cached;
  pid_t tid = (pid_t)syscall(SYS_gettid);
  for (size_t off = 0; off + sizeof(pid_t) <= sizeof buf; off += sizeof(pid_t)) {
    pid_t v;
    memcpy(&v, buf + off, sizeof v);
    if (v == tid) {
      cached = (long)off;
      break;
    }
  }
  return cached;
}

/* The tid in the descriptor ident points at, if it reads as one of our threads. */
static int wd_py_tid_of(uint64_t ident) {
  long off = wd_py_tid_offset();
  if (off < 0 || ident == 0) return 0;
  pid_t v = 0;
  struct iovec local = {&v, sizeof v}, remote = {(void *)(uintptr_t)(ident + (uint64_t)off), sizeof v};
  if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof v || v <= 0) return 0;
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d", (int)v);
  return access(path, F_OK) == 0 ? (int)v : 0;
}

static void wd_copy_span(char *dst, size_t len, const char *src, size_t n) {
  if (n >= len) n = len - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}

/* `Thread 0x00007f... (most recent call first):` / `Current thread 0x...`, then frames as
 * `  File "x.py", line 12 in f`. Other lines (`  <no Python frame>`, `  ...`) are skipped. */
static void wd_py_parse(char *text, wd_py_result *res) {
  wd_py_thread *cur = NULL;
  for (char *line = text, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    const char *t = strstr(line, "hread 0x");
    if (t && (strncmp(line, "Thread 0x", 9) == 0 || strncmp(line, "Current thread 0x", 17) == 0)) {
      if (res->nthreads >= WD_PY_MAX_THREADS) {
        cur = NULL;
        continue;
      }
      cur = &res->threads[res->nthreads++];
      memset(cur, 0, sizeof(*cur));
      cur->ident = strtoull(t + 6, NULL, 16);
      cur->tid = wd_py_tid_of(cur->ident);
      continue;
    }
    const char *f = strstr(line, "File \"");
    if (!cur || !f) continue;
    if (cur->nframes >= WD_PY_MAX_FRAMES) {
      cur->truncated = 1;
      continue;
    }
    f += 6;
    const char *q = strstr(f, "\", line ");
    if (!q) continue;
    wd_py_frame *fr = &cur->frames[cur->nframes];
    wd_copy_span(fr->file, sizeof fr->file, f, (size_t)(q - f));
    char *end;
    fr->line = (int)strtol(q + 8, &end, 10);
    const char *in = strstr(end, " in ");
    wd_copy_span(fr->func, sizeof fr->func, in ? in + 4 : "?", strlen(in ? in + 4 : "?"));
    cur->nframes++;
  }
}

/* Set only around the dumper call, on the thread making it. */
static __thread sigjmp_buf *wd_py_guard __attribute__((tls_model("initial-exec")));

void wd_py_guard_jump(void) {
  sigjmp_buf *g = wd_py_guard;
  if (!g) return;
  wd_py_guard = NULL;
  siglongjmp(*g, 1);
}

/* The dumper under the guard. Returns its error string, or "faulted". */
static const char *wd_py_dump_guarded(wd_py_dump_fn dump_fn, int fd, int *faulted) {
  static sigjmp_buf jb; /* only the watchdog thread dumps (one collection at a time) */
  *faulted = 0;
  if (sigsetjmp(jb, 1) != 0) {
    *faulted = 1;
    return "the traceback dumper faulted (a thread changed under it): no Python stacks";
  }
  wd_py_guard = &jb;
  const char *err = dump_fn(fd, NULL, NULL);
  wd_py_guard = NULL;
  return err;
}

int wd_py_collect(wd_py_result *res) {
  memset(res, 0, sizeof(*res));
  void *is_init = dlsym(RTLD_DEFAULT, "Py_IsInitialized");
  void *dump = dlsym(RTLD_DEFAULT, "_Py_DumpTracebackThreads");
  if (!is_init || !dump) {
    snprintf(res->note, sizeof res->note, "no Python interpreter in this process");
    return -1;
  }
  wd_py_is_init_fn is_init_fn;
  wd_py_dump_fn dump_fn;
  *(void **)&is_init_fn = is_init;
  *(void **)&dump_fn = dump;
  if (!is_init_fn()) {
    snprintf(res->note, sizeof res->note, "Python is not initialised");
    return -1;
  }
  res->available = 1;
  int fd = (int)syscall(SYS_memfd_create, "nccl-watchdog-py", MFD_CLOEXEC);
  if (fd < 0) {
    snprintf(res->note, sizeof res->note, "memfd_create: %s", strerror(errno));
    return -1;
  }
  /* No GIL, no thread state of ours: the dumper finds the main interpreter itself, as for
   * faulthandler's watchdog thread. It reads frames other threads may be changing; see
   * docs/backtraces.md for what that means on a busy process. */
  int faulted;
  const char *err = wd_py_dump_guarded(dump_fn, fd, &faulted);
  if (faulted) {
    close(fd);
    snprintf(res->note, sizeof res->note, "%s", err);
    return -1;
  }
  off_t len = lseek(fd, 0, SEEK_CUR);
  if (len > WD_PY_TEXT_MAX) len = WD_PY_TEXT_MAX;
  char *text = len > 0 ? malloc((size_t)len + 1) : NULL;
  ssize_t got = text ? pread(fd, text, (size_t)len, 0) : -1;
  close(fd);
  if (err) snprintf(res->note, sizeof res->note, "%s", err);
  if (got <= 0) {
    free(text);
    if (!err) snprintf(res->note, sizeof res->note, "the dumper wrote nothing");
    return -1;
  }
  text[got] = '\0';
  res->threads = calloc(WD_PY_MAX_THREADS, sizeof(*res->threads));
  if (res->threads) wd_py_parse(text, res);
  free(text);
  return res->threads ? 0 : -1;
}

void wd_py_free(wd_py_result *res) {
  free(res->threads);
  memset(res, 0, sizeof(*res));
}
