/* Host identity for file names and dumps. */
#ifndef WD_HOST_H
#define WD_HOST_H

#include <stddef.h>

/* Short host name (up to the first dot), "unknown" when it cannot be read. */
void wd_hostname(char *out, size_t len);

#endif
