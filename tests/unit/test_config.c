/* Configuration parsing and loading, logging, and GPU identity without a driver. */
#include <CUnit/Basic.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/config.h"
#include "base/gpu.h"
#include "base/log.h"
#include "wd_test_util.h"

/* ---- fake environment and captured warnings ---- */

#define MAX_VARS 32
#define MAX_WARN 64
static const char *env_names[MAX_VARS];
static const char *env_vals[MAX_VARS];
static int env_n;
static char warns[MAX_WARN][1024];
static int nwarn;

static const char *fake_getenv(const char *name) {
  for (int i = 0; i < env_n; i++)
    if (strcmp(env_names[i], name) == 0) return env_vals[i];
  return NULL;
}

static void capture_warn(const char *msg) {
  if (nwarn < MAX_WARN) snprintf(warns[nwarn], sizeof warns[0], "%s", msg);
  nwarn++;
}

static void reset(void) {
  env_n = 0;
  nwarn = 0;
}

static void put(const char *name, const char *val) {
  env_names[env_n] = name;
  env_vals[env_n] = val;
  env_n++;
}

/* Load with only NAME=VAL set. */
static void load1(wd_config *cfg, const char *name, const char *val) {
  reset();
  put(name, val);
  wd_config_load(cfg, fake_getenv, capture_warn);
}

static int warned(const char *needle) {
  for (int i = 0; i < nwarn && i < MAX_WARN; i++)
    if (strstr(warns[i], needle)) return 1;
  return 0;
}

#define NS_MS 1000000ULL
#define NS_S 1000000000ULL

/* Field by field: the struct has padding, so memcmp would compare indeterminate bytes. */
static int cfg_equal(const wd_config *a, const wd_config *b) {
  return a->enable == b->enable && a->timeout_ns == b->timeout_ns && a->poll_ns == b->poll_ns &&
         a->unreached_timeout_ns == b->unreached_timeout_ns &&
         strcmp(a->dump_dir, b->dump_dir) == 0 && a->ring_size == b->ring_size &&
         a->proxy_ring_size == b->proxy_ring_size && a->max_events == b->max_events &&
         a->signal == b->signal && a->bt_signal == b->bt_signal && a->action == b->action &&
         a->event_mask == b->event_mask && a->backtrace == b->backtrace &&
         a->bt_wait_ns == b->bt_wait_ns && a->peer_dumps == b->peer_dumps &&
         a->max_dumps == b->max_dumps;
}

/* ---- parsers ---- */

static void test_duration_valid(void) {
  static const struct {
    const char *s;
    uint64_t ns;
  } ok[] = {
      {"300", 300 * NS_S},   {"2.5", 2500 * NS_MS}, {"500ms", 500 * NS_MS}, {"30s", 30 * NS_S},
      {"5m", 300 * NS_S},    {"1h", 3600 * NS_S},   {" 30s ", 30 * NS_S},   {"0", 0},
      {"0.001", NS_MS},      {"1.5h", 5400 * NS_S}, {"30S", 30 * NS_S},     {"250MS", 250 * NS_MS},
      {"0.5ms", NS_MS / 2},  {"1.0000000001", NS_S},  {"5124095h", 5124095ULL * 3600 * NS_S},
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    uint64_t v = 12345;
    CU_ASSERT_EQUAL_FATAL(wd_parse_duration_ns(ok[i].s, &v), 0);
    CU_ASSERT_EQUAL(v, ok[i].ns);
  }
}

static void test_duration_invalid(void) {
  static const char *const bad[] = {
      "", "   ", "abc", "-1", "-0.5s", "nan", "inf", "1e3", "30sec", "30 s", "1.", ".5", "0x10",
      "+5", "5d", "99999999999999999999", "5124096h", "18446744073709551616ms", "1.2.3", "5s5",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint64_t v = 777;
    CU_ASSERT_EQUAL(wd_parse_duration_ns(bad[i], &v), -1);
    CU_ASSERT_EQUAL(v, 777); /* untouched on failure */
  }
  CU_ASSERT_EQUAL(wd_parse_duration_ns(NULL, NULL), -1);
}

static void test_uint_bool_mask(void) {
  uint64_t u = 0;
  CU_ASSERT_EQUAL(wd_parse_uint("42", 0, 100, &u), 0);
  CU_ASSERT_EQUAL(u, 42);
  CU_ASSERT_EQUAL(wd_parse_uint(" 7 ", 0, 100, &u), 0);
  CU_ASSERT_EQUAL(u, 7);
  CU_ASSERT_EQUAL(wd_parse_uint("101", 0, 100, &u), -1);
  CU_ASSERT_EQUAL(wd_parse_uint("4", 5, 100, &u), -1);
  CU_ASSERT_EQUAL(wd_parse_uint("-1", 0, 100, &u), -1);
  CU_ASSERT_EQUAL(wd_parse_uint("12abc", 0, 100, &u), -1);
  CU_ASSERT_EQUAL(wd_parse_uint("", 0, 100, &u), -1);
  CU_ASSERT_EQUAL(wd_parse_uint("18446744073709551616", 0, UINT64_MAX, &u), -1);
  CU_ASSERT_EQUAL(wd_parse_uint("18446744073709551615", 0, UINT64_MAX, &u), 0);
  CU_ASSERT_EQUAL(u, UINT64_MAX);

  int b = -1;
  const char *yes[] = {"1", "true", "YES", "On"}, *no[] = {"0", "False", "no", "OFF"};
  for (int i = 0; i < 4; i++) {
    CU_ASSERT_EQUAL(wd_parse_bool(yes[i], &b), 0);
    CU_ASSERT_EQUAL(b, 1);
    CU_ASSERT_EQUAL(wd_parse_bool(no[i], &b), 0);
    CU_ASSERT_EQUAL(b, 0);
  }
  CU_ASSERT_EQUAL(wd_parse_bool("2", &b), -1);
  CU_ASSERT_EQUAL(wd_parse_bool("maybe", &b), -1);
  CU_ASSERT_EQUAL(wd_parse_bool("", &b), -1);

  int m = 0;
  CU_ASSERT_EQUAL(wd_parse_mask("0x65f", &m), 0);
  CU_ASSERT_EQUAL(m, 0x65f);
  CU_ASSERT_EQUAL(wd_parse_mask("1631", &m), 0);
  CU_ASSERT_EQUAL(m, 1631);
  CU_ASSERT_EQUAL(wd_parse_mask("0XFFFF", &m), 0); /* v7: KernelPhase is 1 << 15 */
  CU_ASSERT_EQUAL(m, 0xffff);
  const char *badm[] = {"0", "0x0", "0x10000", "65536", "-1", "0x", "0xZZ", "12abc", "", "0x1g"};
  for (size_t i = 0; i < sizeof badm / sizeof badm[0]; i++) {
    m = 99;
    CU_ASSERT_EQUAL(wd_parse_mask(badm[i], &m), -1);
    CU_ASSERT_EQUAL(m, 99);
  }
}

