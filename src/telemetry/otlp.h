/*
 * The metrics as an OTLP ExportMetricsServiceRequest (protobuf, opentelemetry-proto's
 * collector/metrics/v1): the telemetry aggregates and the health the Prometheus file carries,
 * named by OpenTelemetry's conventions (dotted names, units apart, cumulative temporality). A
 * fixed message shape, written field by field: no generated code, no protobuf runtime in the
 * training process. tests/otlp decodes it with OpenTelemetry's own definitions.
 */
#ifndef WD_TM_OTLP_H
#define WD_TM_OTLP_H

#include <stddef.h>
#include <stdint.h>

#include "telemetry/aggregate.h"

/* A communicator's health, as the metrics file has it. */
typedef struct wd_otlp_comm {
  uint64_t comm_id;
  const char *name;
  int rank, nranks;
  int64_t inflight;
  double since_s; /* seconds since it last recorded an event */
} wd_otlp_comm;

typedef struct wd_otlp_input {
  const wd_tm_view *tm;
  const wd_otlp_comm *comms;
  size_t ncomms;
  unsigned stalls, dumps;
  uint64_t start_unix_ns, now_unix_ns;
} wd_otlp_input;

/* The resource: service.name (OTEL_SERVICE_NAME, else nccl-watchdog), host.name, process.pid,
 * the job's rank (RANK), and OTEL_RESOURCE_ATTRIBUTES' key=value pairs. Read once, at start. */
void wd_otlp_resource(const char *host, int pid);
/* The request's bytes in *out (malloc'ed, the caller frees). 0, or -1 when out of memory. */
int wd_otlp_encode(const wd_otlp_input *in, uint8_t **out, size_t *len);

#endif
