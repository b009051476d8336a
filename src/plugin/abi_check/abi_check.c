/* Build-time check: our ncclResult_t values agree with NCCL's own header. Compiled only where
 * nccl.h is found; it produces no code. */
#include <nccl.h>

#define WD_NCCL_RESULT(name, value) \
  _Static_assert((int)(name) == (value), #name " differs from nccl-watchdog's profiler_abi.h");
WD_NCCL_RESULT(ncclSuccess, 0)
WD_NCCL_RESULT(ncclUnhandledCudaError, 1)
WD_NCCL_RESULT(ncclSystemError, 2)
WD_NCCL_RESULT(ncclInternalError, 3)
WD_NCCL_RESULT(ncclInvalidArgument, 4)
WD_NCCL_RESULT(ncclInvalidUsage, 5)
WD_NCCL_RESULT(ncclRemoteError, 6)
WD_NCCL_RESULT(ncclInProgress, 7)

int wd_abi_check_unused;
