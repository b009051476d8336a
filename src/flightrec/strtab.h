/*
 * Process-wide string table. NCCL passes string literals that live inside NCCL; a record keeps a
 * small id and the table keeps a bounded copy, so nothing reads NCCL's memory after it unloads.
 * Lookups are lock-free; adding a new string takes a short mutex, once per distinct string.
 */
#ifndef WD_STRTAB_H
#define WD_STRTAB_H

#include <stdint.h>

#define WD_STR_MAX 256 /* ids 0..255; 0 is "" (NULL or empty) */
#define WD_STR_LEN 32  /* bytes kept per string, NUL included */
#define WD_STR_OVERFLOW 255 /* id used when the table is full ("?") */

/* Intern s (may be NULL). Safe from any thread, never allocates. */
uint8_t wd_str_id(const char *s);
/* The copy kept for id ("" for 0 and unknown ids). */
const char *wd_str(uint8_t id);
/* Number of ids in use (for dumps: ids 0..n-1). */
unsigned wd_str_count(void);
/* Forget every pointer mapping (the copies stay valid). Called at the last finalize, when NCCL
 * may unload and load again at other addresses. */
void wd_str_reset_ptrs(void);

#endif
