/* Logging through the logger NCCL hands to init; stderr with a prefix when there is none. */
#ifndef WD_LOG_H
#define WD_LOG_H

/* Levels and the subsystem bit use NCCL's values (src/plugin checks they agree with its ABI
 * header), so a line passed to NCCL's logger is filtered by NCCL_DEBUG like NCCL's own. */
typedef enum {
  WD_LOG_NONE = 0,
  WD_LOG_VERSION = 1,
  WD_LOG_WARN = 2,
  WD_LOG_INFO = 3,
  WD_LOG_ABORT = 4,
  WD_LOG_TRACE = 5
} wd_log_level;
#define WD_LOG_SUBSYS 0x4000ul /* NCCL_PROFILE */

/* NCCL's logger, seen with plain C types (its level argument is an enum of these values). */
typedef void (*wd_logger_fn)(wd_log_level level, unsigned long flags, const char *file, int line,
                             const char *fmt, ...);

/* Remember NCCL's logger (the first non-NULL one wins; NULL keeps the current one). */
void wd_log_set_logger(wd_logger_fn fn);
/* Forget the logger before the plugin may be unloaded. */
void wd_log_reset(void);

void wd_log(wd_log_level level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define WD_WARN(...) wd_log(WD_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define WD_INFO(...) wd_log(WD_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define WD_TRACE(...) wd_log(WD_LOG_TRACE, __FILE__, __LINE__, __VA_ARGS__)

#endif
