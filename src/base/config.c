/*
 * Configuration: defaults, then the file named by NCCL_WATCHDOG_CONFIG, then the environment.
 *
 * Nothing here may stop a job: every rejected value produces exactly one warning naming the
 * variable, the value and what is used instead, and the default takes its place.
 */
#include "base/config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/log.h"

#define WD_NS_PER_MS UINT64_C(1000000)
#define WD_NS_PER_S UINT64_C(1000000000)

/* Documented ranges (docs/configuration.md). */
#define WD_TIMEOUT_MIN_NS WD_NS_PER_MS
#define WD_TIMEOUT_MAX_NS (UINT64_C(30) * 24 * 3600 * WD_NS_PER_S)
#define WD_POLL_MIN_NS (10 * WD_NS_PER_MS)
#define WD_POLL_MAX_NS (60 * WD_NS_PER_S)
#define WD_BT_WAIT_MIN_NS (10 * WD_NS_PER_MS)
#define WD_BT_WAIT_MAX_NS (60 * WD_NS_PER_S)
#define WD_RING_MIN 16u
#define WD_RING_MAX 1048576u
#define WD_MAX_EVENTS_MIN 1024u
#define WD_MAX_EVENTS_MAX 16777216u
#define WD_MAX_DUMPS_MIN 1u
#define WD_MAX_DUMPS_MAX 100000u
#define WD_MASK_LIMIT (1 << 16) /* v7 types: KernelPhase is 1 << 15 */

/* Longest raw value quoted back in a warning; longer ones are cut with "...". */
#define WD_QUOTE_MAX 128
#define WD_MSG_MAX 768
#define WD_LINE_MAX 4096

/* ------------------------------------------------------------------------------------------ */
/* Small string helpers. */

static const char *wd_skip_ws(const char *s) {
  while (*s && isspace((unsigned char)*s)) s++;
  return s;
}

/* Copy s without surrounding whitespace into dst; returns 0, or -1 when it does not fit. */
static int wd_trim_copy(const char *s, char *dst, size_t cap) {
  s = wd_skip_ws(s);
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) n--;
  if (n >= cap) return -1;
  memcpy(dst, s, n);
  dst[n] = '\0';
  return 0;
}

/* "off", "none" or "0": a feature turned off. */
static int wd_means_off(const char *val) {
  char v[16] = "";
  return wd_trim_copy(val, v, sizeof v) == 0 &&
         (!strcasecmp(v, "off") || !strcasecmp(v, "none") || !strcmp(v, "0"));
}

/* Parse decimal digits into *out; returns the end pointer, or NULL on overflow/no digits. */
static const char *wd_parse_digits(const char *p, uint64_t *out) {
  uint64_t v = 0;
  const char *start = p;
  while (*p >= '0' && *p <= '9') {
    uint64_t d = (uint64_t)(*p - '0');
    if (v > (UINT64_MAX - d) / 10) return NULL;
    v = v * 10 + d;
    p++;
  }
  if (p == start) return NULL;
  *out = v;
  return p;
}

/* ------------------------------------------------------------------------------------------ */
/* Parsers. */

int wd_parse_duration_ns(const char *s, uint64_t *out_ns) {
  char buf[64];
  if (!s || !out_ns || wd_trim_copy(s, buf, sizeof buf) != 0 || buf[0] == '\0') return -1;

  /* Hand-written rather than strtod: strtod takes "nan", "inf", "1e3", hex and the locale's
   * decimal point, none of which belong in a duration. */
  uint64_t ipart = 0;
  const char *p = wd_parse_digits(buf, &ipart);
  if (!p) return -1;
  uint64_t frac = 0, denom = 1;
  if (*p == '.') {
    p++;
    const char *fstart = p;
    /* Digits beyond 12 decimals are accepted but do not change the result (sub-ns for "s"). */
    while (*p >= '0' && *p <= '9') {
      if (denom < 1000000000000ULL) {
        frac = frac * 10 + (uint64_t)(*p - '0');
        denom *= 10;
      }
      p++;
    }
    if (p == fstart) return -1;
  }

  uint64_t unit;
  if (*p == '\0' || strcasecmp(p, "s") == 0) unit = WD_NS_PER_S;
  else if (strcasecmp(p, "ms") == 0) unit = WD_NS_PER_MS;
  else if (strcasecmp(p, "m") == 0) unit = 60 * WD_NS_PER_S;
  else if (strcasecmp(p, "h") == 0) unit = 3600 * WD_NS_PER_S;
  else return -1;

  if (ipart > UINT64_MAX / unit) return -1;
  uint64_t ns = ipart * unit;
  /* frac < 1e12 and unit <= 3.6e12: the product needs 128 bits. */
  unsigned __int128 fns = ((unsigned __int128)frac * unit) / denom;
  if (fns > (unsigned __int128)(UINT64_MAX - ns)) return -1;
  *out_ns = ns + (uint64_t)fns;
  return 0;
}

int wd_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out) {
  char buf[64];
  uint64_t v;
  if (!s || !out || wd_trim_copy(s, buf, sizeof buf) != 0) return -1;
  const char *p = wd_parse_digits(buf, &v);
  if (!p || *p != '\0' || v < min || v > max) return -1;
  *out = v;
  return 0;
}

int wd_parse_bool(const char *s, int *out) {
  static const char *const yes[] = {"1", "true", "yes", "on"};
  static const char *const no[] = {"0", "false", "no", "off"};
  char buf[16];
  if (!s || !out || wd_trim_copy(s, buf, sizeof buf) != 0) return -1;
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
    if (strcasecmp(buf, yes[i]) == 0) {
      *out = 1;
      return 0;
    }
    if (strcasecmp(buf, no[i]) == 0) {
      *out = 0;
      return 0;
    }
  }
  return -1;
}

int wd_parse_mask(const char *s, int *out) {
  char buf[64];
  uint64_t v = 0;
  if (!s || !out || wd_trim_copy(s, buf, sizeof buf) != 0 || buf[0] == '\0') return -1;
  const char *p = buf;
  if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
    p += 2;
    if (!isxdigit((unsigned char)*p)) return -1;
    while (isxdigit((unsigned char)*p)) {
      int c = tolower((unsigned char)*p);
      uint64_t d = (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
      if (v > (UINT64_MAX >> 4)) return -1;
      v = (v << 4) | d;
      p++;
    }
  } else {
    p = wd_parse_digits(p, &v);
    if (!p) return -1;
  }
  if (*p != '\0' || v == 0 || v >= WD_MASK_LIMIT) return -1;
  *out = (int)v;
  return 0;
}

/* Standard signal names, without the "SIG" prefix. Real-time signals are named from SIGRTMIN. */
static const struct {
  const char *name;
  int sig;
} wd_signames[] = {
    {"HUP", SIGHUP},     {"INT", SIGINT},       {"QUIT", SIGQUIT},   {"ILL", SIGILL},
    {"TRAP", SIGTRAP},   {"ABRT", SIGABRT},     {"IOT", SIGIOT},     {"BUS", SIGBUS},
    {"FPE", SIGFPE},     {"KILL", SIGKILL},     {"USR1", SIGUSR1},   {"SEGV", SIGSEGV},
    {"USR2", SIGUSR2},   {"PIPE", SIGPIPE},     {"ALRM", SIGALRM},   {"TERM", SIGTERM},
#ifdef SIGSTKFLT
    {"STKFLT", SIGSTKFLT},
#endif
    {"CHLD", SIGCHLD},   {"CONT", SIGCONT},     {"STOP", SIGSTOP},   {"TSTP", SIGTSTP},
    {"TTIN", SIGTTIN},   {"TTOU", SIGTTOU},     {"URG", SIGURG},     {"XCPU", SIGXCPU},
    {"XFSZ", SIGXFSZ},   {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF},   {"WINCH", SIGWINCH},
    {"IO", SIGIO},       {"POLL", SIGPOLL},     {"PWR", SIGPWR},     {"SYS", SIGSYS},
};