static void test_signal_parse(void) {
  int s = -1;
  CU_ASSERT_EQUAL(wd_parse_signal("SIGUSR1", &s), 0);
  CU_ASSERT_EQUAL(s, SIGUSR1);
  CU_ASSERT_EQUAL(wd_parse_signal("USR2", &s), 0);
  CU_ASSERT_EQUAL(s, SIGUSR2);
  CU_ASSERT_EQUAL(wd_parse_signal("sigterm", &s), 0);
  CU_ASSERT_EQUAL(s, SIGTERM);
  CU_ASSERT_EQUAL(wd_parse_signal("12", &s), 0);
  CU_ASSERT_EQUAL(s, 12);
  CU_ASSERT_EQUAL(wd_parse_signal("none", &s), 0);
  CU_ASSERT_EQUAL(s, 0);
  s = -1;
  CU_ASSERT_EQUAL(wd_parse_signal("0", &s), 0);
  CU_ASSERT_EQUAL(s, 0);
  CU_ASSERT_EQUAL(wd_parse_signal("SIGRTMIN+3", &s), 0);
  CU_ASSERT_EQUAL(s, SIGRTMIN + 3);
  CU_ASSERT_EQUAL(wd_parse_signal("RTMIN", &s), 0);
  CU_ASSERT_EQUAL(s, SIGRTMIN);
  CU_ASSERT_EQUAL(wd_parse_signal("SIGRTMAX", &s), 0);
  CU_ASSERT_EQUAL(s, SIGRTMAX);
  CU_ASSERT_EQUAL(wd_parse_signal("SIGRTMAX-2", &s), 0);
  CU_ASSERT_EQUAL(s, SIGRTMAX - 2);

  const char *bad[] = {"SIGKILL", "KILL", "9", "SIGSTOP", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL",
                       "SIGABRT", "6", "SIGFOO", "", "65", "-1", "SIGRTMIN-1", "SIGRTMAX+1",
                       "SIGRTMIN+99", "SIGRTMIN+", "SIGRTMIN+ 3", "32", "33", "USR1x", "10abc"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    s = 1234;
    CU_ASSERT_EQUAL(wd_parse_signal(bad[i], &s), -1);
    CU_ASSERT_EQUAL(s, 1234);
  }
  char n[32];
  CU_ASSERT_STRING_EQUAL(wd_signal_name(SIGUSR1, n, sizeof n), "SIGUSR1");
  CU_ASSERT_STRING_EQUAL(wd_signal_name(0, n, sizeof n), "none");
  CU_ASSERT_STRING_EQUAL(wd_signal_name(SIGRTMIN + 3, n, sizeof n), "SIGRTMIN+3");
  CU_ASSERT_STRING_EQUAL(wd_signal_name(SIGRTMIN, n, sizeof n), "SIGRTMIN");
  CU_ASSERT_STRING_EQUAL(wd_signal_name(SIGABRT, n, sizeof n), "SIGABRT");
  CU_ASSERT_STRING_EQUAL(wd_signal_name(SIGIO, n, sizeof n), "SIGIO");
  CU_ASSERT_STRING_EQUAL(wd_signal_name(200, n, sizeof n), "signal 200");
  /* Round trip through the parser for every nameable signal we accept. */
  for (int sig = 1; sig <= SIGRTMAX; sig++) {
    int back = -1;
    if (wd_parse_signal(wd_signal_name(sig, n, sizeof n), &back) == 0) CU_ASSERT_EQUAL(back, sig);
  }
}

/* ---- loading from the environment ---- */

static void test_defaults(void) {
  wd_config c;
  reset();
  wd_config_load(&c, fake_getenv, capture_warn);
  CU_ASSERT_EQUAL(nwarn, 0);
  CU_ASSERT_EQUAL(c.enable, 1);
  CU_ASSERT_EQUAL(c.timeout_ns, 300 * NS_S);
  CU_ASSERT_EQUAL(c.poll_ns, NS_S);
  CU_ASSERT_EQUAL(c.unreached_timeout_ns, 0);
  CU_ASSERT_STRING_EQUAL(c.dump_dir, "");
  CU_ASSERT_EQUAL(c.ring_size, 8192);
  CU_ASSERT_EQUAL(c.proxy_ring_size, 8192);
  CU_ASSERT_EQUAL(c.max_events, 65536);
  CU_ASSERT_EQUAL(c.signal, SIGUSR1);
  CU_ASSERT_EQUAL(c.bt_signal, SIGRTMIN + 3);
  CU_ASSERT_EQUAL(c.action, WD_ACTION_DUMP);
  CU_ASSERT_EQUAL(c.event_mask, WD_DEFAULT_EVENT_MASK);
  CU_ASSERT_EQUAL(c.backtrace, 1);
  CU_ASSERT_EQUAL(c.bt_wait_ns, 500 * NS_MS);
  CU_ASSERT_EQUAL(c.peer_dumps, 1);
  CU_ASSERT_EQUAL(c.max_dumps, 32);
  wd_config d;
  wd_config_defaults(&d);
  CU_ASSERT(cfg_equal(&c, &d));
}

static void test_good_values(void) {
  wd_config c;
  reset();
  put("NCCL_WATCHDOG_ENABLE", "0");
  put("NCCL_WATCHDOG_TIMEOUT", "5m");
  put("NCCL_WATCHDOG_POLL", "250ms");
  put("NCCL_WATCHDOG_UNREACHED_TIMEOUT", "1h");
  put("NCCL_WATCHDOG_DUMP_DIR", "/scratch/dumps");
  put("NCCL_WATCHDOG_RING_SIZE", "1024");
  put("NCCL_WATCHDOG_PROXY_RING_SIZE", "65536");
  put("NCCL_WATCHDOG_MAX_EVENTS", "70000");
  put("NCCL_WATCHDOG_SIGNAL", "USR2");
  put("NCCL_WATCHDOG_BACKTRACE_SIGNAL", "SIGRTMIN+5");
  put("NCCL_WATCHDOG_ACTION", "ABORT");
  put("NCCL_WATCHDOG_EVENT_MASK", "0x2");
  put("NCCL_WATCHDOG_BACKTRACE", "off");
  put("NCCL_WATCHDOG_BACKTRACE_WAIT", "2s");
  put("NCCL_WATCHDOG_PEER_DUMPS", "no");
  put("NCCL_WATCHDOG_MAX_DUMPS", "5");
  wd_config_load(&c, fake_getenv, capture_warn);
  CU_ASSERT_EQUAL(nwarn, 0);
  CU_ASSERT_EQUAL(c.enable, 0);
  CU_ASSERT_EQUAL(c.timeout_ns, 300 * NS_S);
  CU_ASSERT_EQUAL(c.poll_ns, 250 * NS_MS);
  CU_ASSERT_EQUAL(c.unreached_timeout_ns, 3600 * NS_S);
  CU_ASSERT_STRING_EQUAL(c.dump_dir, "/scratch/dumps");
  CU_ASSERT_EQUAL(c.ring_size, 1024);
  CU_ASSERT_EQUAL(c.proxy_ring_size, 65536);
  CU_ASSERT_EQUAL(c.max_events, 70000);
  CU_ASSERT_EQUAL(c.signal, SIGUSR2);
  CU_ASSERT_EQUAL(c.bt_signal, SIGRTMIN + 5);
  CU_ASSERT_EQUAL(c.action, WD_ACTION_ABORT);
  CU_ASSERT_EQUAL(c.event_mask, 2);
  CU_ASSERT_EQUAL(c.backtrace, 0);
  CU_ASSERT_EQUAL(c.bt_wait_ns, 2 * NS_S);
  CU_ASSERT_EQUAL(c.peer_dumps, 0);
  CU_ASSERT_EQUAL(c.max_dumps, 5);
}

