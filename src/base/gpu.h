/* GPU identity through the CUDA driver API, loaded at run time (never a link dependency). */
#ifndef WD_GPU_H
#define WD_GPU_H

#include <stddef.h>

#define WD_UUID_LEN 48

/* Write the current device's UUID ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx") into buf, or an
 * empty string when there is no driver, no context or no device. Never fails, never blocks long. */
void wd_gpu_uuid(char *buf, int len);
/* Device ordinal of the current context, -1 when unknown. */
int wd_gpu_device(void);

/* The CUDA driver calls the GPU-side ground truth needs (events recorded on NCCL's streams and
 * queried by the watchdog), with plain C types: handles are pointers, CUresult an int. */
typedef struct wd_cuda {
  int (*ctx_get_current)(void **ctx);
  int (*ctx_push)(void *ctx);
  int (*ctx_pop)(void **ctx);
  int (*event_create)(void **event, unsigned flags);
  int (*event_destroy)(void *event);
  int (*event_record)(void *event, void *stream);
  int (*event_query)(void *event);
  int (*stream_is_capturing)(void *stream, int *status);
  int (*capture_mode_exchange)(int *mode); /* cuThreadExchangeStreamCaptureMode */
  /* For captured launches (events/graph.h); NULL where the driver lacks them. */
  int (*event_record_flags)(void *event, void *stream, unsigned flags); /* cuEventRecordWithFlags */
  int (*launch_host_func)(void *stream, void (*fn)(void *), void *arg); /* cuLaunchHostFunc */
  /* cuStreamGetCaptureInfo_v2: status, capture id (unique per capture in the process), and
   * graph / dependencies, which are not used (NULL). Optional: without it every captured
   * launch counts its own replays. */
  int (*capture_info)(void *stream, int *status, unsigned long long *id, void **graph,
                      const void **deps, size_t *ndeps);
  /* CUDA user objects (11.3+): a destructor the driver runs when the last graph holding the
   * object is gone; the captured-launch watch gives a graph's slots back by it. Optional. */
  int (*user_object_create)(void **obj, void *ptr, void (*destroy)(void *), unsigned refs, unsigned flags);
  int (*user_object_release)(void *obj, unsigned count);
  int (*graph_retain_user_object)(void *graph, void *obj, unsigned count, unsigned flags);
} wd_cuda;

#define WD_CUDA_SUCCESS 0
#define WD_CUDA_NOT_READY 600           /* CUDA_ERROR_NOT_READY */
#define WD_CU_EVENT_DISABLE_TIMING 0x2  /* CU_EVENT_DISABLE_TIMING */
#define WD_CU_CAPTURE_NONE 0            /* CU_STREAM_CAPTURE_STATUS_NONE */
#define WD_CU_CAPTURE_MODE_RELAXED 2    /* CU_STREAM_CAPTURE_MODE_RELAXED */
#define WD_CU_CAPTURE_ACTIVE 1          /* CU_STREAM_CAPTURE_STATUS_ACTIVE */
#define WD_CU_EVENT_RECORD_EXTERNAL 0x1 /* CU_EVENT_RECORD_EXTERNAL: an event node every replay records */
#define WD_CU_USER_OBJECT_NO_DESTRUCTOR_SYNC 0x1 /* the only flag cuUserObjectCreate takes */
#define WD_CU_GRAPH_USER_OBJECT_MOVE 0x1         /* the graph takes the caller's reference */

/* The driver's table when libcuda.so.1 is already loaded in the process (NCCL loaded it) and
 * exports every entry point above; NULL otherwise. The first call opens it; wd_cuda_release()
 * (at the plugin's process-wide stop) lets it go. */
const wd_cuda *wd_cuda_get(void);
void wd_cuda_release(void);

#endif