/* Signals the plugin must never take over: they stop, kill, or report a crash. */
static int wd_signal_forbidden(int sig) {
  switch (sig) {
  case SIGKILL: case SIGSTOP: case SIGSEGV: case SIGBUS: case SIGFPE: case SIGILL: case SIGABRT:
    return 1;
  default:
    break;
  }
  /* Between the classic signals and SIGRTMIN lie the C library's private signals (glibc uses
   * 32 and 33 for thread cancellation and setxid). */
  if (sig > SIGSYS && sig < SIGRTMIN) return 1;
  return sig < 0 || sig > SIGRTMAX;
}

int wd_parse_signal(const char *s, int *out_sig) {
  char buf[32];
  int sig = -1;
  if (!s || !out_sig || wd_trim_copy(s, buf, sizeof buf) != 0 || buf[0] == '\0') return -1;
  if (strcasecmp(buf, "none") == 0) {
    *out_sig = 0;
    return 0;
  }
  if (buf[0] >= '0' && buf[0] <= '9') {
    uint64_t v;
    if (wd_parse_uint(buf, 0, (uint64_t)SIGRTMAX, &v) != 0) return -1;
    sig = (int)v; /* 0 means none, like the word */
  } else {
    const char *name = buf;
    if (strncasecmp(name, "SIG", 3) == 0) name += 3;
    if (strncasecmp(name, "RTMIN", 5) == 0 || strncasecmp(name, "RTMAX", 5) == 0) {
      int from_max = (name[3] == 'a' || name[3] == 'A');
      const char *p = name + 5;
      uint64_t off = 0;
      if (*p == '+' || *p == '-') {
        if ((*p == '-') != from_max) return -1; /* SIGRTMIN-n or SIGRTMAX+n are out of range */
        if (p[1] < '0' || p[1] > '9') return -1;
        if (wd_parse_uint(p + 1, 0, (uint64_t)(SIGRTMAX - SIGRTMIN), &off) != 0) return -1;
      } else if (*p != '\0') {
        return -1;
      }
      sig = from_max ? SIGRTMAX - (int)off : SIGRTMIN + (int)off;
    } else {
      for (size_t i = 0; i < sizeof wd_signames / sizeof wd_signames[0]; i++) {
        if (strcasecmp(name, wd_signames[i].name) == 0) {
          sig = wd_signames[i].sig;
          break;
        }
      }
      if (sig < 0) return -1;
    }
  }
  if (sig != 0 && wd_signal_forbidden(sig)) return -1;
  *out_sig = sig;
  return 0;
}

const char *wd_signal_name(int sig, char *buf, int len) {
  if (!buf || len <= 0) return "";
  if (sig == 0) {
    snprintf(buf, (size_t)len, "none");
    return buf;
  }
  if (sig >= SIGRTMIN && sig <= SIGRTMAX) {
    if (sig == SIGRTMIN) snprintf(buf, (size_t)len, "SIGRTMIN");
    else snprintf(buf, (size_t)len, "SIGRTMIN+%d", sig - SIGRTMIN);
    return buf;
  }
  for (size_t i = 0; i < sizeof wd_signames / sizeof wd_signames[0]; i++) {
    /* SIGIOT and SIGPOLL are aliases listed after their usual names, so the first match wins. */
    if (wd_signames[i].sig == sig) {
      snprintf(buf, (size_t)len, "SIG%s", wd_signames[i].name);
      return buf;
    }
  }
  snprintf(buf, (size_t)len, "signal %d", sig);
  return buf;
}

/* ------------------------------------------------------------------------------------------ */
/* Formatting values back for warnings and the INFO line. */

/* Whole hours as "h", else seconds (the unit people think of for timeouts: "300s", not "5m"). */
static void wd_fmt_duration(uint64_t ns, char *buf, size_t len) {
  if (ns == 0) snprintf(buf, len, "0");
  else if (ns % (3600 * WD_NS_PER_S) == 0) snprintf(buf, len, "%" PRIu64 "h", ns / (3600 * WD_NS_PER_S));
  else if (ns % WD_NS_PER_S == 0) snprintf(buf, len, "%" PRIu64 "s", ns / WD_NS_PER_S);
  else if (ns % WD_NS_PER_MS == 0) snprintf(buf, len, "%" PRIu64 "ms", ns / WD_NS_PER_MS);
  else {
    /* Sub-millisecond precision: seconds with the trailing zeros of the fraction removed. */
    char frac[16];
    snprintf(frac, sizeof frac, "%09" PRIu64, ns % WD_NS_PER_S);
    size_t n = strlen(frac);
    while (n > 1 && frac[n - 1] == '0') frac[--n] = '\0';
    snprintf(buf, len, "%" PRIu64 ".%ss", ns / WD_NS_PER_S, frac);
  }
}

/* Quote a raw value for a message: bounded, with control characters escaped. */
static void wd_quote(const char *s, char *buf, size_t len) {
  size_t o = 0;
  for (size_t i = 0; s[i] && o + 5 < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (i >= WD_QUOTE_MAX) {
      memcpy(buf + o, "...", 3);
      o += 3;
      break;
    }
    if (c < 0x20 || c == 0x7f || c == '"' || c == '\\') {
      int w = snprintf(buf + o, len - o, c == '"' || c == '\\' ? "\\%c" : "\\x%02x", c);
      if (w < 0 || (size_t)w >= len - o) break;
      o += (size_t)w;
    } else {
      buf[o++] = (char)c;
    }
  }
  buf[o] = '\0';
}

/* ------------------------------------------------------------------------------------------ */
/* The keys. */

enum {
  K_ENABLE, K_TIMEOUT, K_POLL, K_UNREACHED, K_DUMP_DIR, K_RING, K_PROXY_RING, K_MAX_EVENTS,
  K_SIGNAL, K_BT_SIGNAL, K_ACTION, K_MASK, K_BACKTRACE, K_BT_WAIT, K_PEER_DUMPS, K_MAX_DUMPS,
  K_CLOCK, K_GPU_EVENTS, K_RING_DIR, K_KEEP_RINGS, K_TERM_DUMP, K_PYTHON, K_HOSTNAME, K_COMPRESS, K_METRICS, K_METRICS_DIR, K_TRIGGER_POLL, K_PEER_RECORDS, K_MEMORY_BUDGET, K_KERNELCH,
  K_VERDICT, K_ANALYZER, K_VERDICT_WAIT, K_VERDICT_LIMIT, K_VERDICT_MEMORY, K_ON_VERDICT,
  K_TELEMETRY, K_TELEMETRY_LINKS, K_GRAPH_LAUNCHES, K_OTLP_ENDPOINT, K_OTLP_INTERVAL, K_OTLP_TIMEOUT, K_OTLP_HEADERS, K_COUNT
};

