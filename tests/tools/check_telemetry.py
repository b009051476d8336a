#!/usr/bin/env python3
"""Checks that one link of a communicator is the outlier in the telemetry, as the Prometheus
file says it (parsed by the Prometheus client library's own parser) and as an OTLP receiver
decoded it (tests/otlp/receiver.js: OpenTelemetry's own protocol definitions).

    check_telemetry.py PROM OTLP_JSONL COMM_NAME SLOW_CHANNEL MIN_COLLS

The slow channel's links (both directions) must be the slowest of the communicator, at under
half the median throughput of the others and with over twice their median step time; the
collectives' duration histogram must have counted at least MIN_COLLS AllReduces. Exit 0 when
all holds, 1 with the reasons, 77 when the Prometheus parser is missing.
"""
import json
import statistics
import sys

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("check_telemetry: python3-prometheus-client is missing")
    sys.exit(77)

problems = []


def check(cond, msg):
    if not cond:
        problems.append(msg)
    return cond


def outlier(kind, rates, steps, slow):
    """rates, steps: {(channel, direction): value}. The slow channel's links are the low ones."""
    fast = {k: v for k, v in rates.items() if k[0] != slow}
    slowr = {k: v for k, v in rates.items() if k[0] == slow}
    if not check(fast and len(slowr) == 2, f"{kind}: links {sorted(rates)}: expected the slow channel {slow} in both directions and others"):
        return
    med = statistics.median(fast.values())
    for k, v in slowr.items():
        check(v < 0.5 * med, f"{kind}: slow link {k} throughput {v:.3g} B/s not under half the others' median {med:.3g}")
        check(v < min(fast.values()), f"{kind}: slow link {k} is not the slowest ({v:.3g} vs {min(fast.values()):.3g})")
    fs = [steps[k] for k in fast if k in steps]
    for k in slowr:
        if check(k in steps and fs, f"{kind}: no step time for {k}"):
            check(steps[k] > 2 * statistics.median(fs),
                  f"{kind}: slow link {k} step time {steps[k]:.3g} s not over twice the median {statistics.median(fs):.3g}")
    print(f"{kind}: slow channel {slow}: " + ", ".join(f"{k[1]} {v / 1e6:.1f} MB/s" for k, v in sorted(slowr.items()))
          + f"; the other links' median {med / 1e6:.1f} MB/s")


def prom(path, comm, slow, min_colls):
    with open(path) as f:
        text = f.read()
    rates, step_s, steps = {}, {}, {}
    colls = 0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            l = s.labels
            if l.get("comm_name") not in (None, comm):
                continue
            key = (int(l["channel"]), l["direction"]) if l.get("channel", "") != "" else None
            if s.name == "nccl_watchdog_link_throughput_bytes_per_second" and key:
                rates[key] = s.value
            elif s.name == "nccl_watchdog_link_step_seconds_total" and key:
                step_s[key] = s.value
            elif s.name == "nccl_watchdog_link_steps_total" and key:
                steps[key] = s.value
            elif s.name == "nccl_watchdog_collective_duration_seconds_count" and l.get("func") == "AllReduce":
                check(l.get("size_class") == "1MiB-16MiB", f"prometheus: AllReduce of 4 MiB in size class {l.get('size_class')}")
                colls += s.value
    mean = {k: step_s[k] / steps[k] for k in step_s if steps.get(k)}
    outlier("prometheus", rates, mean, slow)
    check(colls >= min_colls, f"prometheus: {colls} AllReduces in the duration histogram, expected >= {min_colls}")
    check("nccl_watchdog_arrival_wait_seconds{" in text, "prometheus: no arrival wait series")


def attrs(point):
    out = {}
    for kv in point.get("attributes", []):
        v = kv.get("value", {})
        out[kv["key"]] = v.get("stringValue", v.get("intValue"))
    return out


def otlp(path, comm, slow, min_colls):
    reqs = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if not check("error" not in r, f"otlp: a request did not decode: {r.get('error')}"):
                continue
            reqs.append(r)
    if not check(reqs, "otlp: the receiver got no request"):
        return
    for r in reqs:
        check(r["path"] == "/v1/metrics", f"otlp: request to {r['path']}, expected /v1/metrics")
        check(r["contentType"] == "application/x-protobuf", f"otlp: content type {r['contentType']}")
    last = reqs[-1]["request"]
    rm = last["resourceMetrics"][0]
    res = attrs(rm["resource"])
    check(res.get("service.name") and res.get("host.name") and res.get("process.pid"),
          f"otlp: resource attributes {res}")
    scope = rm["scopeMetrics"][0]
    check(scope["scope"]["name"] == "nccl-watchdog", "otlp: scope name")
    metrics = {m["name"]: m for m in scope["metrics"]}
    rates, step_s, steps = {}, {}, {}
    for name, dst in (("nccl.watchdog.link.throughput", rates), ("nccl.watchdog.link.step.time", step_s),
                      ("nccl.watchdog.link.steps", steps)):
        m = metrics.get(name)
        if not check(m, f"otlp: no metric {name}"):
            continue
        data = m.get("gauge") or m.get("sum")
        if name != "nccl.watchdog.link.throughput":
            check(m.get("sum", {}).get("isMonotonic") and m["sum"].get("aggregationTemporality") ==
                  "AGGREGATION_TEMPORALITY_CUMULATIVE", f"otlp: {name} is not a cumulative monotonic sum")
        for p in data["dataPoints"]:
            a = attrs(p)
            if a.get("nccl.comm.name") != comm:
                continue
            v = p.get("asDouble", p.get("asInt"))
            dst[(int(a["nccl.channel"]), a["network.io.direction"])] = float(v)
    check(metrics.get("nccl.watchdog.link.throughput", {}).get("unit") == "By/s", "otlp: throughput unit")
    mean = {k: step_s[k] / steps[k] for k in step_s if steps.get(k)}
    outlier("otlp", rates, mean, slow)
    h = metrics.get("nccl.watchdog.collective.duration")
    if check(h and "histogram" in h, "otlp: no collective duration histogram"):
        n = 0
        for p in h["histogram"]["dataPoints"]:
            a = attrs(p)
            check(len(p.get("bucketCounts", [])) == len(p.get("explicitBounds", [])) + 1,
                  "otlp: histogram buckets and bounds disagree")
            check(sum(int(c) for c in p["bucketCounts"]) == int(p["count"]), "otlp: bucket counts do not sum to count")
            if a.get("nccl.collective.name") == "AllReduce":
                n += int(p["count"])
        check(n >= min_colls, f"otlp: {n} AllReduces in the histogram, expected >= {min_colls}")


def main():
    if len(sys.argv) != 6:
        print(__doc__)
        return 2
    prom_path, otlp_path, comm, slow, min_colls = sys.argv[1:]
    prom(prom_path, comm, int(slow), int(min_colls))
    otlp(otlp_path, comm, int(slow), int(min_colls))
    for p in problems:
        print("check_telemetry: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
