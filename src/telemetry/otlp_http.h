/*
 * OTLP/HTTP export (NCCL_WATCHDOG_OTLP_ENDPOINT): protobuf bodies POSTed to a collector by
 * libcurl, loaded at run time only when an endpoint is set (no link dependency of the plugin).
 * Everything runs on the watchdog thread through libcurl's multi interface, which never blocks:
 * each call moves the transfer as far as it can go now, so a collector that is down, slow or
 * answers garbage costs a dump nothing. Metrics are cumulative: an export that fails loses
 * resolution, not counts, and none is retried.
 */
#ifndef WD_TM_OTLP_HTTP_H
#define WD_TM_OTLP_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "base/config.h"

typedef struct wd_otlp_stats {
  uint64_t ok, failed, skipped; /* exports answered 2xx, failed, not started (one in flight) */
} wd_otlp_stats;

/* At watchdog start. 0: on; -1: off (no endpoint, or one WARN saying why). */
int wd_otlp_http_open(const wd_config *cfg);
int wd_otlp_http_on(void);
/* Whether an export is due now (the interval passed). */
int wd_otlp_http_due(uint64_t now);
/* Starts sending body (malloc'ed: the exporter frees it), unless one is still in flight. */
void wd_otlp_http_send(uint8_t *body, size_t len);
/* Moves a transfer in flight along; never blocks. */
void wd_otlp_http_progress(void);
/* How soon the watchdog should call progress again, in ms; -1: nothing in flight. */
int wd_otlp_http_wait_ms(void);
void wd_otlp_http_stats(wd_otlp_stats *s);
/* At watchdog stop: abandons a transfer in flight, unloads libcurl. */
void wd_otlp_http_close(void);

#endif
