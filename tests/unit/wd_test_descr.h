/* A v5 event descriptor of a given type, with the fields the unit tests need filled. */
#ifndef WD_TEST_DESCR_H
#define WD_TEST_DESCR_H

#include <string.h>
#include <unistd.h>

#include "plugin/profiler_abi.h"

static inline void wd_test_descr5(ncclProfilerEventDescr_v5_t *d, uint64_t type, void *parent) {
  memset(d, 0, sizeof(*d));
  d->type = type;
  d->parentObj = parent;
  if (type == ncclProfileColl) {
    d->coll.func = "AllReduce";
    d->coll.seqNumber = 0;
    d->coll.nChannels = 2;
  } else if (type == ncclProfileProxyOp) {
    d->proxyOp.pid = getpid();
    d->proxyOp.nSteps = 4;
  }
}

#endif
