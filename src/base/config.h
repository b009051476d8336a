/* Effective configuration, read once at the first init (environment wins over the file). */
#ifndef WD_CONFIG_H
#define WD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define WD_PATH_MAX 1024

enum { WD_ACTION_DUMP = 0, WD_ACTION_ABORT = 1 };
/* NCCL_WATCHDOG_BACKTRACE=all: interrupt threads sleeping in never-restarted calls too. */
enum { WD_BACKTRACE_ALL = 2 };

/* Which dumps are written gzip-compressed. Peer summaries by default: a 100,000-rank job writes one
 * per process per stall episode, and the analyzer, not a person, reads them first. */
enum { WD_COMPRESS_OFF = 0, WD_COMPRESS_ALL = 1, WD_COMPRESS_PEER = 2 };
/* Whether KernelCh is asked for. auto: not where CUDA events bracket the launches and NCCL charges
 * the GPU for KernelCh (2.31+, ABI v7: NCCL issue 2355); on: always (coverage over cost); off:
 * never (then graph replays of intra-node work are followed only by the captured-launch watch:
 * NCCL_WATCHDOG_GRAPH_LAUNCHES). */
enum { WD_KCH_AUTO = 0, WD_KCH_ON = 1, WD_KCH_OFF = 2 };

typedef struct wd_config {
  int enable;                    /* NCCL_WATCHDOG_ENABLE, default 1 */
  uint64_t timeout_ns;           /* NCCL_WATCHDOG_TIMEOUT, default 300 s */
  uint64_t poll_ns;              /* NCCL_WATCHDOG_POLL, default 1 s */
  uint64_t unreached_timeout_ns; /* NCCL_WATCHDOG_UNREACHED_TIMEOUT, default 0 = never */
  char dump_dir[WD_PATH_MAX];    /* NCCL_WATCHDOG_DUMP_DIR, empty = ./nccl-watchdog-<job> */
  uint32_t ring_size;            /* NCCL_WATCHDOG_RING_SIZE: op-level records per comm, power of 2 */
  uint32_t proxy_ring_size;      /* NCCL_WATCHDOG_PROXY_RING_SIZE: proxy-level records per comm */
  uint32_t max_events;           /* NCCL_WATCHDOG_MAX_EVENTS: live event slots per comm */
  int signal;                    /* NCCL_WATCHDOG_SIGNAL, default SIGUSR1, 0 = none */
  int bt_signal;                 /* NCCL_WATCHDOG_BACKTRACE_SIGNAL, default SIGRTMIN+3 */
  int action;                    /* NCCL_WATCHDOG_ACTION: WD_ACTION_DUMP or WD_ACTION_ABORT */
  int event_mask;                /* NCCL_WATCHDOG_EVENT_MASK */
  int backtrace;                 /* NCCL_WATCHDOG_BACKTRACE: 0, 1 (default) or WD_BACKTRACE_ALL */
  uint64_t bt_wait_ns;           /* NCCL_WATCHDOG_BACKTRACE_WAIT: per-dump wait for threads, 500ms */
  int peer_dumps;                /* NCCL_WATCHDOG_PEER_DUMPS: trigger files, default 1 */
  int gpu_events;                /* NCCL_WATCHDOG_GPU_EVENTS: CUDA events around launches, default 1 */
  char ring_dir[WD_PATH_MAX];    /* NCCL_WATCHDOG_RING_DIR: ring files, empty = in memory only */
  int keep_rings;                /* NCCL_WATCHDOG_KEEP_RINGS: keep ring files after a normal exit */
  int term_dump;                 /* NCCL_WATCHDOG_TERM_DUMP: a dump on SIGTERM, default 1 */
  int python;                    /* NCCL_WATCHDOG_PYTHON: Python stacks in dumps, default 1 */
  int max_dumps;                 /* NCCL_WATCHDOG_MAX_DUMPS per process, default 32 */
  int precise_clock;             /* NCCL_WATCHDOG_CLOCK: 0 coarse (default), 1 precise */
  char hostname[64];             /* NCCL_WATCHDOG_HOSTNAME: host name in dumps and file names */
  int compress;                  /* NCCL_WATCHDOG_COMPRESS: WD_COMPRESS_* (*.json.gz) */
  uint64_t metrics_ns;           /* NCCL_WATCHDOG_METRICS: Prometheus file interval, 10 s, 0 = off */
  char metrics_dir[WD_PATH_MAX]; /* NCCL_WATCHDOG_METRICS_DIR: empty = the ring directory */
  uint64_t trigger_poll_ns;      /* NCCL_WATCHDOG_TRIGGER_POLL: shared-FS trigger check, 0 = 5 polls */
  uint32_t memory_budget_mib;    /* NCCL_WATCHDOG_MEMORY_BUDGET: rings + event slots, 1024; 0 = none */
  int kernelch;                  /* NCCL_WATCHDOG_KERNELCH: WD_KCH_* */
  uint32_t peer_records;         /* NCCL_WATCHDOG_PEER_RECORDS: newest records per ring in a peer
                                    dump (a summary), 64; 0 = whole rings */
  /* The automatic verdict of a stall episode (watchdog/autoverdict.h). */
  int verdict;                   /* NCCL_WATCHDOG_VERDICT: run the analyzer, default 1 */
  char analyzer[WD_PATH_MAX];    /* NCCL_WATCHDOG_ANALYZER: empty = beside the plugin */
  uint64_t verdict_wait_ns;      /* NCCL_WATCHDOG_VERDICT_WAIT: for the episode's dumps, 10 s */
  uint64_t verdict_limit_ns;     /* NCCL_WATCHDOG_VERDICT_TIMEOUT: the analyzer's run, 120 s */
  uint32_t verdict_memory_mib;   /* NCCL_WATCHDOG_VERDICT_MEMORY: its address space, 16384 MiB */
  char on_verdict[WD_PATH_MAX];  /* NCCL_WATCHDOG_ON_VERDICT: a command (no shell), empty = none */
  /* Fail-slow telemetry (telemetry/aggregate.h) and its OpenTelemetry export. */
  int telemetry;                 /* NCCL_WATCHDOG_TELEMETRY: aggregates in the metrics, default 1 */
  uint32_t telemetry_links;      /* NCCL_WATCHDOG_TELEMETRY_LINKS: link rows per process, 512 */
  uint32_t graph_launches;       /* NCCL_WATCHDOG_GRAPH_LAUNCHES: captured launches followed per
                                    communicator (events/graph.h), 1024; 0 = off */
  char otlp_endpoint[WD_PATH_MAX]; /* NCCL_WATCHDOG_OTLP_ENDPOINT: OTLP/HTTP URL, empty = off */
  uint64_t otlp_interval_ns;     /* NCCL_WATCHDOG_OTLP_INTERVAL: between exports, 10 s */
  uint64_t otlp_timeout_ns;      /* NCCL_WATCHDOG_OTLP_TIMEOUT: one export's limit, 5 s */
  char otlp_headers[512];        /* NCCL_WATCHDOG_OTLP_HEADERS: "k=v,k=v" sent with each export */
} wd_config;

