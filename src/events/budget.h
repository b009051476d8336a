/*
 * The process-wide memory budget (NCCL_WATCHDOG_MEMORY_BUDGET): rings and event slots together.
 * A communicator created over budget gets smaller rings; a pool that would grow past it drops
 * its events instead (counted). Checked only where memory is committed: context creation and a
 * pool's growth (warm-up), never on an established hot path.
 */
#ifndef WD_BUDGET_H
#define WD_BUDGET_H

#include <stddef.h>
#include <stdint.h>

#define WD_BUDGET_MIN_RING 256u /* records: rings are never shrunk below this */

typedef struct wd_budget_stats {
  uint64_t budget;      /* bytes, 0 = unlimited */
  uint64_t ring_bytes;  /* rings of live communicators */
  uint64_t slot_bytes;  /* event slots committed (they are reused, never returned) */
  uint64_t shrunk;      /* communicators that got smaller rings */
  uint64_t refused;     /* slot chunks refused */
} wd_budget_stats;

void wd_budget_set(uint64_t bytes);
/* Whether bytes more fit (always, without a budget). */
int wd_budget_allows(uint64_t bytes);
void wd_budget_rings(int64_t delta);
void wd_budget_note_shrunk(void);
void wd_budget_note_refused(void);
void wd_budget_get(wd_budget_stats *out);

#endif
