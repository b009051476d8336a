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
#include <stdio.h>

/* The driver API with plain C types: CUresult is an int enum, CUdevice an int, CUuuid 16 bytes. */
typedef int (*wd_cuCtxGetDevice_fn)(int *device);
typedef int (*wd_cuDeviceGetUuid_fn)(unsigned char *uuid, int device);

#define WD_CUDA_SUCCESS 0

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