static const char *const wd_key_names[K_COUNT] = {
    [K_ENABLE] = "NCCL_WATCHDOG_ENABLE",
    [K_TIMEOUT] = "NCCL_WATCHDOG_TIMEOUT",
    [K_POLL] = "NCCL_WATCHDOG_POLL",
    [K_UNREACHED] = "NCCL_WATCHDOG_UNREACHED_TIMEOUT",
    [K_DUMP_DIR] = "NCCL_WATCHDOG_DUMP_DIR",
    [K_RING] = "NCCL_WATCHDOG_RING_SIZE",
    [K_PROXY_RING] = "NCCL_WATCHDOG_PROXY_RING_SIZE",
    [K_MAX_EVENTS] = "NCCL_WATCHDOG_MAX_EVENTS",
    [K_SIGNAL] = "NCCL_WATCHDOG_SIGNAL",
    [K_BT_SIGNAL] = "NCCL_WATCHDOG_BACKTRACE_SIGNAL",
    [K_ACTION] = "NCCL_WATCHDOG_ACTION",
    [K_MASK] = "NCCL_WATCHDOG_EVENT_MASK",
    [K_BACKTRACE] = "NCCL_WATCHDOG_BACKTRACE",
    [K_BT_WAIT] = "NCCL_WATCHDOG_BACKTRACE_WAIT",
    [K_PEER_DUMPS] = "NCCL_WATCHDOG_PEER_DUMPS",
    [K_MAX_DUMPS] = "NCCL_WATCHDOG_MAX_DUMPS",
    [K_CLOCK] = "NCCL_WATCHDOG_CLOCK",
    [K_GPU_EVENTS] = "NCCL_WATCHDOG_GPU_EVENTS",
    [K_RING_DIR] = "NCCL_WATCHDOG_RING_DIR",
    [K_KEEP_RINGS] = "NCCL_WATCHDOG_KEEP_RINGS",
    [K_TERM_DUMP] = "NCCL_WATCHDOG_TERM_DUMP",
    [K_PYTHON] = "NCCL_WATCHDOG_PYTHON",
    [K_HOSTNAME] = "NCCL_WATCHDOG_HOSTNAME",
    [K_COMPRESS] = "NCCL_WATCHDOG_COMPRESS",
    [K_METRICS] = "NCCL_WATCHDOG_METRICS",
    [K_METRICS_DIR] = "NCCL_WATCHDOG_METRICS_DIR",
    [K_TRIGGER_POLL] = "NCCL_WATCHDOG_TRIGGER_POLL",
    [K_PEER_RECORDS] = "NCCL_WATCHDOG_PEER_RECORDS",
    [K_MEMORY_BUDGET] = "NCCL_WATCHDOG_MEMORY_BUDGET",
    [K_KERNELCH] = "NCCL_WATCHDOG_KERNELCH",
    [K_VERDICT] = "NCCL_WATCHDOG_VERDICT",
    [K_ANALYZER] = "NCCL_WATCHDOG_ANALYZER",
    [K_VERDICT_WAIT] = "NCCL_WATCHDOG_VERDICT_WAIT",
    [K_VERDICT_LIMIT] = "NCCL_WATCHDOG_VERDICT_TIMEOUT",
    [K_VERDICT_MEMORY] = "NCCL_WATCHDOG_VERDICT_MEMORY",
    [K_ON_VERDICT] = "NCCL_WATCHDOG_ON_VERDICT",
    [K_TELEMETRY] = "NCCL_WATCHDOG_TELEMETRY",
    [K_TELEMETRY_LINKS] = "NCCL_WATCHDOG_TELEMETRY_LINKS",
    [K_GRAPH_LAUNCHES] = "NCCL_WATCHDOG_GRAPH_LAUNCHES",
    [K_OTLP_ENDPOINT] = "NCCL_WATCHDOG_OTLP_ENDPOINT",
    [K_OTLP_INTERVAL] = "NCCL_WATCHDOG_OTLP_INTERVAL",
    [K_OTLP_TIMEOUT] = "NCCL_WATCHDOG_OTLP_TIMEOUT",
    [K_OTLP_HEADERS] = "NCCL_WATCHDOG_OTLP_HEADERS",
};

#define WD_CONFIG_VAR "NCCL_WATCHDOG_CONFIG"

static int wd_key_index(const char *name) {
  for (int i = 0; i < K_COUNT; i++)
    if (strcmp(name, wd_key_names[i]) == 0) return i;
  return -1;
}

static int wd_default_bt_signal(void) { return SIGRTMIN + 3; }

void wd_config_defaults(wd_config *cfg) {
  if (!cfg) return;
  memset(cfg, 0, sizeof *cfg);
  cfg->enable = 1;
  cfg->timeout_ns = 300 * WD_NS_PER_S;
  cfg->poll_ns = WD_NS_PER_S;
  cfg->unreached_timeout_ns = 0;
  cfg->dump_dir[0] = '\0';
  cfg->ring_size = 8192;
  cfg->proxy_ring_size = 8192;
  cfg->max_events = 65536;
  cfg->signal = SIGUSR1;
  cfg->bt_signal = wd_default_bt_signal();
  cfg->action = WD_ACTION_DUMP;
  cfg->event_mask = WD_DEFAULT_EVENT_MASK;
  cfg->backtrace = 1;
  cfg->bt_wait_ns = 500 * WD_NS_PER_MS;
  cfg->peer_dumps = 1;
  cfg->max_dumps = 32;
  cfg->precise_clock = 0;
  cfg->gpu_events = 1;
  snprintf(cfg->ring_dir, sizeof cfg->ring_dir, "/dev/shm/nccl-watchdog-%u", (unsigned)geteuid());
  cfg->keep_rings = 0;
  cfg->term_dump = 1;
  cfg->python = 1;
  cfg->metrics_ns = 10 * WD_NS_PER_S;
  cfg->peer_records = 64;
  cfg->compress = WD_COMPRESS_PEER;
  cfg->memory_budget_mib = 1024;
  cfg->kernelch = WD_KCH_AUTO;
  cfg->verdict = 1;
  cfg->verdict_wait_ns = 10 * WD_NS_PER_S;
  cfg->verdict_limit_ns = 120 * WD_NS_PER_S;
  cfg->verdict_memory_mib = 16384;
  cfg->telemetry = 1;
  cfg->telemetry_links = 512;
  cfg->graph_launches = 8192; /* a serving engine: dozens of graphs x 160 launches */
  cfg->otlp_interval_ns = 10 * WD_NS_PER_S;
  cfg->otlp_timeout_ns = 5 * WD_NS_PER_S;
}

const char *wd_kernelch_name(int k) { return k == WD_KCH_ON ? "on" : k == WD_KCH_OFF ? "off" : "auto"; }

static const char *wd_compress_name(int c) {
  return c == WD_COMPRESS_ALL ? "gzip" : c == WD_COMPRESS_PEER ? "peer" : "off";
}

/* Ring sizes that were rounded up by the last load, for the INFO line. The struct has no room
 * for the requested value, so describe() matches on the rounded result. */
static pthread_mutex_t wd_round_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t wd_round_from[2], wd_round_to[2];

static void wd_round_note_set(int which, uint64_t from, uint64_t to) {
  pthread_mutex_lock(&wd_round_lock);
  wd_round_from[which] = from;
  wd_round_to[which] = to;
  pthread_mutex_unlock(&wd_round_lock);
}

/* ------------------------------------------------------------------------------------------ */
/* Loading. */

typedef struct {
  wd_config_warn_fn warn;
  const char *file; /* name of the config file, for "from FILE:LINE" */
} wd_load_ctx;

typedef struct {
  const char *val;  /* raw value */
  int file_line;    /* > 0 when the value came from the config file */
} wd_source;

