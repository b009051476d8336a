#include "base/ncclver.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>

typedef int (*wd_get_version_fn)(int *version);

static _Atomic int cached = -1;

static int ask(void *handle) {
  wd_get_version_fn fn = (wd_get_version_fn)dlsym(handle, "ncclGetVersion");
  int v = 0;
  if (!fn || fn(&v) != 0 || v < 0) return 0;
  return v;
}

int wd_nccl_version(void) {
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v >= 0) return v;
  /* A framework links NCCL into the global scope; a library opened RTLD_LOCAL is found by name,
   * without loading one that is not there (RTLD_NOLOAD). */
  v = ask(RTLD_DEFAULT);
  if (!v) {
    void *h = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD);
    if (h) {
      v = ask(h);
      dlclose(h);
    }
  }
  atomic_store_explicit(&cached, v, memory_order_relaxed);
  return v;
}

void wd_nccl_version_reset(void) { atomic_store_explicit(&cached, -1, memory_order_relaxed); }

const char *wd_nccl_version_str(int code, char *buf, unsigned len) {
  if (code <= 0) {
    snprintf(buf, len, "unknown");
  } else if (code >= 10000) { /* major * 10000 + minor * 100 + patch, since 2.9 */
    snprintf(buf, len, "%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
  } else {
    snprintf(buf, len, "%d.%d.%d", code / 1000, code / 100 % 10, code % 100);
  }
  return buf;
}