/* One bad value: exactly one warning, equal to expect, and the default kept. */
typedef struct {
  const char *name, *val, *expect;
} bad_case;

static void check_bad(const bad_case *bc, size_t n) {
  wd_config c, d;
  wd_config_defaults(&d);
  for (size_t i = 0; i < n; i++) {
    load1(&c, bc[i].name, bc[i].val);
    CU_ASSERT_EQUAL(nwarn, 1);
    if (nwarn != 1 || strcmp(warns[0], bc[i].expect) != 0)
      fprintf(stderr, "\n  case %s=\"%s\": %d warnings, first: %s\n  expected: %s\n", bc[i].name,
              bc[i].val, nwarn, nwarn ? warns[0] : "(none)", bc[i].expect);
    CU_ASSERT_STRING_EQUAL(warns[0], bc[i].expect);
    CU_ASSERT(cfg_equal(&c, &d));
  }
}

static void test_bad_durations(void) {
  static const bad_case bc[] = {
      {"NCCL_WATCHDOG_TIMEOUT", "abc",
       "NCCL_WATCHDOG_TIMEOUT=\"abc\" is not a duration (expected 300, 2.5, 500ms, 30s, 5m, 1h); using 300s"},
      {"NCCL_WATCHDOG_TIMEOUT", "-5",
       "NCCL_WATCHDOG_TIMEOUT=\"-5\" is negative; using 300s"},
      {"NCCL_WATCHDOG_TIMEOUT", "",
       "NCCL_WATCHDOG_TIMEOUT=\"\" is empty (expected 300, 2.5, 500ms, 30s, 5m, 1h); using 300s"},
      {"NCCL_WATCHDOG_TIMEOUT", "30sec",
       "NCCL_WATCHDOG_TIMEOUT=\"30sec\" is not a duration (expected 300, 2.5, 500ms, 30s, 5m, 1h); using 300s"},
      {"NCCL_WATCHDOG_TIMEOUT", "nan",
       "NCCL_WATCHDOG_TIMEOUT=\"nan\" is not a duration (expected 300, 2.5, 500ms, 30s, 5m, 1h); using 300s"},
      {"NCCL_WATCHDOG_TIMEOUT", "0",
       "NCCL_WATCHDOG_TIMEOUT=\"0\" is out of range (1ms..720h); using 300s"},
      {"NCCL_WATCHDOG_TIMEOUT", "721h",
       "NCCL_WATCHDOG_TIMEOUT=\"721h\" is out of range (1ms..720h); using 300s"},
      {"NCCL_WATCHDOG_TIMEOUT", "99999999999999999999h",
       "NCCL_WATCHDOG_TIMEOUT=\"99999999999999999999h\" is not a duration (expected 300, 2.5, 500ms, 30s, 5m, 1h); using 300s"},
      {"NCCL_WATCHDOG_POLL", "5ms",
       "NCCL_WATCHDOG_POLL=\"5ms\" is out of range (10ms..60s); using 1s"},
      {"NCCL_WATCHDOG_POLL", "2m",
       "NCCL_WATCHDOG_POLL=\"2m\" is out of range (10ms..60s); using 1s"},
      {"NCCL_WATCHDOG_POLL", "1,5",
       "NCCL_WATCHDOG_POLL=\"1,5\" is not a duration (expected 300, 2.5, 500ms, 30s, 5m, 1h); using 1s"},
      {"NCCL_WATCHDOG_UNREACHED_TIMEOUT", "soon",
       "NCCL_WATCHDOG_UNREACHED_TIMEOUT=\"soon\" is not a duration (expected 0, 300, 2.5, 500ms, 30s, 5m, 1h); using 0 (off)"},
      {"NCCL_WATCHDOG_UNREACHED_TIMEOUT", "1000h",
       "NCCL_WATCHDOG_UNREACHED_TIMEOUT=\"1000h\" is out of range (0 or 1ms..720h); using 0 (off)"},
      {"NCCL_WATCHDOG_UNREACHED_TIMEOUT", "10s",
       "NCCL_WATCHDOG_UNREACHED_TIMEOUT=10s is shorter than NCCL_WATCHDOG_TIMEOUT=300s (it must be 0 or at least the timeout); using 0 (off)"},
      {"NCCL_WATCHDOG_BACKTRACE_WAIT", "1ms",
       "NCCL_WATCHDOG_BACKTRACE_WAIT=\"1ms\" is out of range (10ms..60s); using 500ms"},
      {"NCCL_WATCHDOG_BACKTRACE_WAIT", "-1ms",
       "NCCL_WATCHDOG_BACKTRACE_WAIT=\"-1ms\" is negative; using 500ms"},
  };
  check_bad(bc, sizeof bc / sizeof bc[0]);
}