static void wd_warnf(const wd_load_ctx *lc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wd_warnf(const wd_load_ctx *lc, const char *fmt, ...) {
  char msg[WD_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  lc->warn(msg);
}

/* One warning for a rejected value: KEY="value" (from FILE:LINE) REASON; using USED. */
static void wd_reject(const wd_load_ctx *lc, int key, const wd_source *src, const char *reason,
                      const char *used) {
  char q[WD_QUOTE_MAX * 4 + 8];
  char where[WD_QUOTE_MAX * 4 + 32] = "";
  wd_quote(src->val, q, sizeof q);
  if (src->file_line > 0) {
    char fq[WD_QUOTE_MAX * 4 + 8];
    wd_quote(lc->file, fq, sizeof fq);
    snprintf(where, sizeof where, " (from %s:%d)", fq, src->file_line);
  }
  wd_warnf(lc, "%s=\"%s\"%s %s; using %s", wd_key_names[key], q, where, reason, used);
}

/* What each key accepts, for "is empty (expected ...)" and "is not ... (expected ...)". */
static const char *const wd_key_expect[K_COUNT] = {
    [K_ENABLE] = "1/0, true/false, yes/no, on/off",
    [K_TIMEOUT] = "300, 2.5, 500ms, 30s, 5m, 1h",
    [K_POLL] = "300, 2.5, 500ms, 30s, 5m, 1h",
    [K_UNREACHED] = "0, 300, 2.5, 500ms, 30s, 5m, 1h",
    [K_DUMP_DIR] = "a directory",
    [K_RING] = "an integer",
    [K_PROXY_RING] = "an integer",
    [K_MAX_EVENTS] = "an integer",
    [K_SIGNAL] = "a name such as SIGUSR1, a number, or none",
    [K_BT_SIGNAL] = "a name such as SIGRTMIN+3 or a number",
    [K_ACTION] = "dump or abort",
    [K_MASK] = "a non-zero decimal or 0x hex value below 0x10000",
    [K_BACKTRACE] = "1/0, true/false, yes/no, on/off, or all",
    [K_BT_WAIT] = "300, 2.5, 500ms, 30s, 5m, 1h",
    [K_PEER_DUMPS] = "1/0, true/false, yes/no, on/off",
    [K_MAX_DUMPS] = "an integer",
    [K_CLOCK] = "coarse or precise",
    [K_GPU_EVENTS] = "1/0, true/false, yes/no, on/off",
    [K_RING_DIR] = "a node-local directory, or off",
    [K_KEEP_RINGS] = "1/0, true/false, yes/no, on/off",
    [K_TERM_DUMP] = "1/0, true/false, yes/no, on/off",
    [K_PYTHON] = "1/0, true/false, yes/no, on/off",
    [K_HOSTNAME] = "a host name of letters, digits, '-', '_' and '.'",
    [K_COMPRESS] = "off, peer or gzip",
    [K_METRICS] = "0 (off), 10s, 1m",
    [K_METRICS_DIR] = "a directory",
    [K_TRIGGER_POLL] = "0 (5 polls), 5s, 30s",
    [K_PEER_RECORDS] = "an integer, 0 = whole rings",
    [K_MEMORY_BUDGET] = "MiB, an integer, 0 = no budget",
    [K_KERNELCH] = "auto, on or off",
    [K_VERDICT] = "1/0, true/false, yes/no, on/off",
    [K_ANALYZER] = "the path of nccl-watchdog-analyze",
    [K_VERDICT_WAIT] = "5s, 30s, 2m",
    [K_VERDICT_LIMIT] = "30s, 2m, 10m",
    [K_VERDICT_MEMORY] = "MiB, an integer, 0 = no limit",
    [K_ON_VERDICT] = "a command and its arguments, no shell",
    [K_TELEMETRY] = "1/0, true/false, yes/no, on/off",
    [K_TELEMETRY_LINKS] = "an integer, 16 to 65536",
    [K_GRAPH_LAUNCHES] = "an integer, 0 (off) to 65536",
    [K_OTLP_ENDPOINT] = "an http:// or https:// URL, or off",
    [K_OTLP_INTERVAL] = "1s, 10s, 1m",
    [K_OTLP_TIMEOUT] = "500ms, 5s, 30s",
    [K_OTLP_HEADERS] = "key=value pairs separated by commas",
};

/* A duration, or what 0 means for it. */
static void duration_or(uint64_t ns, const char *zero, char *buf, size_t len) {
  if (ns) wd_fmt_duration(ns, buf, len);
  else snprintf(buf, len, "%s", zero);
}

/* A quoted path, or what an empty one means. */
static void path_or(const char *path, const char *empty, char *buf, size_t len) {
  if (path[0]) wd_quote(path, buf, len);
  else snprintf(buf, len, "%s", empty);
}

/* The value a key has now, as the "using ..." part of a warning. */
static void wd_current(const wd_config *cfg, int key, char *buf, size_t len) {
  switch (key) {
  case K_ENABLE: snprintf(buf, len, "%d", cfg->enable); break;
  case K_TIMEOUT: wd_fmt_duration(cfg->timeout_ns, buf, len); break;
  case K_POLL: wd_fmt_duration(cfg->poll_ns, buf, len); break;
  case K_UNREACHED: duration_or(cfg->unreached_timeout_ns, "0 (off)", buf, len); break;
  case K_DUMP_DIR: path_or(cfg->dump_dir, "the default directory", buf, len); break;
  case K_RING: snprintf(buf, len, "%" PRIu32, cfg->ring_size); break;
  case K_PROXY_RING: snprintf(buf, len, "%" PRIu32, cfg->proxy_ring_size); break;
  case K_MAX_EVENTS: snprintf(buf, len, "%" PRIu32, cfg->max_events); break;
  case K_SIGNAL: wd_signal_name(cfg->signal, buf, (int)len); break;
  case K_BT_SIGNAL: wd_signal_name(cfg->bt_signal, buf, (int)len); break;
  case K_ACTION: snprintf(buf, len, "%s", cfg->action == WD_ACTION_ABORT ? "abort" : "dump"); break;
  case K_MASK: snprintf(buf, len, "0x%x", (unsigned)cfg->event_mask); break;
  case K_BACKTRACE:
    if (cfg->backtrace == WD_BACKTRACE_ALL) snprintf(buf, len, "all");
    else snprintf(buf, len, "%d", cfg->backtrace);
    break;
  case K_BT_WAIT: wd_fmt_duration(cfg->bt_wait_ns, buf, len); break;
  case K_PEER_DUMPS: snprintf(buf, len, "%d", cfg->peer_dumps); break;
  case K_MAX_DUMPS: snprintf(buf, len, "%d", cfg->max_dumps); break;
  case K_CLOCK: snprintf(buf, len, "%s", cfg->precise_clock ? "precise" : "coarse"); break;
  case K_GPU_EVENTS: snprintf(buf, len, "%d", cfg->gpu_events); break;
  case K_RING_DIR: path_or(cfg->ring_dir, "off", buf, len); break;
  case K_KEEP_RINGS: snprintf(buf, len, "%d", cfg->keep_rings); break;
  case K_TERM_DUMP: snprintf(buf, len, "%d", cfg->term_dump); break;
  case K_PYTHON: snprintf(buf, len, "%d", cfg->python); break;
  case K_PEER_RECORDS: snprintf(buf, len, "%u", cfg->peer_records); break;
  case K_MEMORY_BUDGET: snprintf(buf, len, "%u", cfg->memory_budget_mib); break;
  case K_KERNELCH: snprintf(buf, len, "%s", wd_kernelch_name(cfg->kernelch)); break;
  case K_VERDICT: snprintf(buf, len, "%d", cfg->verdict); break;
  case K_ANALYZER: path_or(cfg->analyzer, "the one beside the plugin", buf, len); break;
  case K_VERDICT_WAIT: wd_fmt_duration(cfg->verdict_wait_ns, buf, len); break;
  case K_VERDICT_LIMIT: wd_fmt_duration(cfg->verdict_limit_ns, buf, len); break;
  case K_VERDICT_MEMORY: snprintf(buf, len, "%u", cfg->verdict_memory_mib); break;
  case K_ON_VERDICT: path_or(cfg->on_verdict, "none", buf, len); break;
  case K_TELEMETRY: snprintf(buf, len, "%d", cfg->telemetry); break;
  case K_TELEMETRY_LINKS: snprintf(buf, len, "%u", cfg->telemetry_links); break;
  case K_GRAPH_LAUNCHES: snprintf(buf, len, "%u", cfg->graph_launches); break;
  case K_OTLP_ENDPOINT: path_or(cfg->otlp_endpoint, "off", buf, len); break;
  case K_OTLP_INTERVAL: wd_fmt_duration(cfg->otlp_interval_ns, buf, len); break;
  case K_OTLP_TIMEOUT: wd_fmt_duration(cfg->otlp_timeout_ns, buf, len); break;
  case K_OTLP_HEADERS: snprintf(buf, len, "%s", cfg->otlp_headers[0] ? "(set)" : "none"); break;
  case K_TRIGGER_POLL: duration_or(cfg->trigger_poll_ns, "0 (5 polls)", buf, len); break;
  case K_METRICS: duration_or(cfg->metrics_ns, "0 (off)", buf, len); break;
  case K_METRICS_DIR: path_or(cfg->metrics_dir, "the ring directory", buf, len); break;
  case K_COMPRESS: snprintf(buf, len, "%s", wd_compress_name(cfg->compress)); break;
  case K_HOSTNAME: snprintf(buf, len, "%s", cfg->hostname[0] ? cfg->hostname : "the system's"); break;
  default: buf[0] = '\0'; break;
  }
}

/* Parse a duration into *dst when it lies in [min, max] (or is 0 and zero_ok); else the reason. */
static const char *wd_check_duration(const char *val, uint64_t min, uint64_t max, int zero_ok,
                                     uint64_t *dst, char *reason, size_t rlen) {
  uint64_t v;
  if (wd_parse_duration_ns(val, &v) != 0) {
    if (*wd_skip_ws(val) == '-') return "is negative";
    snprintf(reason, rlen, "is not a duration (expected %s)", zero_ok ? wd_key_expect[K_UNREACHED]
                                                                      : wd_key_expect[K_TIMEOUT]);
    return reason;
  }
  if ((v == 0 && zero_ok) || (v >= min && v <= max)) {
    *dst = v;
    return NULL;
  }
  char lo[32], hi[32];
  wd_fmt_duration(min, lo, sizeof lo);
  wd_fmt_duration(max, hi, sizeof hi);
  snprintf(reason, rlen, "is out of range (%s%s..%s)", zero_ok ? "0 or " : "", lo, hi);
  return reason;
}

/* Integers in [min, max]; *round_from gets the requested value when it is rounded up to a power of
 * two (round_from non-NULL). */
static const char *wd_check_uint(const char *val, uint64_t min, uint64_t max, uint64_t *round_from,
                                 uint64_t *dst, char *reason, size_t rlen) {
  uint64_t v;
  if (wd_parse_uint(val, 0, UINT64_MAX, &v) != 0) {
    const char *t = wd_skip_ws(val);
    if (*t == '-') return "is negative";
    if (*t >= '0' && *t <= '9' && wd_parse_digits(t, &v) == NULL) return "is too large";
    return "is not an integer";
  }
  if (v < min || v > max) {
    snprintf(reason, rlen, "is out of range (%" PRIu64 "..%" PRIu64 ")", min, max);
    return reason;
  }
  if (round_from) {
    uint64_t p = 1;
    while (p < v) p <<= 1; /* max is a power of two, so p <= max */
    *round_from = p != v ? v : 0;
    v = p;
  }
  *dst = v;
  return NULL;
}

static const char *wd_check_signal(const char *val, int allow_none, int *dst, char *reason,
                                   size_t rlen) {
  int sig;
  if (wd_parse_signal(val, &sig) == 0) {
    if (sig == 0 && !allow_none)
      return "cannot be none (set NCCL_WATCHDOG_BACKTRACE=0 to disable backtraces)";
    *dst = sig;
    return NULL;
  }
  /* Tell a known but forbidden signal from an unknown one. */
  const char *t = wd_skip_ws(val);
  uint64_t num;
  int known = -1;
  if (*t >= '0' && *t <= '9') {
    if (wd_parse_uint(t, 1, (uint64_t)SIGRTMAX, &num) != 0) {
      snprintf(reason, rlen, "is not a signal number (1..%d)", SIGRTMAX);
      return reason;
    }
    known = (int)num;
  } else {
    const char *n = t;
    if (strncasecmp(n, "SIG", 3) == 0) n += 3;
    for (size_t i = 0; i < sizeof wd_signames / sizeof wd_signames[0]; i++)
      if (strcasecmp(n, wd_signames[i].name) == 0) known = wd_signames[i].sig;
  }
  if (known > 0) {
    char name[32];
    snprintf(reason, rlen, "names %s, which the watchdog must not take over",
             wd_signal_name(known, name, sizeof name));
    return reason;
  }
  snprintf(reason, rlen, "is not a signal (expected %s)", wd_key_expect[allow_none ? K_SIGNAL : K_BT_SIGNAL]);
  return reason;
}

/* Apply one raw value; on rejection exactly one warning and the key keeps its default. */
static void wd_apply(const wd_load_ctx *lc, wd_config *cfg, int key, const wd_source *src) {
  char reason[256];
  const char *why = NULL;
  const char *val = src->val;
  uint64_t u = 0, from = 0;
  int i = 0;

  if (*wd_skip_ws(val) == '\0') {
    snprintf(reason, sizeof reason, "is empty (expected %s)", wd_key_expect[key]);
    why = reason;
  } else {
    switch (key) {
    case K_ENABLE: case K_BACKTRACE: case K_PEER_DUMPS: case K_GPU_EVENTS: case K_KEEP_RINGS: case K_TERM_DUMP: case K_PYTHON:
    case K_VERDICT: case K_TELEMETRY:
      if (key == K_BACKTRACE && !strcasecmp(wd_skip_ws(val), "all")) {
        cfg->backtrace = WD_BACKTRACE_ALL;
      } else if (wd_parse_bool(val, &i) != 0) {
        snprintf(reason, sizeof reason, "is not a boolean (expected %s)", wd_key_expect[key]);
        why = reason;
      } else if (key == K_ENABLE) cfg->enable = i;
      else if (key == K_BACKTRACE) cfg->backtrace = i;
      else if (key == K_GPU_EVENTS) cfg->gpu_events = i;
      else if (key == K_KEEP_RINGS) cfg->keep_rings = i;
      else if (key == K_TERM_DUMP) cfg->term_dump = i;
      else if (key == K_PYTHON) cfg->python = i;
      else if (key == K_VERDICT) cfg->verdict = i;
      else if (key == K_TELEMETRY) cfg->telemetry = i;
      else cfg->peer_dumps = i;
      break;
    case K_TIMEOUT:
      why = wd_check_duration(val, WD_TIMEOUT_MIN_NS, WD_TIMEOUT_MAX_NS, 0, &cfg->timeout_ns,
                              reason, sizeof reason);
      break;
    case K_POLL:
      why = wd_check_duration(val, WD_POLL_MIN_NS, WD_POLL_MAX_NS, 0, &cfg->poll_ns, reason,
                              sizeof reason);
      break;
    case K_UNREACHED: /* compared with the timeout once both are known (wd_config_load) */
      why = wd_check_duration(val, WD_TIMEOUT_MIN_NS, WD_TIMEOUT_MAX_NS, 1,
                              &cfg->unreached_timeout_ns, reason, sizeof reason);
      break;
    case K_BT_WAIT:
      why = wd_check_duration(val, WD_BT_WAIT_MIN_NS, WD_BT_WAIT_MAX_NS, 0, &cfg->bt_wait_ns,
                              reason, sizeof reason);
      break;
    case K_TRIGGER_POLL:
      why = wd_check_duration(val, WD_POLL_MIN_NS, WD_TRIGGER_POLL_MAX_NS, 1, &cfg->trigger_poll_ns,
                              reason, sizeof reason);
      break;
    case K_VERDICT_WAIT:
    case K_VERDICT_LIMIT:
      why = wd_check_duration(val, WD_POLL_MIN_NS, WD_VERDICT_MAX_NS, 0,
                              key == K_VERDICT_WAIT ? &cfg->verdict_wait_ns : &cfg->verdict_limit_ns,
                              reason, sizeof reason);
      break;
    case K_VERDICT_MEMORY:
      why = wd_check_uint(val, 0, 1u << 24, NULL, &u, reason, sizeof reason);
      if (!why) cfg->verdict_memory_mib = (uint32_t)u;
      break;
    case K_ANALYZER:
    case K_ON_VERDICT: {
      char *dst = key == K_ANALYZER ? cfg->analyzer : cfg->on_verdict;
      size_t n = strlen(val);
      if (n >= WD_PATH_MAX) {
        snprintf(reason, sizeof reason, "is too long (at most %d bytes)", WD_PATH_MAX - 1);
        why = reason;
      } else {
        memcpy(dst, val, n + 1);
      }
      break;
    }
    case K_TELEMETRY_LINKS:
      why = wd_check_uint(val, 16, 65536, NULL, &u, reason, sizeof reason);
      if (!why) cfg->telemetry_links = (uint32_t)u;
      break;
    case K_GRAPH_LAUNCHES:
      why = wd_check_uint(val, 0, 65536, NULL, &u, reason, sizeof reason);
      if (!why) cfg->graph_launches = (uint32_t)u;
      break;
    case K_OTLP_INTERVAL:
    case K_OTLP_TIMEOUT:
      why = wd_check_duration(val, WD_OTLP_MIN_NS, WD_METRICS_MAX_NS, 0,
                              key == K_OTLP_INTERVAL ? &cfg->otlp_interval_ns : &cfg->otlp_timeout_ns,
                              reason, sizeof reason);
      break;
    case K_OTLP_ENDPOINT: {
      /* The form only: the exporter's URL parser has the last word (telemetry/otlp_http.c). */
      const char *v = wd_skip_ws(val);
      size_t n = strlen(v);
      while (n && isspace((unsigned char)v[n - 1])) n--;
      int bad = n >= sizeof cfg->otlp_endpoint || memchr(v, ' ', n) || memchr(v, '\t', n) || memchr(v, '"', n);
      size_t scheme = !strncasecmp(v, "http://", 7) ? 7 : !strncasecmp(v, "https://", 8) ? 8 : 0;
      if (wd_means_off(val)) {
        cfg->otlp_endpoint[0] = '\0';
      } else if (bad || !scheme || n <= scheme) {
        snprintf(reason, sizeof reason, "is not a URL (expected %s)", wd_key_expect[key]);
        why = reason;
      } else {
        memcpy(cfg->otlp_endpoint, v, n);
        cfg->otlp_endpoint[n] = '\0';
      }
      break;
    }
    case K_OTLP_HEADERS: {
      size_t n = strlen(val);
      if (n >= sizeof cfg->otlp_headers || !strchr(val, '=') || strpbrk(val, "\r\n")) {
        snprintf(reason, sizeof reason, "is not a header list (expected %s, under %zu bytes)",
                 wd_key_expect[key], sizeof cfg->otlp_headers);
        why = reason;
      } else {
        memcpy(cfg->otlp_headers, val, n + 1);
      }
      break;
    }
    case K_METRICS:
      why = wd_check_duration(val, WD_METRICS_MIN_NS, WD_METRICS_MAX_NS, 1, &cfg->metrics_ns, reason,
                              sizeof reason);
      break;
    case K_COMPRESS: {
      char v[16] = "";
      wd_trim_copy(val, v, sizeof v);
      if (wd_means_off(val))
        cfg->compress = WD_COMPRESS_OFF;
      else if (!strcasecmp(v, "gzip") || !strcasecmp(v, "gz") || !strcasecmp(v, "all"))
        cfg->compress = WD_COMPRESS_ALL;
      else if (!strcasecmp(v, "peer"))
        cfg->compress = WD_COMPRESS_PEER;
      else {
        snprintf(reason, sizeof reason, "is not a compression (expected off, peer or gzip)");
        why = reason;
      }
      break;
    }
    case K_HOSTNAME: {
      /* It names files: only characters that are safe in a file name. */
      size_t n = strlen(val);
      int ok = n > 0 && n < sizeof cfg->hostname;
      for (size_t i = 0; ok && i < n; i++)
        ok = isalnum((unsigned char)val[i]) || val[i] == '-' || val[i] == '_' || val[i] == '.';
      if (ok) memcpy(cfg->hostname, val, n + 1);
      else {
        snprintf(reason, sizeof reason, "is not a host name (at most %zu letters, digits, '-', '_', '.')",
                 sizeof cfg->hostname - 1);
        why = reason;
      }
      break;
    }
    case K_DUMP_DIR:
    case K_METRICS_DIR:
    case K_RING_DIR: {
      /* All WD_PATH_MAX long; ring files can be turned off. */
      char *dst = key == K_DUMP_DIR ? cfg->dump_dir : key == K_RING_DIR ? cfg->ring_dir : cfg->metrics_dir;
      size_t n = strlen(val);
      if (key == K_RING_DIR && wd_means_off(val)) {
        cfg->ring_dir[0] = '\0';
      } else if (n >= WD_PATH_MAX) {
        snprintf(reason, sizeof reason, "is too long (at most %d bytes)", WD_PATH_MAX - 1);
        why = reason;
      } else {
        memcpy(dst, val, n + 1);
      }
      break;
    }
    case K_RING: case K_PROXY_RING:
      why = wd_check_uint(val, WD_RING_MIN, WD_RING_MAX, &from, &u, reason, sizeof reason);
      if (!why) {
        if (key == K_RING) cfg->ring_size = (uint32_t)u;
        else cfg->proxy_ring_size = (uint32_t)u;
        wd_round_note_set(key == K_RING ? 0 : 1, from, from ? u : 0);
      }
      break;
    case K_MAX_EVENTS:
      why = wd_check_uint(val, WD_MAX_EVENTS_MIN, WD_MAX_EVENTS_MAX, NULL, &u, reason, sizeof reason);
      if (!why) cfg->max_events = (uint32_t)u;
      break;
    case K_PEER_RECORDS:
      why = wd_check_uint(val, 0, 1u << 20, NULL, &u, reason, sizeof reason);
      if (!why) cfg->peer_records = (uint32_t)u;
      break;
    case K_MEMORY_BUDGET:
      why = wd_check_uint(val, 0, 1u << 20, NULL, &u, reason, sizeof reason);
      if (!why) cfg->memory_budget_mib = (uint32_t)u;
      break;
    case K_KERNELCH: {
      char v[16] = "";
      int b = 0;
      wd_trim_copy(val, v, sizeof v);
      if (!strcasecmp(v, "auto")) cfg->kernelch = WD_KCH_AUTO;
      else if (wd_parse_bool(val, &b) == 0) cfg->kernelch = b ? WD_KCH_ON : WD_KCH_OFF;
      else {
        snprintf(reason, sizeof reason, "is not a KernelCh choice (expected auto, on or off)");
        why = reason;
      }
      break;
    }
    case K_MAX_DUMPS:
      why = wd_check_uint(val, WD_MAX_DUMPS_MIN, WD_MAX_DUMPS_MAX, NULL, &u, reason, sizeof reason);
      if (!why) cfg->max_dumps = (int)u;
      break;
    case K_SIGNAL: why = wd_check_signal(val, 1, &cfg->signal, reason, sizeof reason); break;
    case K_BT_SIGNAL: why = wd_check_signal(val, 0, &cfg->bt_signal, reason, sizeof reason); break;
    case K_ACTION: {
      char v[16] = "";
      if (wd_trim_copy(val, v, sizeof v) == 0 && strcasecmp(v, "dump") == 0) cfg->action = WD_ACTION_DUMP;
      else if (strcasecmp(v, "abort") == 0) cfg->action = WD_ACTION_ABORT;
      else why = "is not an action (expected dump or abort)";
      break;
    }
    case K_CLOCK: {
      char v[16] = "";
      if (wd_trim_copy(val, v, sizeof v) == 0 && strcasecmp(v, "coarse") == 0) cfg->precise_clock = 0;
      else if (strcasecmp(v, "precise") == 0 || strcasecmp(v, "monotonic") == 0) cfg->precise_clock = 1;
      else why = "is not a clock (expected coarse or precise)";
      break;
    }
    case K_MASK:
      if (wd_parse_mask(val, &i) == 0) {
        cfg->event_mask = i;
      } else {
        snprintf(reason, sizeof reason, "is not a valid event mask (expected %s)", wd_key_expect[key]);
        why = reason;
      }
      break;
    default: break;
    }
  }
  if (why) {
    char used[WD_QUOTE_MAX * 4 + 8];
    wd_current(cfg, key, used, sizeof used);
    wd_reject(lc, key, src, why, used);
  }
}

/* Values read from the file, by key. Static storage would not be reentrant; this is on the heap
 * once per load (load runs once per process, at the first init). */
typedef struct {
  char val[K_COUNT][WD_PATH_MAX + 1];
  int line[K_COUNT]; /* 0 = not set in the file */
} wd_file_vals;

/* Read KEY = value lines. One warning per problem line; the file never fails the load. */
static void wd_read_file(const wd_load_ctx *lc, const char *path, wd_file_vals *fv) {
  char q[WD_QUOTE_MAX * 4 + 8];
  wd_quote(path, q, sizeof q);
  FILE *f = fopen(path, "re");
  if (!f) {
    wd_warnf(lc, "%s=\"%s\" cannot be opened (%s); using the environment and defaults only",
             WD_CONFIG_VAR, q, strerror(errno));
    return;
  }
  char line[WD_LINE_MAX];
  int lineno = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    size_t n = strlen(line);
    if (n == sizeof line - 1 && line[n - 1] != '\n') {
      /* Either the buffer was filled exactly by the whole line, or the line is longer: then
       * skip the rest of it. */
      int c = fgetc(f);
      if (c != EOF && c != '\n') {
        while ((c = fgetc(f)) != EOF && c != '\n') {}
        wd_warnf(lc, "%s:%d: line longer than %d bytes ignored", q, lineno, WD_LINE_MAX - 1);
        continue;
      }
    }
    while (n > 0 && isspace((unsigned char)line[n - 1])) line[--n] = '\0';
    char *p = (char *)wd_skip_ws(line);
    if (*p == '\0' || *p == '#') continue;
    /* An inline comment starts at a '#' that follows whitespace, so "a#b" stays a value. */
    for (char *h = p + 1; *h; h++) {
      if (*h == '#' && isspace((unsigned char)h[-1])) {
        *h = '\0';
        break;
      }
    }
    char *eq = strchr(p, '=');
    char *kend = eq ? eq : p;
    while (kend > p && isspace((unsigned char)kend[-1])) kend--;
    if (!eq || kend == p) {
      wd_warnf(lc, "%s:%d: malformed line ignored (expected KEY = value)", q, lineno);
      continue;
    }
    *kend = '\0';
    for (char *k = p; *k; k++) {
      if (!(isalnum((unsigned char)*k) || *k == '_')) {
        kend = NULL;
        break;
      }
    }
    if (!kend) {
      wd_warnf(lc, "%s:%d: malformed line ignored (expected KEY = value)", q, lineno);
      continue;
    }
    char *v = (char *)wd_skip_ws(eq + 1);
    size_t vn = strlen(v);
    while (vn > 0 && isspace((unsigned char)v[vn - 1])) v[--vn] = '\0';
    /* Optional double quotes around the value. */
    if (vn >= 2 && v[0] == '"' && v[vn - 1] == '"') {
      v[vn - 1] = '\0';
      v++;
      vn -= 2;
    }
    int key = wd_key_index(p);
    if (key < 0) {
      char kq[WD_QUOTE_MAX * 4 + 8];
      wd_quote(p, kq, sizeof kq);
      if (strcmp(p, WD_CONFIG_VAR) == 0)
        wd_warnf(lc, "%s:%d: %s cannot be set in the configuration file; ignored", q, lineno, kq);
      else
        wd_warnf(lc, "%s:%d: unknown key \"%s\" ignored", q, lineno, kq);
      continue;
    }
    /* Cut to WD_PATH_MAX: still one byte too long for dump_dir, whose check then reports it. */
    if (vn > WD_PATH_MAX) vn = WD_PATH_MAX;
    memcpy(fv->val[key], v, vn);
    fv->val[key][vn] = '\0';
    fv->line[key] = lineno; /* a repeated key: the last line wins */
  }
  fclose(f);
}

static void wd_default_warn(const char *msg) { WD_WARN("%s", msg); }

static const char *wd_real_getenv(const char *name) { return getenv(name); }

/* With the real environment, name NCCL_WATCHDOG_* variables we do not know (likely typos). */
static void wd_check_unknown_env(const wd_load_ctx *lc) {
  static const char prefix[] = "NCCL_WATCHDOG_";
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, prefix, sizeof prefix - 1) != 0) continue;
    const char *eq = strchr(*e, '=');
    size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
    char name[128];
    if (n >= sizeof name) n = sizeof name - 1;
    memcpy(name, *e, n);
    name[n] = '\0';
    if (wd_key_index(name) >= 0 || strcmp(name, WD_CONFIG_VAR) == 0) continue;
    char q[WD_QUOTE_MAX * 4 + 8];
    wd_quote(name, q, sizeof q);
    wd_warnf(lc, "unknown variable %s ignored", q);
  }
}

