/* The watchdog thread: stall detection, snapshot signals, peer triggers, dumps. */
#ifndef WD_WATCHDOG_H
#define WD_WATCHDOG_H

/* Start the thread and install the signal handlers (first init). 0, or -1 (plugin keeps
 * recording but cannot dump). Called under the lifecycle lock. */
int wd_watchdog_start(void);
/* Stop and join the thread, restore every handler (last finalize). */
void wd_watchdog_stop(void);

#endif
