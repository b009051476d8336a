/*
 * The NCCL library that loaded the plugin: its version, read at run time through its own
 * ncclGetVersion (init.cc: it only stores NCCL_VERSION_CODE, no lock, no initialisation), so the
 * event mask can follow what that version charges for (lifecycle.c, wd_choose_mask).
 */
#ifndef WD_NCCLVER_H
#define WD_NCCLVER_H

/* NCCL's version code (2.31.2 = 23102), or 0 when no loaded library answers. Looked up once
 * per process (the global scope, then an already-loaded libnccl.so.2); later calls return the
 * cached answer. Not async-signal-safe on its first call. */
int wd_nccl_version(void);
/* Forget the cached answer (the plugin is unloaded, or a test changes the library). */
void wd_nccl_version_reset(void);
/* "2.31.2" into buf, or "unknown". */
const char *wd_nccl_version_str(int code, char *buf, unsigned len);

/* NCCL versions where KernelCh costs the GPU (per-phase device writes and a system fence,
 * NVIDIA/nccl issue 2355): 2.31 and later. */
#define WD_NCCL_KCH_COSTLY 23100

#endif