void wd_config_load(wd_config *cfg, wd_getenv_fn getenv_fn, wd_config_warn_fn warn) {
  if (!cfg) return;
  int real_env = getenv_fn == NULL;
  if (!getenv_fn) getenv_fn = wd_real_getenv;
  wd_load_ctx lc = {.warn = warn ? warn : wd_default_warn, .file = ""};
  wd_config_defaults(cfg);
  wd_round_note_set(0, 0, 0);
  wd_round_note_set(1, 0, 0);

  wd_file_vals *fv = NULL;
  const char *path = getenv_fn(WD_CONFIG_VAR);
  if (path && *wd_skip_ws(path)) {
    fv = calloc(1, sizeof *fv);
    if (fv) {
      lc.file = path;
      wd_read_file(&lc, path, fv);
    } else {
      wd_warnf(&lc, "%s: out of memory reading the configuration file; ignoring it", WD_CONFIG_VAR);
    }
  }

  /* The environment wins over the file, key by key. */
  for (int k = 0; k < K_COUNT; k++) {
    wd_source src = {.val = getenv_fn(wd_key_names[k]), .file_line = 0};
    if (!src.val && fv && fv->line[k] > 0) {
      src.val = fv->val[k];
      src.file_line = fv->line[k];
    }
    if (k == K_BT_SIGNAL && cfg->bt_signal == cfg->signal) {
      /* The snapshot signal took the default backtrace signal: move the default aside silently,
       * before a bad backtrace value is reported as falling back to it. */
      cfg->bt_signal = wd_default_bt_signal() + 1;
    }
    if (!src.val) continue;
    /* An empty dump directory is the documented way to ask for the default one. */
    if (k == K_DUMP_DIR && src.val[0] == '\0') continue;
    wd_apply(&lc, cfg, k, &src);
  }

  /* Cross-checks, once every key is known. */
  if (cfg->unreached_timeout_ns != 0 && cfg->unreached_timeout_ns < cfg->timeout_ns) {
    char a[32], b[32];
    wd_fmt_duration(cfg->unreached_timeout_ns, a, sizeof a);
    wd_fmt_duration(cfg->timeout_ns, b, sizeof b);
    wd_warnf(&lc, "%s=%s is shorter than %s=%s (it must be 0 or at least the timeout); using 0 (off)",
             wd_key_names[K_UNREACHED], a, wd_key_names[K_TIMEOUT], b);
    cfg->unreached_timeout_ns = 0;
  }
  if (cfg->bt_signal == cfg->signal) {
    /* Only an explicit value gets here: the default was moved aside in the loop. */
    char a[32], b[32];
    int fallback = wd_default_bt_signal();
    if (fallback == cfg->signal) fallback = wd_default_bt_signal() + 1;
    wd_signal_name(cfg->bt_signal, a, sizeof a);
    wd_signal_name(fallback, b, sizeof b);
    wd_warnf(&lc, "%s=%s is the same signal as %s; using %s", wd_key_names[K_BT_SIGNAL], a,
             wd_key_names[K_SIGNAL], b);
    cfg->bt_signal = fallback;
  }

  if (real_env) wd_check_unknown_env(&lc);
  free(fv);
}