static void test_bad_integers(void) {
  static const bad_case bc[] = {
      {"NCCL_WATCHDOG_RING_SIZE", "8",
       "NCCL_WATCHDOG_RING_SIZE=\"8\" is out of range (16..1048576); using 8192"},
      {"NCCL_WATCHDOG_RING_SIZE", "2000000",
       "NCCL_WATCHDOG_RING_SIZE=\"2000000\" is out of range (16..1048576); using 8192"},
      {"NCCL_WATCHDOG_RING_SIZE", "-1",
       "NCCL_WATCHDOG_RING_SIZE=\"-1\" is negative; using 8192"},
      {"NCCL_WATCHDOG_RING_SIZE", "12abc",
       "NCCL_WATCHDOG_RING_SIZE=\"12abc\" is not an integer; using 8192"},
      {"NCCL_WATCHDOG_RING_SIZE", "1e4",
       "NCCL_WATCHDOG_RING_SIZE=\"1e4\" is not an integer; using 8192"},
      {"NCCL_WATCHDOG_RING_SIZE", " ",
       "NCCL_WATCHDOG_RING_SIZE=\" \" is empty (expected an integer); using 8192"},
      {"NCCL_WATCHDOG_PROXY_RING_SIZE", "99999999999999999999999",
       "NCCL_WATCHDOG_PROXY_RING_SIZE=\"99999999999999999999999\" is too large; using 8192"},
      {"NCCL_WATCHDOG_MAX_EVENTS", "100",
       "NCCL_WATCHDOG_MAX_EVENTS=\"100\" is out of range (1024..16777216); using 65536"},
      {"NCCL_WATCHDOG_MAX_EVENTS", "many",
       "NCCL_WATCHDOG_MAX_EVENTS=\"many\" is not an integer; using 65536"},
      {"NCCL_WATCHDOG_MAX_DUMPS", "0",
       "NCCL_WATCHDOG_MAX_DUMPS=\"0\" is out of range (1..100000); using 32"},
      {"NCCL_WATCHDOG_EVENT_MASK", "0",
       "NCCL_WATCHDOG_EVENT_MASK=\"0\" is not a valid event mask (expected a non-zero decimal or 0x hex value below 0x10000); using 0x65f"},
      {"NCCL_WATCHDOG_EVENT_MASK", "0x10000",
       "NCCL_WATCHDOG_EVENT_MASK=\"0x10000\" is not a valid event mask (expected a non-zero decimal or 0x hex value below 0x10000); using 0x65f"},
      {"NCCL_WATCHDOG_EVENT_MASK", "",
       "NCCL_WATCHDOG_EVENT_MASK=\"\" is empty (expected a non-zero decimal or 0x hex value below 0x10000); using 0x65f"},
      {"NCCL_WATCHDOG_ENABLE", "maybe",
       "NCCL_WATCHDOG_ENABLE=\"maybe\" is not a boolean (expected 1/0, true/false, yes/no, on/off); using 1"},
      {"NCCL_WATCHDOG_BACKTRACE", "2",
       "NCCL_WATCHDOG_BACKTRACE=\"2\" is not a boolean (expected 1/0, true/false, yes/no, on/off, or all); using 1"},
      {"NCCL_WATCHDOG_PEER_DUMPS", "",
       "NCCL_WATCHDOG_PEER_DUMPS=\"\" is empty (expected 1/0, true/false, yes/no, on/off); using 1"},
      {"NCCL_WATCHDOG_ACTION", "kill",
       "NCCL_WATCHDOG_ACTION=\"kill\" is not an action (expected dump or abort); using dump"},
      {"NCCL_WATCHDOG_ACTION", "dumpandabort",
       "NCCL_WATCHDOG_ACTION=\"dumpandabort\" is not an action (expected dump or abort); using dump"},
  };
  check_bad(bc, sizeof bc / sizeof bc[0]);
}

static void test_bad_signals(void) {
  static const bad_case bc[] = {
      {"NCCL_WATCHDOG_SIGNAL", "SIGFOO",
       "NCCL_WATCHDOG_SIGNAL=\"SIGFOO\" is not a signal (expected a name such as SIGUSR1, a number, or none); using SIGUSR1"},
      {"NCCL_WATCHDOG_SIGNAL", "SIGKILL",
       "NCCL_WATCHDOG_SIGNAL=\"SIGKILL\" names SIGKILL, which the watchdog must not take over; using SIGUSR1"},
      {"NCCL_WATCHDOG_SIGNAL", "segv",
       "NCCL_WATCHDOG_SIGNAL=\"segv\" names SIGSEGV, which the watchdog must not take over; using SIGUSR1"},
      {"NCCL_WATCHDOG_SIGNAL", "6",
       "NCCL_WATCHDOG_SIGNAL=\"6\" names SIGABRT, which the watchdog must not take over; using SIGUSR1"},
      {"NCCL_WATCHDOG_SIGNAL", "200",
       NULL /* filled below: the range depends on SIGRTMAX */},
      {"NCCL_WATCHDOG_SIGNAL", "",
       "NCCL_WATCHDOG_SIGNAL=\"\" is empty (expected a name such as SIGUSR1, a number, or none); using SIGUSR1"},
      {"NCCL_WATCHDOG_BACKTRACE_SIGNAL", "none",
       "NCCL_WATCHDOG_BACKTRACE_SIGNAL=\"none\" cannot be none (set NCCL_WATCHDOG_BACKTRACE=0 to disable backtraces); using SIGRTMIN+3"},
      {"NCCL_WATCHDOG_BACKTRACE_SIGNAL", "SIGSTOP",
       "NCCL_WATCHDOG_BACKTRACE_SIGNAL=\"SIGSTOP\" names SIGSTOP, which the watchdog must not take over; using SIGRTMIN+3"},
      {"NCCL_WATCHDOG_BACKTRACE_SIGNAL", "SIGRTMIN+999",
       "NCCL_WATCHDOG_BACKTRACE_SIGNAL=\"SIGRTMIN+999\" is not a signal (expected a name such as SIGRTMIN+3 or a number); using SIGRTMIN+3"},
  };
  bad_case copy[sizeof bc / sizeof bc[0]];
  char expect200[200];
  snprintf(expect200, sizeof expect200,
           "NCCL_WATCHDOG_SIGNAL=\"200\" is not a signal number (1..%d); using SIGUSR1", SIGRTMAX);
  memcpy(copy, bc, sizeof bc);
  for (size_t i = 0; i < sizeof copy / sizeof copy[0]; i++)
    if (!copy[i].expect) copy[i].expect = expect200;
  check_bad(copy, sizeof copy / sizeof copy[0]);
}

static void test_signal_conflicts(void) {
  wd_config c;
  /* Explicit collision: one warning, the default backtrace signal. */
  reset();
  put("NCCL_WATCHDOG_SIGNAL", "SIGUSR2");
  put("NCCL_WATCHDOG_BACKTRACE_SIGNAL", "USR2");
  wd_config_load(&c, fake_getenv, capture_warn);
  CU_ASSERT_EQUAL(nwarn, 1);
  CU_ASSERT_STRING_EQUAL(warns[0],
                         "NCCL_WATCHDOG_BACKTRACE_SIGNAL=SIGUSR2 is the same signal as NCCL_WATCHDOG_SIGNAL; using SIGRTMIN+3");
  CU_ASSERT_EQUAL(c.signal, SIGUSR2);
  CU_ASSERT_EQUAL(c.bt_signal, SIGRTMIN + 3);

  /* The snapshot signal takes the default backtrace signal: it moves aside without a warning. */
  load1(&c, "NCCL_WATCHDOG_SIGNAL", "SIGRTMIN+3");
  CU_ASSERT_EQUAL(nwarn, 0);
  CU_ASSERT_EQUAL(c.signal, SIGRTMIN + 3);
  CU_ASSERT_EQUAL(c.bt_signal, SIGRTMIN + 4);

  /* ... and a bad backtrace value then reports the fallback it really gets. */
  reset();
  put("NCCL_WATCHDOG_SIGNAL", "SIGRTMIN+3");
  put("NCCL_WATCHDOG_BACKTRACE_SIGNAL", "KILL");
  wd_config_load(&c, fake_getenv, capture_warn);
  CU_ASSERT_EQUAL(nwarn, 1);
  CU_ASSERT_STRING_EQUAL(warns[0],
                         "NCCL_WATCHDOG_BACKTRACE_SIGNAL=\"KILL\" names SIGKILL, which the watchdog must not take over; using SIGRTMIN+4");
  CU_ASSERT_EQUAL(c.bt_signal, SIGRTMIN + 4);

  /* Explicit collision with the snapshot signal on the default backtrace signal. */
  reset();
  put("NCCL_WATCHDOG_SIGNAL", "SIGRTMIN+3");
  put("NCCL_WATCHDOG_BACKTRACE_SIGNAL", "SIGRTMIN+3");
  wd_config_load(&c, fake_getenv, capture_warn);
  CU_ASSERT_EQUAL(nwarn, 1);
  CU_ASSERT_EQUAL(c.bt_signal, SIGRTMIN + 4);

  load1(&c, "NCCL_WATCHDOG_SIGNAL", "none");
  CU_ASSERT_EQUAL(nwarn, 0);
  CU_ASSERT_EQUAL(c.signal, 0);
  CU_ASSERT_EQUAL(c.bt_signal, SIGRTMIN + 3);
}

