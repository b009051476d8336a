#!/usr/bin/env python3
"""gpu.check_dumps: check_dumps.py against synthetic work dirs, so the GPU run's verdicts are
themselves tested where no GPU is. Each case builds a manifest and dumps in the documented
format (docs/dump-format.md), then expects check_dumps.py to pass or to fail saying why."""
import contextlib
import copy
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "check_dumps.py")
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import check_dumps  # noqa: E402  (in-process: a subprocess per case costs seconds on a busy box)
COMM = "0x6b8b4567327b23c6"


def comm(rank, n, enq, done, inflight=(), comm_id=COMM):
    return {"commId": comm_id, "commName": "", "rank": rank, "nranks": n, "nNodes": n,
            "seq": [{"func": "AllReduce", "lastEnqueued": enq, "lastCompleted": done}],
            "p2p": {"enqueued": 0, "completed": 0}, "inflight": list(inflight), "open": [],
            "ring": {"capacity": 8, "written": 0, "torn": 0, "lost": 0, "records": []},
            "proxyRing": {"capacity": 8, "written": 0, "torn": 0, "lost": 0, "records": []}}


def coll(seq):
    return {"slot": 3, "type": "Coll", "parentSlot": None, "status": "stalled", "stopped": True,
            "func": "AllReduce", "seq": seq, "children": [
                {"slot": 4, "type": "ProxyOp", "children": [], "state": None}]}


def dump(pid, rank, reason, comms, trigger):
    return {"format": "nccl-watchdog-dump", "version": 1, "reason": reason, "pid": pid,
            "host": "h-1", "env": {"RANK": str(rank)}, "trigger": trigger, "comms": comms,
            "threads": {"asked": 3, "answered": 3, "list": [{"tid": pid, "frames": []}] * 3}}


def stall(rank, n, seq, since=5200.0):
    return {"commId": COMM, "rank": rank, "nranks": n, "type": "Coll", "func": "AllReduce",
            "seq": seq, "sinceProgressMs": since, "waitingOn": "ProxyStep 1 in RecvWait"}


def manifest(scenario, n, skip=-1, skip_seq=-1, **kw):
    m = {"scenario": scenario, "result": "PASS", "nranks": n, "skipRank": skip,
         "skipSeq": skip_seq, "timeoutMs": 5000, "pollMs": 500, "launcherPid": 999,
         "dumpsBeforeStall": 0, "ranks": [{"rank": r, "pid": 1000 + r} for r in range(n)]}
    m.update(kw)
    return m


def skip_case(n=2, skip=1, seq=20):
    files = {}
    for r in range(n):
        pid = 1000 + r
        if r == skip:
            files[f"h-1-{pid}-0001-peer.json"] = dump(
                pid, r, "peer", [comm(r, n, seq - 1, seq - 1)],
                {"file": "trigger-h-1-1000-1.trigger", "origin": {"stalls": [stall(0, n, seq)]}})
        else:
            files[f"h-1-{pid}-0001-stall.json"] = dump(
                pid, r, "stall", [comm(r, n, seq, seq - 1, [coll(seq)])],
                {"stalls": [stall(r, n, seq)]})
    files["trigger-h-1-1000-1.trigger"] = {"host": "h-1", "pid": 1000, "stalls": []}
    return manifest("skip", n, skip, seq), files


def signal_case(scenario="signal", n=2, per=1):
    files = {}
    for r in range(n):
        pid = 1000 + r
        for k in range(per):
            comms = [comm(r, n, 5, 5)]
            if scenario == "twocomms":
                comms = [comm(r, n, 5, 5), comm(r, n, 5, 5, comm_id="0x22")] if k == 0 else \
                    [comm(r, n, 5, 5, comm_id="0x33")]
            files[f"h-1-{pid}-{k + 1:04d}-signal.json"] = dump(
                pid, r, "signal", comms, {"signal": "SIGUSR1", "senderPid": 999})
    return manifest(scenario, n), files


def write(work, m, files):
    os.makedirs(os.path.join(work, "dumps"))
    with open(os.path.join(work, "manifest.json"), "w") as f:
        json.dump(m, f)
    for name, doc in files.items():
        with open(os.path.join(work, "dumps", name), "w") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))


