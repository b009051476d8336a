/* Logging through the logger NCCL hands to init; stderr with a prefix when there is none. */
#ifndef WD_LOG_H
#define WD_LOG_H

#include "profiler_abi.h"

/* Remember NCCL's logger (the first non-NULL one wins; NULL keeps the current one). */
void wd_log_set_logger(ncclDebugLogger_t fn);
/* Forget the logger before the plugin may be unloaded. */
void wd_log_reset(void);

void wd_log(ncclDebugLogLevel level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define WD_WARN(...) wd_log(NCCL_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define WD_INFO(...) wd_log(NCCL_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define WD_TRACE(...) wd_log(NCCL_LOG_TRACE, __FILE__, __LINE__, __VA_ARGS__)

#endif