void wd_url_redact(const char *url, char *out, size_t len) {
  const char *host = strstr(url, "://");
  host = host ? host + 3 : url;
  size_t hlen = strcspn(host, "/?#");
  const char *at = memchr(host, '@', hlen);
  if (at) snprintf(out, len, "%.*s***@%s", (int)(host - url), url, at + 1);
  else snprintf(out, len, "%s", url);
}

void wd_config_describe(const wd_config *cfg, char *buf, int len) {
  char otlp[WD_PATH_MAX] = "off";
  if (cfg->otlp_endpoint[0]) wd_url_redact(cfg->otlp_endpoint, otlp, sizeof otlp);
  if (!buf || len <= 0) return;
  if (!cfg) {
    buf[0] = '\0';
    return;
  }
  char timeout[32], poll[32], unreached[32], btwait[32], sig[32], btsig[32];
  char ring_note[64] = "", proxy_note[64] = "";
  wd_fmt_duration(cfg->timeout_ns, timeout, sizeof timeout);
  wd_fmt_duration(cfg->poll_ns, poll, sizeof poll);
  if (cfg->unreached_timeout_ns) wd_fmt_duration(cfg->unreached_timeout_ns, unreached, sizeof unreached);
  else snprintf(unreached, sizeof unreached, "off");
  wd_fmt_duration(cfg->bt_wait_ns, btwait, sizeof btwait);
  wd_signal_name(cfg->signal, sig, sizeof sig);
  wd_signal_name(cfg->bt_signal, btsig, sizeof btsig);
  pthread_mutex_lock(&wd_round_lock);
  if (wd_round_to[0] && wd_round_to[0] == cfg->ring_size)
    snprintf(ring_note, sizeof ring_note, " (rounded up from %" PRIu64 ")", wd_round_from[0]);
  if (wd_round_to[1] && wd_round_to[1] == cfg->proxy_ring_size)
    snprintf(proxy_note, sizeof proxy_note, " (rounded up from %" PRIu64 ")", wd_round_from[1]);
  pthread_mutex_unlock(&wd_round_lock);
  char metrics[32] = "0", trig[32] = "5 polls";
  if (cfg->trigger_poll_ns) wd_fmt_duration(cfg->trigger_poll_ns, trig, sizeof trig);
  if (cfg->metrics_ns) wd_fmt_duration(cfg->metrics_ns, metrics, sizeof metrics);
  snprintf(buf, (size_t)len,
           "enable=%d timeout=%s poll=%s unreached_timeout=%s dump_dir=%s ring_size=%" PRIu32
           "%s proxy_ring_size=%" PRIu32 "%s max_events=%" PRIu32
           " signal=%s backtrace_signal=%s action=%s event_mask=0x%x backtrace=%s"
           " backtrace_wait=%s peer_dumps=%d max_dumps=%d clock=%s gpu_events=%d ring_dir=%s"
           " keep_rings=%d term_dump=%d python=%d hostname=%s compress=%s metrics=%s metrics_dir=%s"
           " trigger_poll=%s peer_records=%u memory_budget=%uMiB kernelch=%s verdict=%d"
           " telemetry=%d otlp=%s",
           cfg->enable, timeout, poll, unreached, cfg->dump_dir[0] ? cfg->dump_dir : "(default)",
           cfg->ring_size, ring_note, cfg->proxy_ring_size, proxy_note, cfg->max_events, sig, btsig,
           cfg->action == WD_ACTION_ABORT ? "abort" : "dump", (unsigned)cfg->event_mask,
           cfg->backtrace == WD_BACKTRACE_ALL ? "all" : cfg->backtrace ? "1" : "0", btwait, cfg->peer_dumps, cfg->max_dumps,
           cfg->precise_clock ? "precise" : "coarse", cfg->gpu_events,
           cfg->ring_dir[0] ? cfg->ring_dir : "off", cfg->keep_rings, cfg->term_dump, cfg->python,
           cfg->hostname[0] ? cfg->hostname : "(system)", wd_compress_name(cfg->compress), metrics,
           cfg->metrics_dir[0] ? cfg->metrics_dir : "(ring dir)", trig, cfg->peer_records,
           cfg->memory_budget_mib, wd_kernelch_name(cfg->kernelch), cfg->verdict, cfg->telemetry,
           otlp);
}