/* Default mask: Group|Coll|P2p|ProxyOp|ProxyStep|KernelCh|CollApi|P2pApi (0x65f).
 * See docs/architecture.md for why each bit is there. */
#define WD_DEFAULT_EVENT_MASK 0x65f

#define WD_TRIGGER_POLL_MAX_NS (600ull * 1000000000ull) /* 10 min */
#define WD_VERDICT_MAX_NS (3600ull * 1000000000ull)     /* 1 h */
#define WD_METRICS_MIN_NS (100ull * 1000000ull)       /* 100 ms */
#define WD_METRICS_MAX_NS (3600ull * 1000000000ull)   /* 1 h */
#define WD_OTLP_MIN_NS (100ull * 1000000ull)          /* 100 ms */

/* Called once per rejected value with a complete sentence. */
typedef void (*wd_config_warn_fn)(const char *msg);
/* Environment lookup; tests pass their own. */
typedef const char *(*wd_getenv_fn)(const char *name);

void wd_config_defaults(wd_config *cfg);
/* Fill cfg from the file named by NCCL_WATCHDOG_CONFIG (if any), then the environment.
 * Never fails: a bad value is reported through warn and replaced by its default. */
void wd_config_load(wd_config *cfg, wd_getenv_fn getenv_fn, wd_config_warn_fn warn);

/* Parsers, exposed for tests. Return 0 on success, -1 on a malformed or out-of-range value. */
int wd_parse_duration_ns(const char *s, uint64_t *out_ns); /* "300", "2.5", "500ms", "30s", "5m", "1h" */
int wd_parse_signal(const char *s, int *out_sig);          /* "SIGUSR1", "USR1", "10", "none" -> 0 */
int wd_parse_bool(const char *s, int *out);                /* 1/0, true/false, yes/no, on/off */
int wd_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int wd_parse_mask(const char *s, int *out);                /* decimal or 0x hex */
const char *wd_kernelch_name(int kernelch);                /* "auto", "on", "off" */

/* Name of the signal for logs and dumps ("SIGUSR1", "SIGRTMIN+3", "none"). */
const char *wd_signal_name(int sig, char *buf, int len);

/* A URL fit for a log line: its user and password (user:password@) left out. */
void wd_url_redact(const char *url, char *out, size_t len);

/* One line describing the effective settings, for the INFO line at first init. */
void wd_config_describe(const wd_config *cfg, char *buf, int len);

#endif
