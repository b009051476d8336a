/*
 * Compressed dumps (NCCL_WATCHDOG_COMPRESS=gzip): a hang gives one `*-stall.json.gz` and no plain
 * dump; it is gzip (zlib reads it), its content is a valid dump naming the stalled AllReduce, and
 * the analyzer reads it as it reads a plain one.
 *
 * NCCL's order, as the test host plays it (nccl_host.h): the application thread's events from
 * ncclEnqueueCheck (enqueue.cc), the proxy's ProxyOps and steps from ncclProxyOpToArgs (proxy.cc)
 * and sendProxyProgress / recvProxyProgress (transport/net.cc).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "nccl_host.h"

/* The first dump of dir whose name ends with suffix (malloc'ed path), NULL when none; *count
 * gets how many there are. */
static char *find_suffix(const char *dir, const char *suffix, int *count) {
  char *paths[16], *found = NULL;
  int n = wdh_list_dumps(dir, NULL, paths, 16);
  size_t sl = strlen(suffix);
  *count = 0;
  for (int i = 0; i < n && i < 16; i++) {
    size_t len = strlen(paths[i]);
    if (len < sl || strcmp(paths[i] + len - sl, suffix) != 0) continue;
    (*count)++;
    if (!found) found = strdup(paths[i]);
  }
  wdh_free_paths(paths, n < 16 ? n : 16);
  return found;
}

int main(void) {
  const char *path = wdh_plugin_path();
  if (!path) return 77;
  char *dir = wdh_scenario_dir("compress", "300ms", "50ms");
  setenv("NCCL_WATCHDOG_COMPRESS", "gzip", 1);
  setenv("NCCL_WATCHDOG_BACKTRACE", "0", 1);
  wdh_plugin p;
  WDH_CHECK(wdh_load(&p, path, 0) == 0, "load");
  wdh_comm c;
  wdh_comm_init(&c, &p, 0x6a6a6a6aull, "gz", 1, 2, 0);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&c, NULL, &cfg, 20);
  cfg.hang_channel = 0;
  wdh_op op;
  wdh_op_run(&c, &cfg, &op);
  int n = 0;
  char *gz = NULL;
  for (int i = 0; i < 100 && !gz; i++) {
    wdh_sleep_ms(50);
    gz = find_suffix(dir, "-stall.json.gz", &n);
  }
  WDH_CHECK(gz != NULL, "no *-stall.json.gz in %s", dir);
  wdh_sleep_ms(300);
  free(gz);
  gz = find_suffix(dir, "-stall.json.gz", &n);
  WDH_CHECK(n == 1, "%d compressed stall dumps, expected 1", n);
  int plain = 0;
  free(find_suffix(dir, ".json", &plain));
  WDH_CHECK(plain == 0, "%d plain *.json dumps besides the compressed one", plain);

  /* gzip's magic first (zlib would read a plain file as it is), then the content. */
  unsigned char magic[2] = {0, 0};
  FILE *mf = gz ? fopen(gz, "rb") : NULL;
  if (mf) {
    if (fread(magic, 1, 2, mf) != 2) magic[0] = 0;
    fclose(mf);
  }
  WDH_CHECK(magic[0] == 0x1f && magic[1] == 0x8b, "not gzip: %s", gz ? gz : "(none)");
  size_t len = 0;
  char *text = gz ? wdh_read_file(gz, &len) : NULL;
  WDH_CHECK(text && len > 100, "empty: %s", gz ? gz : "(none)");
  cJSON *j = text ? cJSON_Parse(text) : NULL;
  WDH_CHECK(j != NULL, "the decompressed dump is not JSON");
  const char *func = j ? wdh_jstr(j, "trigger.stalls.0.func") : NULL;
  WDH_CHECK(func && !strcmp(func, "AllReduce"), "stall func %s", func ? func : "(none)");
  WDH_CHECK(j && wdh_jnum(j, "trigger.stalls.0.seq", -1) == 20, "stall seq");
  cJSON_Delete(j);
  if (text) { /* the content validates against the dump schema */
    char plainpath[1024];
    snprintf(plainpath, sizeof plainpath, "%s/.decompressed", dir);
    FILE *f = fopen(plainpath, "w");
    if (f) {
      fwrite(text, 1, len, f);
      fclose(f);
      WDH_CHECK(wdh_validate_dump(plainpath) == 0, "the decompressed dump does not validate");
      unlink(plainpath);
    }
  }
  free(text);

  const char *az = getenv("WDH_ANALYZER");
  if (az && access(az, X_OK) == 0) {
    char cmd[2048], out[1024];
    snprintf(out, sizeof out, "%s/.report", dir);
    snprintf(cmd, sizeof cmd, "'%s' -q --json '%s' > '%s'", az, dir, out);
    WDH_CHECK(system(cmd) == 0, "analyzer");
    cJSON *r = wdh_json_load(out);
    WDH_CHECK(r && wdh_jnum(r, "dumpsUsed", -1) == 1, "the analyzer did not use the compressed dump");
    const char *sf = r ? wdh_jstr(r, "comms.0.stuck.func") : NULL;
    WDH_CHECK(sf && !strcmp(sf, "AllReduce"), "analyzer: stuck func %s", sf ? sf : "(none)");
    wdh_json_free(r);
    unlink(out);
  }
  free(gz);
  wdh_op_resume(&op);
  wdh_comm_finalize(&c);
  wdh_unload(&p);
  unsetenv("NCCL_WATCHDOG_COMPRESS");
  return wdh_scenario_end("compress", dir);
}
