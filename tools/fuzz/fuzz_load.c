/*
 * libFuzzer target for the dump loader: any byte string must be either loaded or skipped with a
 * reason, never crash, leak or read out of bounds. Build: see tools/CMakeLists.txt (WD_FUZZ) or
 * docs/analyzer.md ("Fuzzing").
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "incarnation.h"
#include "load.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  wd_az_set set;
  memset(&set, 0, sizeof(set));
  char why[256];
  if (wd_az_load_buffer(&set, "fuzz", (const char *)data, size, why, sizeof(why)) != 0 &&
      why[0] == '\0')
    __builtin_trap(); /* a rejected input always says why */
  wd_az_select(&set, 0);
  wd_az_set_free(&set);
  wd_az_strings_free();
  return 0;
}
