/*
 * nccl-watchdog-analyze: reads the dumps of every rank and names the rank and collective that
 * hung the job. Usage and output formats: docs/analyzer.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load.h"
#include "report.h"
#include "trace.h"
#include "verdict.h"

enum { EXIT_OK = 0, EXIT_OUTPUT = 1, EXIT_USAGE = 2, EXIT_NO_DUMP = 3 };

typedef struct args {
  int json, verbose, quiet;
  const char *trace;
  wd_az_opts opts;
  int ninputs;
  char **inputs;
} args;

static void usage(FILE *f) {
  fprintf(f,
          "usage: nccl-watchdog-analyze [options] DUMP_DIR|DUMP_FILE...\n"
          "  --json           machine-readable report on stdout (schema: docs/analyzer.md)\n"
          "  --trace FILE     also write a Chrome/Perfetto trace of every rank's rings\n"
          "  --all-dumps      use every dump, not only the newest per (host, pid, comm rank)\n"
          "  --stall-ms MS    an operation without progress for MS counts as stuck\n"
          "                   (default: the timeout recorded in each dump)\n"
          "  -v, --verbose    one line per rank in the report\n"
          "  -q, --quiet      do not list skipped files on stderr\n"
          "exit: 0 analyzed (hang or not), 1 output not written, 2 usage, 3 no readable dump\n");
}

static int parse_args(int argc, char **argv, args *a) {
  memset(a, 0, sizeof(*a));
  a->inputs = calloc((size_t)argc, sizeof(char *));
  if (!a->inputs) return -1;
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    if (strcmp(s, "--json") == 0) a->json = 1;
    else if (strcmp(s, "--all-dumps") == 0) a->opts.all_dumps = 1;
    else if (strcmp(s, "-v") == 0 || strcmp(s, "--verbose") == 0) a->verbose = 1;
    else if (strcmp(s, "-q") == 0 || strcmp(s, "--quiet") == 0) a->quiet = 1;
    else if (strcmp(s, "--trace") == 0 && i + 1 < argc) a->trace = argv[++i];
    else if (strcmp(s, "--stall-ms") == 0 && i + 1 < argc) {
      char *end;
      a->opts.stall_ms = strtod(argv[++i], &end);
      if (*end || a->opts.stall_ms <= 0) return -1;
    } else if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
      usage(stdout);
      exit(EXIT_OK);
    } else if (s[0] == '-' && s[1]) return -1;
    else a->inputs[a->ninputs++] = argv[i];
  }
  return a->ninputs ? 0 : -1;
}

static int run(const args *a) {
  wd_az_set set;
  memset(&set, 0, sizeof(set));
  for (int i = 0; i < a->ninputs; i++) wd_az_load_path(&set, a->inputs[i], a->quiet);
  wd_az_load_release();
  int rc = EXIT_OK;
  if (set.ndumps == 0) {
    fprintf(stderr, "nccl-watchdog-analyze: no readable dump (%zu file%s skipped)\n", set.nskips,
            set.nskips == 1 ? "" : "s");
    rc = EXIT_NO_DUMP;
    goto out;
  }
  wd_az_select(&set, a->opts.all_dumps);
  wd_az_result res;
  if (wd_az_analyze(&set, &a->opts, &res) != 0) {
    fprintf(stderr, "nccl-watchdog-analyze: out of memory\n");
    rc = EXIT_OUTPUT;
    goto out;
  }
  if (a->json) rc = wd_az_report_json(stdout, &res) == 0 ? EXIT_OK : EXIT_OUTPUT;
  else wd_az_report_text(stdout, &res, a->verbose);
  if (a->trace && wd_az_trace_write(&set, a->trace) != 0) {
    fprintf(stderr, "nccl-watchdog-analyze: could not write trace %s\n", a->trace);
    rc = EXIT_OUTPUT;
  }
  if (fflush(stdout) != 0) rc = EXIT_OUTPUT;
  wd_az_result_free(&res);
out:
  wd_az_set_free(&set);
  wd_az_strings_free();
  return rc;
}

int main(int argc, char **argv) {
  args a;
  if (parse_args(argc, argv, &a) != 0) {
    usage(stderr);
    free(a.inputs);
    return EXIT_USAGE;
  }
  int rc = run(&a);
  free(a.inputs);
  return rc;
}
