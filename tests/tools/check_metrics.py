#!/usr/bin/python3
"""Parse a metrics file of the plugin with the Prometheus client library's own text parser and
check it against what the test host did (scenario.metrics).

usage: check_metrics.py FILE KEY=VALUE...
  KEY is metric[label=value,...] (labels besides the process labels), VALUE a number; a value
  written >=N means at least N. Exit 0 when every check holds, 1 otherwise, 77 when the parser
  (Debian's python3-prometheus-client) is not installed.
"""
import re
import sys

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("check_metrics.py: prometheus_client is not installed; skipped")
    sys.exit(77)


def main():
    path, checks = sys.argv[1], sys.argv[2:]
    text = open(path).read()
    samples, families = [], {}
    for fam in text_string_to_metric_families(text):  # raises on a malformed file
        families[fam.name] = fam.type
        samples.extend(fam.samples)
    ok = True
    for want in ("nccl_watchdog_info", "nccl_watchdog_ops_enqueued", "nccl_watchdog_ops_completed",
                 "nccl_watchdog_ops_inflight", "nccl_watchdog_seconds_since_progress",
                 "nccl_watchdog_stalls_detected", "nccl_watchdog_dumps_written",
                 "nccl_watchdog_events_dropped"):
        if want not in families:
            print("missing family %s (have %s)" % (want, sorted(families)))
            ok = False
    for s in samples:
        for key in ("host", "pid", "rank"):
            if key not in s.labels:
                print("sample %s lacks the %s label" % (s.name, key))
                ok = False
    for check in checks:
        m = re.match(r"^(\w+)\[([^\]]*)\]=(>=)?([0-9.]+)$", check)
        if not m:
            sys.exit("bad check %s" % check)
        name, labels, atleast, value = m.group(1), m.group(2), m.group(3), float(m.group(4))
        want = dict(kv.split("=", 1) for kv in labels.split(",") if kv)
        got = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in want.items())]
        if len(got) != 1 or (got[0] < value if atleast else got[0] != value):
            print("check %s: got %s" % (check, got))
            ok = False
    print("check_metrics.py: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