static void test_ring_rounding(void) {
  wd_config c;
  char line[1024];
  reset();
  put("NCCL_WATCHDOG_RING_SIZE", "5000");
  put("NCCL_WATCHDOG_PROXY_RING_SIZE", "17");
  wd_config_load(&c, fake_getenv, capture_warn);
  CU_ASSERT_EQUAL(nwarn, 0); /* rounding is not a warning */
  CU_ASSERT_EQUAL(c.ring_size, 8192);
  CU_ASSERT_EQUAL(c.proxy_ring_size, 32);
  wd_config_describe(&c, line, sizeof line);
  CU_ASSERT_PTR_NOT_NULL(strstr(line, "ring_size=8192 (rounded up from 5000)"));
  CU_ASSERT_PTR_NOT_NULL(strstr(line, "proxy_ring_size=32 (rounded up from 17)"));

  load1(&c, "NCCL_WATCHDOG_RING_SIZE", "1048575");
  CU_ASSERT_EQUAL(nwarn, 0);
  CU_ASSERT_EQUAL(c.ring_size, 1048576);
  load1(&c, "NCCL_WATCHDOG_RING_SIZE", "16");
  CU_ASSERT_EQUAL(c.ring_size, 16);
  wd_config_describe(&c, line, sizeof line);
  CU_ASSERT_PTR_NULL(strstr(line, "rounded"));
}

static void test_dump_dir(void) {
  wd_config c;
  static char longdir[3000];
  memset(longdir, 'd', sizeof longdir - 1);
  longdir[0] = '/';
  load1(&c, "NCCL_WATCHDOG_DUMP_DIR", longdir);
  CU_ASSERT_EQUAL(nwarn, 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(warns[0], "NCCL_WATCHDOG_DUMP_DIR=\"/ddd"));
  CU_ASSERT_PTR_NOT_NULL(strstr(warns[0], "...\" is too long (at most 1023 bytes); using the default directory"));
  CU_ASSERT_STRING_EQUAL(c.dump_dir, "");

  load1(&c, "NCCL_WATCHDOG_DUMP_DIR", "");
  CU_ASSERT_EQUAL(nwarn, 0);
  CU_ASSERT_STRING_EQUAL(c.dump_dir, "");

  /* Exactly the longest that fits. */
  longdir[WD_PATH_MAX - 1] = '\0';
  load1(&c, "NCCL_WATCHDOG_DUMP_DIR", longdir);
  CU_ASSERT_EQUAL(nwarn, 0);
  CU_ASSERT_EQUAL(strlen(c.dump_dir), WD_PATH_MAX - 1);
}

static void test_all_bad_at_once(void) {
  /* One warning per bad variable, no more. */
  wd_config c, d;
  reset();
  put("NCCL_WATCHDOG_ENABLE", "x");
  put("NCCL_WATCHDOG_TIMEOUT", "x");
  put("NCCL_WATCHDOG_POLL", "x");
  put("NCCL_WATCHDOG_UNREACHED_TIMEOUT", "x");
  put("NCCL_WATCHDOG_RING_SIZE", "x");
  put("NCCL_WATCHDOG_PROXY_RING_SIZE", "x");
  put("NCCL_WATCHDOG_MAX_EVENTS", "x");
  put("NCCL_WATCHDOG_SIGNAL", "x");
  put("NCCL_WATCHDOG_BACKTRACE_SIGNAL", "x");
  put("NCCL_WATCHDOG_ACTION", "x");
  put("NCCL_WATCHDOG_EVENT_MASK", "x");
  put("NCCL_WATCHDOG_BACKTRACE", "x");
  put("NCCL_WATCHDOG_BACKTRACE_WAIT", "x");
  put("NCCL_WATCHDOG_PEER_DUMPS", "x");
  put("NCCL_WATCHDOG_MAX_DUMPS", "x");
  wd_config_load(&c, fake_getenv, capture_warn);
  CU_ASSERT_EQUAL(nwarn, env_n);
  for (int i = 0; i < env_n; i++) {
    char needle[128];
    snprintf(needle, sizeof needle, "%s=\"x\" ", env_names[i]);
    CU_ASSERT(warned(needle));
  }
  wd_config_defaults(&d);
  CU_ASSERT(cfg_equal(&c, &d));
}

static void test_quoting(void) {
  wd_config c;
  load1(&c, "NCCL_WATCHDOG_ACTION", "a\"b\n%s");
  CU_ASSERT_EQUAL(nwarn, 1);
  CU_ASSERT_STRING_EQUAL(warns[0],
                         "NCCL_WATCHDOG_ACTION=\"a\\\"b\\x0a%s\" is not an action (expected dump or abort); using dump");
}

/* The host name names files: only safe characters, one WARN otherwise. */
static void test_hostname(void) {
  wd_config c;
  reset();
  put("NCCL_WATCHDOG_HOSTNAME", "node-a17.rack_3");
  wd_config_load(&c, fake_getenv, capture_warn);
  CU_ASSERT_STRING_EQUAL(c.hostname, "node-a17.rack_3");
  CU_ASSERT_EQUAL(nwarn, 0);
  reset();
  put("NCCL_WATCHDOG_HOSTNAME", "../etc");
  wd_config_load(&c, fake_getenv, capture_warn);
  CU_ASSERT_STRING_EQUAL(c.hostname, "");
  CU_ASSERT_EQUAL(nwarn, 1);
  CU_ASSERT_PTR_NOT_NULL(nwarn ? strstr(warns[0], "NCCL_WATCHDOG_HOSTNAME") : NULL);
}

