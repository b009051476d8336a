/* Host identity for file names and dumps. */
#include "base/host.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char host_override[64];

void wd_hostname_override(const char *name) {
  snprintf(host_override, sizeof host_override, "%s", name ? name : "");
}

void wd_hostname(char *out, size_t len) {
  if (!out || !len) return;
  if (host_override[0]) {
    snprintf(out, len, "%s", host_override);
    return;
  }
  char buf[256];
  if (gethostname(buf, sizeof(buf)) != 0) buf[0] = 0;
  buf[sizeof(buf) - 1] = 0;
  char *dot = strchr(buf, '.');
  if (dot) *dot = 0;
  snprintf(out, len, "%s", buf[0] ? buf : "unknown");
}
