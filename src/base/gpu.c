/*
 * GPU identity through the CUDA driver API, found at run time so the plugin never links against
 * CUDA and loads on machines without a GPU.
 *
 * libcuda is opened with RTLD_NOLOAD: NCCL has already loaded and initialised it when it calls
 * our init, and when it is not loaded there can be no current context anyway, so we never load
 * or initialise a driver that the application did not (no cuInit, no side effects).
 */
#include "base/gpu.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

/* The driver API with plain C types: CUresult is an int enum, CUdevice an int, CUuuid 16 bytes. */
typedef int (*wd_cuCtxGetDevice_fn)(int *device);
typedef int (*wd_cuDeviceGetUuid_fn)(unsigned char *uuid, int device);

static void *wd_cuda_open(void) {
  return dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
}

/* Current device of the calling thread's context, or -1. */
static int wd_current_device(void *h) {
  wd_cuCtxGetDevice_fn get_dev;
  /* POSIX allows converting dlsym's void * to a function pointer; copy it to avoid the cast. */
  void *sym = dlsym(h, "cuCtxGetDevice");
  if (!sym) return -1;
  *(void **)&get_dev = sym;
  int dev = -1;
  if (get_dev(&dev) != WD_CUDA_SUCCESS) return -1;
  return dev;
}

int wd_gpu_device(void) {
  void *h = wd_cuda_open();
  if (!h) return -1;
  int dev = wd_current_device(h);
  dlclose(h);
  return dev;
}

void wd_gpu_uuid(char *buf, int len) {
  if (!buf || len <= 0) return;
  buf[0] = '\0';
  void *h = wd_cuda_open();
  if (!h) return;
  int dev = wd_current_device(h);
  if (dev >= 0) {
    /* _v2 is the driver's current symbol; the unversioned one exists in older drivers. */
    void *sym = dlsym(h, "cuDeviceGetUuid_v2");
    if (!sym) sym = dlsym(h, "cuDeviceGetUuid");
    unsigned char u[16];
    wd_cuDeviceGetUuid_fn get_uuid;
    *(void **)&get_uuid = sym;
    char tmp[WD_UUID_LEN];
    /* A truncated UUID would look valid and be wrong: leave the buffer empty instead. */
    if (sym && len >= 41 && get_uuid(u, dev) == WD_CUDA_SUCCESS) {
      snprintf(tmp, sizeof tmp,
               "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
               u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
               u[15]);
      snprintf(buf, (size_t)len, "%s", tmp);
    }
  }
  dlclose(h);
}

/* ---- the driver table for GPU-side ground truth ---- */

static pthread_mutex_t wd_cuda_lock = PTHREAD_MUTEX_INITIALIZER;
static void *wd_cuda_dl;
static wd_cuda wd_cuda_table;
static int wd_cuda_state; /* 0 not tried, 1 usable, -1 not usable */

/* Entry points by their current (versioned) names first, as the driver exports them. */
static int wd_cuda_sym(void *h, void *slot, const char *name, const char *fallback) {
  void *sym = dlsym(h, name);
  if (!sym && fallback) sym = dlsym(h, fallback);
  if (!sym) return -1;
  *(void **)slot = sym;
  return 0;
}

const wd_cuda *wd_cuda_get(void) {
  pthread_mutex_lock(&wd_cuda_lock);
  if (wd_cuda_state == 0) {
    wd_cuda_state = -1;
    void *h = wd_cuda_open();
    wd_cuda *t = &wd_cuda_table;
    if (h && !wd_cuda_sym(h, &t->ctx_get_current, "cuCtxGetCurrent", NULL) &&
        !wd_cuda_sym(h, &t->ctx_push, "cuCtxPushCurrent_v2", "cuCtxPushCurrent") &&
        !wd_cuda_sym(h, &t->ctx_pop, "cuCtxPopCurrent_v2", "cuCtxPopCurrent") &&
        !wd_cuda_sym(h, &t->event_create, "cuEventCreate", NULL) &&
        !wd_cuda_sym(h, &t->event_destroy, "cuEventDestroy_v2", "cuEventDestroy") &&
        !wd_cuda_sym(h, &t->event_record, "cuEventRecord", NULL) &&
        !wd_cuda_sym(h, &t->event_query, "cuEventQuery", NULL) &&
        !wd_cuda_sym(h, &t->stream_is_capturing, "cuStreamIsCapturing", NULL) &&
        !wd_cuda_sym(h, &t->capture_mode_exchange, "cuThreadExchangeStreamCaptureMode", NULL)) {
      /* Optional: the captured-launch watch (events/graph.h) is off without the first two. */
      if (wd_cuda_sym(h, &t->event_record_flags, "cuEventRecordWithFlags", NULL) ||
          wd_cuda_sym(h, &t->launch_host_func, "cuLaunchHostFunc", NULL))
        t->event_record_flags = NULL, t->launch_host_func = NULL;
      if (wd_cuda_sym(h, &t->capture_info, "cuStreamGetCaptureInfo_v2", NULL)) t->capture_info = NULL;
      if (wd_cuda_sym(h, &t->user_object_create, "cuUserObjectCreate", NULL) ||
          wd_cuda_sym(h, &t->user_object_release, "cuUserObjectRelease", NULL) ||
          wd_cuda_sym(h, &t->graph_retain_user_object, "cuGraphRetainUserObject", NULL))
        t->user_object_create = NULL, t->user_object_release = NULL, t->graph_retain_user_object = NULL;
      wd_cuda_dl = h;
      wd_cuda_state = 1;
    } else if (h) {
      dlclose(h);
    }
  }
  const wd_cuda *t = wd_cuda_state == 1 ? &wd_cuda_table : NULL;
  pthread_mutex_unlock(&wd_cuda_lock);
  return t;
}

void wd_cuda_release(void) {
  pthread_mutex_lock(&wd_cuda_lock);
  if (wd_cuda_dl) dlclose(wd_cuda_dl);
  wd_cuda_dl = NULL;
  wd_cuda_state = 0;
  pthread_mutex_unlock(&wd_cuda_lock);
}