static void test_describe(void) {
  wd_config c;
  char line[1024];
  wd_config_defaults(&c);
  wd_config_describe(&c, line, sizeof line);
  char want[1024];
  snprintf(want, sizeof want,
           "enable=1 timeout=300s poll=1s unreached_timeout=off dump_dir=(default) "
           "ring_size=8192 proxy_ring_size=8192 max_events=65536 signal=SIGUSR1 "
           "backtrace_signal=SIGRTMIN+3 action=dump event_mask=0x65f backtrace=1 "
           "backtrace_wait=500ms peer_dumps=1 max_dumps=32 clock=coarse gpu_events=1 "
           "ring_dir=/dev/shm/nccl-watchdog-%u keep_rings=0 term_dump=1 python=1 hostname=(system) compress=peer "
           "metrics=10s metrics_dir=(ring dir) trigger_poll=5 polls peer_records=64 "
           "memory_budget=1024MiB kernelch=auto verdict=1 telemetry=1 otlp=off",
           (unsigned)geteuid());
  CU_ASSERT_STRING_EQUAL(line, want);
  /* NCCL_WATCHDOG_KERNELCH: auto, on, off (and the boolean spellings); anything else warns. */
  const char *kv[] = {"auto", " on ", "0", "yes", "maybe"};
  const int kw[] = {WD_KCH_AUTO, WD_KCH_ON, WD_KCH_OFF, WD_KCH_ON, WD_KCH_AUTO};
  for (int i = 0; i < 5; i++) {
    reset();
    put("NCCL_WATCHDOG_KERNELCH", kv[i]);
    wd_config_defaults(&c);
    wd_config_load(&c, fake_getenv, capture_warn);
    CU_ASSERT_EQUAL(c.kernelch, kw[i]);
    CU_ASSERT_EQUAL(nwarn, i == 4);
  }
  /* The automatic verdict's settings: good values taken, bad ones warn and keep the default. */
  reset();
  put("NCCL_WATCHDOG_VERDICT", "off");
  put("NCCL_WATCHDOG_VERDICT_WAIT", "3s");
  put("NCCL_WATCHDOG_VERDICT_TIMEOUT", "soon");
  put("NCCL_WATCHDOG_VERDICT_MEMORY", "-5");
  put("NCCL_WATCHDOG_ON_VERDICT", "/opt/page oncall");
  wd_config_defaults(&c);
  wd_config_load(&c, fake_getenv, capture_warn);
  CU_ASSERT_EQUAL(c.verdict, 0);
  CU_ASSERT_EQUAL(c.verdict_wait_ns, 3000 * NS_MS);
  CU_ASSERT_EQUAL(c.verdict_limit_ns, 120000 * NS_MS);
  CU_ASSERT_EQUAL(c.verdict_memory_mib, 16384);
  CU_ASSERT_STRING_EQUAL(c.on_verdict, "/opt/page oncall");
  CU_ASSERT_EQUAL(nwarn, 2);
  /* Telemetry and the OTLP export: a URL's form is checked here (libcurl has the last word). */
  const char *urls[] = {"http://collector:4318", " HTTPS://c.example/v1/metrics", "off", "collector:4318",
                        "http://", "http://a b", "ftp://c/"};
  const int url_ok[] = {1, 1, 1, 0, 0, 0, 0};
  for (int i = 0; i < 7; i++) {
    reset();
    put("NCCL_WATCHDOG_OTLP_ENDPOINT", urls[i]);
    wd_config_defaults(&c);
    wd_config_load(&c, fake_getenv, capture_warn);
    CU_ASSERT_EQUAL(nwarn, !url_ok[i]);
    CU_ASSERT_EQUAL(c.otlp_endpoint[0] != '\0', url_ok[i] && i != 2);
  }
  /* Credentials in the endpoint never reach a log line. */
  char shown[256];
  wd_url_redact("https://user:secret@c.example:4318/v1/metrics", shown, sizeof shown);
  CU_ASSERT_STRING_EQUAL(shown, "https://***@c.example:4318/v1/metrics");
  wd_url_redact("http://c:4318/a@b", shown, sizeof shown);
  CU_ASSERT_STRING_EQUAL(shown, "http://c:4318/a@b");
  wd_config_defaults(&c);
  snprintf(c.otlp_endpoint, sizeof c.otlp_endpoint, "https://u:topsecret@c.example");
  wd_config_describe(&c, line, sizeof line);
  CU_ASSERT_PTR_NULL(strstr(line, "topsecret"));
  CU_ASSERT_PTR_NOT_NULL(strstr(line, " otlp=https://***@c.example"));
  reset();
  put("NCCL_WATCHDOG_TELEMETRY", "no");
  put("NCCL_WATCHDOG_TELEMETRY_LINKS", "8");
  put("NCCL_WATCHDOG_OTLP_INTERVAL", "30s");
  put("NCCL_WATCHDOG_OTLP_TIMEOUT", "1ms");
  put("NCCL_WATCHDOG_OTLP_HEADERS", "no pairs");
  wd_config_defaults(&c);
  wd_config_load(&c, fake_getenv, capture_warn);
  CU_ASSERT_EQUAL(c.telemetry, 0);
  CU_ASSERT_EQUAL(c.telemetry_links, 512);
  CU_ASSERT_EQUAL(c.otlp_interval_ns, 30000 * NS_MS);
  CU_ASSERT_EQUAL(c.otlp_timeout_ns, 5000 * NS_MS);
  CU_ASSERT_STRING_EQUAL(c.otlp_headers, "");
  CU_ASSERT_EQUAL(nwarn, 3);
  reset();
  put("NCCL_WATCHDOG_OTLP_HEADERS", "authorization=Bearer x,x-scope=a");
  put("NCCL_WATCHDOG_TELEMETRY_LINKS", "4096");
  wd_config_defaults(&c);
  wd_config_load(&c, fake_getenv, capture_warn);
  CU_ASSERT_STRING_EQUAL(c.otlp_headers, "authorization=Bearer x,x-scope=a");
  CU_ASSERT_EQUAL(c.telemetry_links, 4096);
  CU_ASSERT_EQUAL(nwarn, 0);
  /* Captured launches followed per communicator: 0 turns the watch off; beyond the range, one
   * warning and the default. */
  CU_ASSERT_EQUAL(c.graph_launches, 8192);
  reset();
  put("NCCL_WATCHDOG_GRAPH_LAUNCHES", "0");
  wd_config_defaults(&c);
  wd_config_load(&c, fake_getenv, capture_warn);
  CU_ASSERT_EQUAL(c.graph_launches, 0);
  CU_ASSERT_EQUAL(nwarn, 0);
  reset();
  put("NCCL_WATCHDOG_GRAPH_LAUNCHES", "70000");
  wd_config_defaults(&c);
  wd_config_load(&c, fake_getenv, capture_warn);
  CU_ASSERT_EQUAL(c.graph_launches, 8192);
  CU_ASSERT_EQUAL(nwarn, 1);
  /* Ring files can be turned off. */
  reset();
  put("NCCL_WATCHDOG_RING_DIR", " off ");
  wd_config_load(&c, fake_getenv, capture_warn);
  CU_ASSERT_EQUAL(nwarn, 0);
  CU_ASSERT_EQUAL(c.ring_dir[0], '\0');
  wd_config_defaults(&c);
  c.timeout_ns = 2500 * NS_MS;
  c.poll_ns = 1500 * 1000ULL; /* 1.5 ms */
  wd_config_describe(&c, line, sizeof line);
  CU_ASSERT_PTR_NOT_NULL(strstr(line, "timeout=2500ms poll=0.0015s "));
  /* BACKTRACE=all is parsed, kept apart from 1, and described as given. */
  reset();
  put("NCCL_WATCHDOG_BACKTRACE", " ALL");
  wd_config_load(&c, fake_getenv, capture_warn);
  CU_ASSERT_EQUAL(nwarn, 0);
  CU_ASSERT_EQUAL(c.backtrace, WD_BACKTRACE_ALL);
  wd_config_describe(&c, line, sizeof line);
  CU_ASSERT_PTR_NOT_NULL(strstr(line, " backtrace=all "));
  char small[16];
  wd_config_describe(&c, small, sizeof small);
  CU_ASSERT_EQUAL(strlen(small), sizeof small - 1);
}