def fake_analyzer(tmp, suspects):
    path = os.path.join(tmp, f"analyzer-{len(os.listdir(tmp))}")
    report = {"comms": [{"commId": COMM, "summary": "test", "suspects": suspects}]}
    with open(path, "w") as f:
        f.write("#!/bin/sh\ncat <<'EOF'\n" + json.dumps(report) + "\nEOF\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    return path


def main():
    tmp = tempfile.mkdtemp(prefix="check-dumps-test.")
    good_az = fake_analyzer(tmp, [{"rank": 1, "reason": "never_enqueued"}])
    wrong_az = fake_analyzer(tmp, [{"rank": 0, "reason": "network_stall"}])
    cases = []

    def case(name, m, files, want_ok, want_text=None, analyzer=None):
        cases.append((name, m, files, want_ok, want_text, analyzer))

    case("healthy, no dumps", manifest("healthy", 2), {}, True)
    m, f = signal_case()
    case("healthy with a dump", manifest("healthy", 2), f, False, "in a healthy job")
    m, f = skip_case()
    case("skip", m, f, True, "analyzer names rank 1", good_az)
    case("skip, analyzer names another rank", m, f, False, "does not name the skipping rank 1", wrong_az)
    case("skip without analyzer", m, f, True, "analyzer not available")
    m3, f3 = skip_case(n=3, skip=1)
    case("skip with 3 ranks", m3, f3, True)
    bad = copy.deepcopy(f)
    bad["h-1-1000-0001-stall.json"]["trigger"]["stalls"][0]["seq"] = 19
    case("stall names the wrong seq", m, bad, False, "skipped one is 20")
    bad = copy.deepcopy(f)
    bad["h-1-1000-0001-stall.json"]["comms"][0]["seq"][0]["lastCompleted"] = 20
    case("stalled AllReduce counted complete", m, bad, False, "lastCompleted 20")
    bad = copy.deepcopy(f)
    bad["h-1-1000-0001-stall.json"]["trigger"]["stalls"][0]["sinceProgressMs"] = 800.0
    case("stall before the timeout", m, bad, False, "below the 5000 ms timeout")
    bad = copy.deepcopy(f)
    del bad["h-1-1001-0001-peer.json"]
    case("no peer dump", m, bad, False, "wrote no peer dump")
    bad = copy.deepcopy(f)
    del bad["h-1-1000-0001-stall.json"]
    case("no stall dump at all", m, bad, False, "no waiting rank wrote a stall dump")
    bad3 = copy.deepcopy(f3)  # rank 2 answered rank 0's trigger before its own stall was due
    d = bad3.pop("h-1-1002-0001-stall.json")
    d["reason"], d["trigger"] = "peer", {"origin": {"stalls": [stall(0, 3, 20)]}}
    bad3["h-1-1002-0001-peer.json"] = d
    case("skip with 3 ranks, one waiting rank answered first", m3, bad3, True, "answered another rank's trigger")
    d2 = copy.deepcopy(bad3)
    d2["h-1-1002-0001-peer.json"]["comms"][0]["inflight"] = []
    case("a waiting rank's peer dump without the op", m3, d2, False, "without the AllReduce in flight")
    bad = copy.deepcopy(f)
    bad["h-1-1001-0001-peer.json"]["comms"][0]["rank"] = 0
    case("wrong comm rank", m, bad, False, "says rank 0")
    bad = copy.deepcopy(f)
    bad["h-1-1000-0001-stall.json"] = '{"format": "nccl-watchdog-dump", '
    case("truncated dump", m, bad, False, "not readable JSON")
    bad = copy.deepcopy(f)
    bad["h-1-4242-0001-signal.json"] = dump(4242, 0, "signal", [comm(0, 2, 1, 1)], {})
    case("dump from a stranger", m, bad, False, "no rank of this job")
    bad = copy.deepcopy(f)
    bad["verdict-1.resumed"] = "stall episode 1 resumed after 16.0 s (host h-1, pid 1000)\n"
    case("skip, the abort called a resumed episode", m, bad, False, "resumed episode after the abort")
    m, f = signal_case()
    case("signal", m, f, True, "signal dumps from all 2 ranks")
    bad = copy.deepcopy(f)
    bad["h-1-1001-0002-signal.json"] = bad["h-1-1001-0001-signal.json"]
    case("two dumps for one signal", m, bad, False, "wrote 2 signal dumps")
    bad = copy.deepcopy(f)
    bad["h-1-1000-0001-signal.json"]["trigger"]["signal"] = "SIGUSR2"
    case("wrong signal", m, bad, False, "trigger.signal")
    m, f = signal_case("twocomms", per=2)
    case("twocomms", m, f, True)
    bad = copy.deepcopy(f)
    bad["h-1-1000-0002-signal.json"]["comms"][0]["commId"] = COMM
    case("twocomms, destroyed comm reported after reload", m, bad, False, "still reports")
    bad = copy.deepcopy(f)
    bad["h-1-1000-0001-signal.json"]["comms"].pop()
    case("twocomms, one comm missing", m, bad, False, "1 comms, expected 2")
    m, f = skip_case()
    m["scenario"], m["skipSeq"] = "graph", -1
    for name, d in f.items():
        if name.endswith(".json") and "comms" in d:
            skipper = "-peer." in name
            for c in d["comms"]:
                c["graphLaunches"] = [{"graph": 1, "launch": 1, "func": "AllReduce", "replays": 300 if skipper else 301,
                                       "state": "passed" if skipper else "inProgress", "forMs": 6000.0}]
    case("graph", m, f, True)
    bad = copy.deepcopy(f)
    for d in bad.values():
        for c in d.get("comms", []) if isinstance(d, dict) else []:
            c.pop("graphLaunches", None)
    case("graph, captured launch not followed", m, bad, False, "graphLaunches")
    m2 = dict(m, dumpsBeforeStall=2)
    case("graph, false stall during replays", m2, f, False, "during healthy graph replays")

    failed = 0
    for i, (name, m, files, want_ok, want_text, analyzer) in enumerate(cases):
        work = os.path.join(tmp, f"case{i}")
        write(work, m, files)
        args = [CHECK, work] + (["--analyzer", analyzer] if analyzer else [])
        if i == 0:  # the command line itself, once
            p = subprocess.run([sys.executable] + args, capture_output=True, text=True)
            rc, out = p.returncode, p.stdout + p.stderr
        else:
            buf = io.StringIO()
            saved, sys.argv = sys.argv, args
            try:
                with contextlib.redirect_stdout(buf):
                    rc = check_dumps.main()
            finally:
                sys.argv = saved
            out = buf.getvalue()
        ok = rc == 0
        why = None
        if ok != want_ok:
            why = f"exit {rc}, expected {'pass' if want_ok else 'fail'}"
        elif want_text and want_text not in out:
            why = f"output lacks '{want_text}'"
        if why:
            failed += 1
            print(f"FAIL: {name}: {why}\n{out}")
    print(f"gpu.check_dumps: {len(cases) - failed} of {len(cases)} cases passed")
    if failed:
        print(f"work dirs kept in {tmp}")
        return 1
    shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
