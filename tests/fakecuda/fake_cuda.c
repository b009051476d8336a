/*
 * A stand-in for the CUDA driver (built as libcuda.so.1) that the test host controls. It has the
 * entry points the plugin looks up and a GPU the host drives by hand: each stream is a queue of
 * positions; a kernel takes one (wdfake_launch), an event recorded on a stream completes once
 * the host has completed every position before it (wdfake_complete). A kernel that hangs is one
 * the host never completes.
 *
 * CUresult values as the driver's: 0 success, 600 not ready, 1 invalid value.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define OK 0
#define NOT_READY 600
#define INVALID 1

typedef struct fake_stream {
  uint32_t magic;
  _Atomic uint64_t submitted; /* positions taken so far */
  _Atomic uint64_t completed; /* positions the "GPU" finished */
  _Atomic int capturing;
} fake_stream;

typedef struct fake_event {
  uint32_t magic;
  _Atomic(fake_stream *) stream; /* NULL until recorded */
  _Atomic uint64_t pos;          /* completes when stream->completed >= pos */
} fake_event;

#define STREAM_MAGIC 0x5354524du
#define EVENT_MAGIC 0x4556544eu

static _Atomic long events_live, records, queries;
static _Atomic int sticky_error;
static int fake_ctx_token;

/* ---- driver entry points the plugin uses ---- */

EXPORT int cuCtxGetCurrent(void **ctx) {
  if (!ctx) return INVALID;
  *ctx = &fake_ctx_token;
  return OK;
}
EXPORT int cuCtxPushCurrent_v2(void *ctx) { return ctx ? OK : INVALID; }
EXPORT int cuCtxPopCurrent_v2(void **ctx) {
  if (ctx) *ctx = &fake_ctx_token;
  return OK;
}
EXPORT int cuCtxGetDevice(int *dev) {
  if (!dev) return INVALID;
  *dev = 0;
  return OK;
}
EXPORT int cuDeviceGetUuid_v2(unsigned char *uuid, int dev) {
  if (!uuid || dev != 0) return INVALID;
  for (int i = 0; i < 16; i++) uuid[i] = (unsigned char)(0xf0 + i);
  return OK;
}

EXPORT int cuEventCreate(void **ev, unsigned flags) {
  (void)flags;
  if (!ev) return INVALID;
  fake_event *e = calloc(1, sizeof(*e));
  if (!e) return 2; /* out of memory */
  e->magic = EVENT_MAGIC;
  atomic_fetch_add(&events_live, 1);
  *ev = e;
  return OK;
}

EXPORT int cuEventDestroy_v2(void *ev) {
  fake_event *e = ev;
  if (!e || e->magic != EVENT_MAGIC) return INVALID;
  e->magic = 0;
  free(e);
  atomic_fetch_sub(&events_live, 1);
  return OK;
}

EXPORT int cuEventRecord(void *ev, void *stream) {
  fake_event *e = ev;
  fake_stream *s = stream;
  if (!e || e->magic != EVENT_MAGIC || !s || s->magic != STREAM_MAGIC) return INVALID;
  atomic_store(&e->pos, atomic_load(&s->submitted));
  atomic_store(&e->stream, s);
  atomic_fetch_add(&records, 1);
  return OK;
}

EXPORT int cuEventQuery(void *ev) {
  fake_event *e = ev;
  if (!e || e->magic != EVENT_MAGIC) return INVALID;
  atomic_fetch_add(&queries, 1);
  int err = atomic_load(&sticky_error);
  if (err) return err;
  fake_stream *s = atomic_load(&e->stream);
  if (!s) return OK;
  return atomic_load(&s->completed) >= atomic_load(&e->pos) ? OK : NOT_READY;
}

EXPORT int cuStreamIsCapturing(void *stream, int *status) {
  fake_stream *s = stream;
  if (!s || s->magic != STREAM_MAGIC || !status) return INVALID;
  *status = atomic_load(&s->capturing);
  return OK;
}

EXPORT int cuThreadExchangeStreamCaptureMode(int *mode) { return mode ? OK : INVALID; }

/* ---- control, for the test host ---- */

EXPORT void *wdfake_stream_create(void) {
  fake_stream *s = calloc(1, sizeof(*s));
  if (s) s->magic = STREAM_MAGIC;
  return s;
}
/* Streams are never freed: a plugin may still query events recorded on them. */

/* A kernel (or CE copy) enqueued on the stream; returns its position. */
EXPORT uint64_t wdfake_launch(void *stream) {
  fake_stream *s = stream;
  return atomic_fetch_add(&s->submitted, 1) + 1;
}
/* The GPU finished every position up to pos. */
EXPORT void wdfake_complete(void *stream, uint64_t pos) {
  fake_stream *s = stream;
  uint64_t cur = atomic_load(&s->completed);
  while (cur < pos && !atomic_compare_exchange_weak(&s->completed, &cur, pos)) {
  }
}
EXPORT uint64_t wdfake_submitted(void *stream) { return atomic_load(&((fake_stream *)stream)->submitted); }
EXPORT void wdfake_set_capturing(void *stream, int on) { atomic_store(&((fake_stream *)stream)->capturing, on); }
/* Every query fails with this CUresult from now on (0 clears it): a sticky GPU error. */
EXPORT void wdfake_set_error(int err) { atomic_store(&sticky_error, err); }
EXPORT long wdfake_events_live(void) { return atomic_load(&events_live); }
EXPORT long wdfake_records(void) { return atomic_load(&records); }
EXPORT long wdfake_queries(void) { return atomic_load(&queries); }
