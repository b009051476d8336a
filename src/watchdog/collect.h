/* Gather everything a dump shows into plain structures (dump.h). */
#ifndef WD_COLLECT_H
#define WD_COLLECT_H

#include "base/config.h"
#include "dump/snapshot.h"
#include "events/context.h"

/* Fill in (reason-specific fields are the caller's). Takes wd_store.lock while copying. */
/* keep > 0: a summary, only the newest keep records of each ring (the rest count as lost). */
int wd_collect(wd_dump_input *in, const wd_config *cfg, const char *reason, int with_threads,
               uint32_t keep);
void wd_collect_free(wd_dump_input *in);

/* NCCL's activation mask now, read without trusting its address (NCCL's memory, not ours: a
 * host may even pass a stack variable): a copy through process_vm_readv, which fails instead of
 * faulting. When it fails the mask stops being watched (mask_ptr cleared, under the store lock
 * the caller holds) and the mask asked for is returned. */
int wd_mask_now(wd_context *ctx);

#endif
