/* GPU identity through the CUDA driver API, loaded at run time (never a link dependency). */
#ifndef WD_GPU_H
#define WD_GPU_H

#define WD_UUID_LEN 48

/* Write the current device's UUID ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx") into buf, or an
 * empty string when there is no driver, no context or no device. Never fails, never blocks long. */
void wd_gpu_uuid(char *buf, int len);
/* Device ordinal of the current context, -1 when unknown. */
int wd_gpu_device(void);

#endif