/* ---- the configuration file ---- */

static char cfg_path[256];

static void write_file(const char *text) {
  const char *dir = getenv("TMPDIR");
  snprintf(cfg_path, sizeof cfg_path, "%s/wd_test_config_XXXXXX", dir && *dir ? dir : "/tmp");
  int fd = mkstemp(cfg_path);
  CU_ASSERT_FATAL(fd >= 0);
  FILE *f = fdopen(fd, "w");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fputs(text, f);
  fclose(f);
}

static void test_file(void) {
  wd_config c;
  write_file("# comment line\n"
             "\n"
             "   # indented comment\n"
             "NCCL_WATCHDOG_TIMEOUT = 10m\n"
             "NCCL_WATCHDOG_POLL=200ms   # inline comment\n"
             "NCCL_WATCHDOG_DUMP_DIR = \"/data/run#3/dumps\"\n"
             "NCCL_WATCHDOG_RING_SIZE = 100\n"
             "NCCL_WATCHDOG_ACTION = abort\n"
             "NCCL_WATCHDOG_SIGNAL = SIGUSR2\n"
             "NCCL_WATCHDOG_TYPO = 1\n"
             "this line has no equals sign\n"
             " = value without a key\n"
             "NCCL_WATCHDOG_MAX_DUMPS = lots\n"
             "NCCL_WATCHDOG_BACKTRACE = 1\n"
             "NCCL_WATCHDOG_BACKTRACE = 0\n"
             "\tNCCL_WATCHDOG_PEER_DUMPS\t=\toff\t\n"
             "NCCL_WATCHDOG_EVENT_MASK = 0\n"
             "NCCL_WATCHDOG_CONFIG = /elsewhere\n"
             "NCCL_WATCHDOG_MAX_EVENTS = 4096"); /* no final newline */
  reset();
  put("NCCL_WATCHDOG_CONFIG", cfg_path);
  put("NCCL_WATCHDOG_ACTION", "dump");       /* the environment wins */
  put("NCCL_WATCHDOG_EVENT_MASK", "0x6");    /* ... so the file's bad 0 is never reported */
  wd_config_load(&c, fake_getenv, capture_warn);
  CU_ASSERT_EQUAL(c.timeout_ns, 600 * NS_S);
  CU_ASSERT_EQUAL(c.poll_ns, 200 * NS_MS);
  CU_ASSERT_STRING_EQUAL(c.dump_dir, "/data/run#3/dumps");
  CU_ASSERT_EQUAL(c.ring_size, 128);
  CU_ASSERT_EQUAL(c.action, WD_ACTION_DUMP);
  CU_ASSERT_EQUAL(c.signal, SIGUSR2);
  CU_ASSERT_EQUAL(c.max_dumps, 32);
  CU_ASSERT_EQUAL(c.backtrace, 0); /* the last line wins */
  CU_ASSERT_EQUAL(c.peer_dumps, 0);
  CU_ASSERT_EQUAL(c.event_mask, 6);
  CU_ASSERT_EQUAL(c.max_events, 4096);

  char e[6][512];
  snprintf(e[0], sizeof e[0], "%s:10: unknown key \"NCCL_WATCHDOG_TYPO\" ignored", cfg_path);
  snprintf(e[1], sizeof e[1], "%s:11: malformed line ignored (expected KEY = value)", cfg_path);
  snprintf(e[2], sizeof e[2], "%s:12: malformed line ignored (expected KEY = value)", cfg_path);
  snprintf(e[3], sizeof e[3], "%s:18: NCCL_WATCHDOG_CONFIG cannot be set in the configuration file; ignored", cfg_path);
  snprintf(e[4], sizeof e[4],
           "NCCL_WATCHDOG_MAX_DUMPS=\"lots\" (from %s:13) is not an integer; using 32", cfg_path);
  CU_ASSERT_EQUAL(nwarn, 5);
  for (int i = 0; i < 5; i++) {
    if (!warned(e[i])) fprintf(stderr, "\n  missing warning: %s\n", e[i]);
    CU_ASSERT(warned(e[i]));
  }
  unlink(cfg_path);
}

static void test_file_missing(void) {
  wd_config c, d;
  reset();
  put("NCCL_WATCHDOG_CONFIG", "/nonexistent/nccl-watchdog.conf");
  put("NCCL_WATCHDOG_TIMEOUT", "20s");
  wd_config_load(&c, fake_getenv, capture_warn);
  CU_ASSERT_EQUAL(nwarn, 1);
  CU_ASSERT_STRING_EQUAL(warns[0],
                         "NCCL_WATCHDOG_CONFIG=\"/nonexistent/nccl-watchdog.conf\" cannot be opened "
                         "(No such file or directory); using the environment and defaults only");
  CU_ASSERT_EQUAL(c.timeout_ns, 20 * NS_S);
  /* An empty name means no file, silently. */
  reset();
  put("NCCL_WATCHDOG_CONFIG", "");
  wd_config_load(&c, fake_getenv, capture_warn);
  CU_ASSERT_EQUAL(nwarn, 0);
  wd_config_defaults(&d);
  CU_ASSERT(cfg_equal(&c, &d));
}

static void test_file_long_lines(void) {
  wd_config c;
  static char text[12000];
  char *p = text;
  p += sprintf(p, "NCCL_WATCHDOG_DUMP_DIR = /");
  for (int i = 0; i < 2000; i++) *p++ = 'a';
  p += sprintf(p, "\nNCCL_WATCHDOG_TYPO2 = ");
  for (int i = 0; i < 5000; i++) *p++ = 'b';
  sprintf(p, "\nNCCL_WATCHDOG_TIMEOUT = 42s\n");
  write_file(text);
  load1(&c, "NCCL_WATCHDOG_CONFIG", cfg_path);
  CU_ASSERT_EQUAL(c.timeout_ns, 42 * NS_S); /* the line after an overlong one is still read */
  CU_ASSERT_STRING_EQUAL(c.dump_dir, "");
  CU_ASSERT_EQUAL(nwarn, 2);
  CU_ASSERT(warned("NCCL_WATCHDOG_DUMP_DIR=\"/aaa"));
  CU_ASSERT(warned("is too long"));
  CU_ASSERT(warned(":2: line longer than 4095 bytes ignored"));
  unlink(cfg_path);
}

/* ---- logging ---- */

