/*
 * Logging. With NCCL's logger, lines go through it (subsystem WD_LOG_SUBSYS) so NCCL_DEBUG and
 * NCCL_DEBUG_SUBSYS govern them like the rest of NCCL's output. Without one (tests, tools, or a
 * message before the first init), one line goes to stderr.
 *
 * Callable from any thread; not from a signal handler (NCCL's logger takes a mutex, and this
 * formats with vsnprintf).
 */
#include "base/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Longest message; longer ones are cut and end with "...". */
#define WD_LOG_MAX 1024

static _Atomic(wd_logger_fn) wd_logger;

void wd_log_set_logger(wd_logger_fn fn) {
  if (!fn) return;
  wd_logger_fn expected = NULL;
  /* The first logger wins: every init passes the same function, and replacing it while another
   * thread is calling it would gain nothing. */
  atomic_compare_exchange_strong(&wd_logger, &expected, fn);
}

void wd_log_reset(void) { atomic_store(&wd_logger, NULL); }

/* Whether the stderr fallback prints a line of this level. */
static int wd_stderr_wants(wd_log_level level) {
  if (level == WD_LOG_WARN || level == WD_LOG_ABORT) return 1;
  if (level == WD_LOG_NONE) return 0;
  const char *dbg = getenv("NCCL_DEBUG");
  if (!dbg) return 0;
  if (strcasecmp(dbg, "TRACE") == 0) return 1;
  return strcasecmp(dbg, "INFO") == 0 && level != WD_LOG_TRACE;
}

static const char *wd_level_name(wd_log_level level) {
  switch (level) {
  case WD_LOG_WARN: return "WARN";
  case WD_LOG_ABORT: return "ABORT";
  case WD_LOG_TRACE: return "TRACE";
  case WD_LOG_VERSION: return "VERSION";
  default: return "INFO";
  }
}

void wd_log(wd_log_level level, const char *file, int line, const char *fmt, ...) {
  char msg[WD_LOG_MAX];
  wd_logger_fn fn = atomic_load(&wd_logger);
  if (!fn && !wd_stderr_wants(level)) return;

  int n = -1;
  va_list ap;
  va_start(ap, fmt);
  if (fmt) n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n < 0) {
    snprintf(msg, sizeof msg, "(unformattable message)");
  } else if ((size_t)n >= sizeof msg) {
    memcpy(msg + sizeof msg - 4, "...", 4);
  }

  if (fn) {
    /* Pass the text as an argument, never as the format: it may contain '%'. */
    fn(level, WD_LOG_SUBSYS, file ? file : "", line, "%s", msg);
    return;
  }

  /* One write() per line so that lines from several threads or ranks do not interleave. */
  char out[WD_LOG_MAX + 64];
  int len = snprintf(out, sizeof out, "nccl-watchdog: [%d] %s %s\n", (int)getpid(),
                     wd_level_name(level), msg);
  if (len < 0) return;
  if ((size_t)len >= sizeof out) {
    len = (int)sizeof out - 1;
    out[len - 1] = '\n';
  }
  const char *p = out;
  size_t left = (size_t)len;
  while (left > 0) {
    ssize_t w = write(STDERR_FILENO, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    p += w;
    left -= (size_t)w;
  }
}