static int log_calls;
static int log_level;
static unsigned long log_flags;
static char log_msg[2048];

static void fake_logger(wd_log_level level, unsigned long flags, const char *file, int line,
                        const char *fmt, ...) {
  (void)file;
  (void)line;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(log_msg, sizeof log_msg, fmt, ap);
  va_end(ap);
  log_level = level;
  log_flags = flags;
  log_calls++;
}

static void other_logger(wd_log_level level, unsigned long flags, const char *file, int line,
                         const char *fmt, ...) {
  (void)level, (void)flags, (void)file, (void)line, (void)fmt;
  CU_FAIL("the second logger must not replace the first");
}

/* Run fn with stderr redirected to a file; returns what it wrote. */
static void capture_stderr(void (*fn)(void), char *out, size_t len) {
  FILE *tmp = tmpfile();
  CU_ASSERT_PTR_NOT_NULL_FATAL(tmp);
  fflush(stderr);
  int saved = dup(2);
  dup2(fileno(tmp), 2);
  fn();
  dup2(saved, 2);
  close(saved);
  rewind(tmp);
  size_t n = fread(out, 1, len - 1, tmp);
  out[n] = '\0';
  fclose(tmp);
}

static void log_three(void) {
  WD_WARN("warn %d", 1);
  WD_INFO("info %d", 2);
  WD_TRACE("trace %d", 3);
}

static void test_log_stderr(void) {
  char out[4096], expect[256];
  wd_log_reset();
  unsetenv("NCCL_DEBUG");
  capture_stderr(log_three, out, sizeof out);
  snprintf(expect, sizeof expect, "nccl-watchdog: [%d] WARN warn 1\n", (int)getpid());
  CU_ASSERT_STRING_EQUAL(out, expect);

  setenv("NCCL_DEBUG", "INFO", 1);
  capture_stderr(log_three, out, sizeof out);
  snprintf(expect, sizeof expect, "nccl-watchdog: [%d] WARN warn 1\nnccl-watchdog: [%d] INFO info 2\n",
           (int)getpid(), (int)getpid());
  CU_ASSERT_STRING_EQUAL(out, expect);

  setenv("NCCL_DEBUG", "TRACE", 1);
  capture_stderr(log_three, out, sizeof out);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "TRACE trace 3\n"));
  unsetenv("NCCL_DEBUG");
}

static void log_long(void) {
  char big[3000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  WD_WARN("%s", big);
}

static void test_log_truncation(void) {
  char out[4096];
  wd_log_reset();
  capture_stderr(log_long, out, sizeof out);
  size_t n = strlen(out);
  CU_ASSERT(n > 1000 && n < 1100);
  CU_ASSERT(n >= 5 && strcmp(out + n - 4, "...\n") == 0);
}

static void test_log_logger(void) {
  wd_log_reset();
  wd_log_set_logger(NULL); /* ignored */
  wd_log_set_logger(fake_logger);
  wd_log_set_logger(other_logger); /* the first wins */
  log_calls = 0;
  WD_INFO("value %s", "100%s%n"); /* a '%' in the text must not be interpreted */
  CU_ASSERT_EQUAL(log_calls, 1);
  CU_ASSERT_EQUAL(log_level, WD_LOG_INFO);
  CU_ASSERT_EQUAL(log_flags, WD_LOG_SUBSYS);
  CU_ASSERT_STRING_EQUAL(log_msg, "value 100%s%n");

  /* No warn callback: config warnings go through the logger. The real environment is used, so
   * an unknown NCCL_WATCHDOG_ variable is named. */
  wd_config c;
  setenv("NCCL_WATCHDOG_TIMOUT", "5", 1);
  setenv("NCCL_WATCHDOG_POLL", "fast", 1);
  log_calls = 0;
  nwarn = 0;
  wd_config_load(&c, NULL, capture_warn);
  CU_ASSERT_EQUAL(nwarn, 2);
  CU_ASSERT(warned("unknown variable NCCL_WATCHDOG_TIMOUT ignored"));
  CU_ASSERT(warned("NCCL_WATCHDOG_POLL=\"fast\" is not a duration"));
  wd_config_load(&c, NULL, NULL);
  CU_ASSERT_EQUAL(log_calls, 2);
  CU_ASSERT_EQUAL(log_level, WD_LOG_WARN);
  unsetenv("NCCL_WATCHDOG_TIMOUT");
  unsetenv("NCCL_WATCHDOG_POLL");

  wd_log_reset();
  log_calls = 0;
  char out[256];
  capture_stderr(log_three, out, sizeof out);
  CU_ASSERT_EQUAL(log_calls, 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "WARN warn 1"));
}

/* ---- GPU identity without a loaded driver ---- */

static void test_gpu_no_driver(void) {
  char buf[WD_UUID_LEN];
  memset(buf, 'z', sizeof buf);
  wd_gpu_uuid(buf, sizeof buf);
  /* This test never loads libcuda, and the plugin never loads it itself. */
  CU_ASSERT_STRING_EQUAL(buf, "");
  CU_ASSERT_EQUAL(wd_gpu_device(), -1);
  wd_gpu_uuid(NULL, 10); /* must not crash */
  wd_gpu_uuid(buf, 0);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  CU_pSuite p = CU_add_suite("parsers", NULL, NULL);
  CU_add_test(p, "duration valid", test_duration_valid);
  CU_add_test(p, "duration invalid", test_duration_invalid);
  CU_add_test(p, "uint bool mask", test_uint_bool_mask);
  CU_add_test(p, "signals", test_signal_parse);
  CU_pSuite l = CU_add_suite("load", NULL, NULL);
  CU_add_test(l, "defaults", test_defaults);
  CU_add_test(l, "good values", test_good_values);
  CU_add_test(l, "bad durations", test_bad_durations);
  CU_add_test(l, "bad integers, masks, booleans, actions", test_bad_integers);
  CU_add_test(l, "bad signals", test_bad_signals);
  CU_add_test(l, "signal conflicts", test_signal_conflicts);
  CU_add_test(l, "ring rounding", test_ring_rounding);
  CU_add_test(l, "dump dir", test_dump_dir);
  CU_add_test(l, "all bad at once", test_all_bad_at_once);
  CU_add_test(l, "quoting", test_quoting);
  CU_add_test(l, "describe", test_describe);
  CU_add_test(l, "hostname", test_hostname);
  CU_pSuite f = CU_add_suite("file", NULL, NULL);
  CU_add_test(f, "file", test_file);
  CU_add_test(f, "missing file", test_file_missing);
  CU_add_test(f, "long lines", test_file_long_lines);
  CU_pSuite g = CU_add_suite("log", NULL, NULL);
  CU_add_test(g, "stderr fallback", test_log_stderr);
  CU_add_test(g, "truncation", test_log_truncation);
  CU_add_test(g, "logger", test_log_logger);
  CU_pSuite u = CU_add_suite("gpu", NULL, NULL);
  CU_add_test(u, "no driver", test_gpu_no_driver);
  return wd_test_run();
}
