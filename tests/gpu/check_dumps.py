#!/usr/bin/env python3
"""Check the dumps of one nccl_e2e scenario against what the scenario did.

usage: check_dumps.py [--analyzer PATH] [--lib-path DIR] WORK_DIR

WORK_DIR is an nccl_e2e work dir: manifest.json (what happened: ranks, pids, skipped rank and
seq) and dumps/ (what the plugin wrote). Prints "FAIL: why" lines and exits 1 on a failure,
otherwise prints short notes and exits 0. The dump format is docs/dump-format.md.
"""
import argparse
import gzip
import json
import os
import re
import subprocess
import sys

DUMP_RE = re.compile(r"^(?P<host>.+)-(?P<pid>\d+)-(?P<seq>\d+)-(?P<reason>[a-z]+)\.json(\.gz)?$")


class Checker:
    def __init__(self, work, analyzer=None, lib_path=None):
        self.work = work
        self.dump_dir = os.path.join(work, "dumps")
        self.analyzer = analyzer
        self.lib_path = lib_path
        self.failures = []
        self.notes = []
        with open(os.path.join(work, "manifest.json")) as f:
            self.m = json.load(f)
        self.n = self.m["nranks"]
        self.rank_of_pid = {r["pid"]: r["rank"] for r in self.m["ranks"]}
        self.skip = self.m.get("skipRank", -1)
        self.dumps = []  # (name, host, pid, seq, reason, doc)
        self.triggers = []

    def fail(self, msg):
        self.failures.append(msg)

    def note(self, msg):
        self.notes.append(msg)

    # ---- loading and checks every dump must pass
    def load(self):
        # <dump dir>/<host>/<dump>.json, triggers in <dump dir>/triggers
        names = sorted(os.path.relpath(os.path.join(r, f), self.dump_dir)
                       for r, _, fs in os.walk(self.dump_dir) for f in fs
                       if os.path.basename(r) != "triggers")
        tdir = os.path.join(self.dump_dir, "triggers")  # one episode-<k>.trigger per stall episode
        if os.path.isdir(tdir):
            self.triggers = sorted(n for n in os.listdir(tdir) if n.endswith(".trigger"))
        for name in names:
            m = DUMP_RE.match(os.path.basename(name))
            if not m or os.path.basename(name).startswith("."):
                continue
            path = os.path.join(self.dump_dir, name)
            try:
                opener = gzip.open if path.endswith(".gz") else open  # peer summaries
                with opener(path, "rt") as f:
                    doc = json.load(f)
            except (OSError, ValueError) as e:
                self.fail(f"{name}: not readable JSON: {e}")
                continue
            pid, seq, reason = int(m["pid"]), int(m["seq"]), m["reason"]
            self.dumps.append((name, m["host"], pid, seq, reason, doc))
            self.check_common(name, pid, reason, doc)
        self.dumps.sort(key=lambda d: (d[2], d[3]))

    def check_common(self, name, pid, reason, doc):
        if doc.get("format") != "nccl-watchdog-dump":
            self.fail(f"{name}: format is {doc.get('format')!r}, not 'nccl-watchdog-dump'")
            return
        if doc.get("version") != 1:
            self.fail(f"{name}: version {doc.get('version')!r}, expected 1")
        if doc.get("reason") != reason:
            self.fail(f"{name}: reason {doc.get('reason')!r} does not match the file name")
        if doc.get("pid") != pid:
            self.fail(f"{name}: pid {doc.get('pid')!r} does not match the file name")
        if pid not in self.rank_of_pid:
            self.fail(f"{name}: written by pid {pid}, which is no rank of this job")
            return
        rank = self.rank_of_pid[pid]
        comms = doc.get("comms")
        if not isinstance(comms, list) or not comms:
            self.fail(f"{name}: no comms")
            return
        for c in comms:
            for key in ("commId", "rank", "nranks", "seq", "inflight", "ring"):
                if key not in c:
                    self.fail(f"{name}: a comm has no '{key}'")
                    return
            if not (isinstance(c["commId"], str) and c["commId"].startswith("0x")):
                self.fail(f"{name}: commId {c['commId']!r} is not a hex string")
            if c["nranks"] != self.n:
                self.fail(f"{name}: comm {c['commId']} has nranks {c['nranks']}, the job has {self.n}")
            if c["rank"] != rank:
                self.fail(f"{name}: comm {c['commId']} says rank {c['rank']}, pid {pid} is rank {rank}")
            # On a GPU the driver is loaded: ABI v5+ must judge progress on CUDA events.
            gpu_off = (doc.get("env") or {}).get("NCCL_WATCHDOG_GPU_EVENTS") == "0"
            if "gpuProgress" in c and c.get("abi", 0) >= 5 and not gpu_off and \
                    c["gpuProgress"] != "cudaEvents":
                self.fail(f"{name}: comm {c['commId']} judged on {c['gpuProgress']}, not CUDA events")
        env = doc.get("env") or {}
        if env.get("RANK") not in (None, str(rank)):
            self.fail(f"{name}: env RANK={env.get('RANK')} but pid {pid} is rank {rank}")
        threads = doc.get("threads")
        if not isinstance(threads, dict):
            self.fail(f"{name}: no threads section")
        elif not threads.get("disabled") and not threads.get("list"):
            self.fail(f"{name}: threads lists no thread")

    def of(self, rank, reason):
        return [d for d in self.dumps if self.rank_of_pid.get(d[2]) == rank and d[4] == reason]

    @staticmethod
    def seq_of(comm, func):
        for s in comm.get("seq", []):
            if s.get("func") == func:
                return s.get("lastEnqueued"), s.get("lastCompleted")
        return None, None

    @staticmethod
    def walk(nodes):
        for n in nodes or []:
            yield n
            yield from Checker.walk(n.get("children"))

    # ---- scenarios
    def expect_no_dumps(self):
        if self.dumps or self.triggers:
            first = (self.dumps[0][0] if self.dumps else self.triggers[0])
            self.fail(f"{len(self.dumps)} dumps and {len(self.triggers)} trigger files in a healthy "
                      f"job (first: {first})")

    def check_stall(self, check_seq):
        skip_seq = self.m.get("skipSeq", -1)
        comm_ids = {}
        stalled = 0
        for r in range(self.n):
            if r == self.skip:
                continue
            stalls = self.of(r, "stall")
            if not stalls:
                # Ranks that time out together: the one whose trigger lands first opens the
                # episode, another may answer it (a peer dump) before its own stall is due, and
                # then dumps no second time. Its peer dump must still show it inside the op.
                peers = self.of(r, "peer")
                if not peers:
                    self.fail(f"rank {r} wrote neither a stall nor a peer dump")
                    continue
                name, _, _, _, _, doc = peers[0]
                for c in doc["comms"]:
                    comm_ids[r] = c["commId"]
                    if not any(n.get("type") == "Coll" and n.get("func") == "AllReduce"
                               for n in self.walk(c.get("inflight"))):
                        self.fail(f"{name}: rank {r} answered the episode without the AllReduce in flight")
                    if check_seq:
                        enq, done = self.seq_of(c, "AllReduce")
                        if enq != skip_seq or done != skip_seq - 1:
                            self.fail(f"{name}: AllReduce lastEnqueued {enq} / lastCompleted {done}, "
                                      f"expected {skip_seq} / {skip_seq - 1}")
                self.note(f"rank {r}: answered another rank's trigger first (peer dump), AllReduce in flight")
                continue
            stalled += 1
            name, _, _, _, _, doc = stalls[0]
            found = [s for s in (doc.get("trigger") or {}).get("stalls", [])
                     if s.get("func") == "AllReduce" and s.get("rank") == r]
            if not found:
                self.fail(f"{name}: trigger.stalls names no AllReduce of rank {r}: "
                          f"{json.dumps((doc.get('trigger') or {}).get('stalls'))[:300]}")
                continue
            s = found[0]
            if s.get("nranks") != self.n:
                self.fail(f"{name}: the stall says nranks {s.get('nranks')}, the job has {self.n}")
            since = s.get("sinceProgressMs")
            if not isinstance(since, (int, float)) or since < 0.9 * self.m["timeoutMs"]:
                self.fail(f"{name}: sinceProgressMs {since} is below the {self.m['timeoutMs']} ms timeout")
            if check_seq and s.get("seq") != skip_seq:
                self.fail(f"{name}: the stalled AllReduce has seq {s.get('seq')}, the skipped one is {skip_seq}")
            comm = next((c for c in doc["comms"] if c.get("commId") == s.get("commId")), None)
            if comm is None:
                self.fail(f"{name}: the stall names comm {s.get('commId')}, which is not in comms[]")
                continue
            comm_ids[r] = comm["commId"]
            colls = [n for n in self.walk(comm.get("inflight")) if n.get("type") == "Coll"
                     and n.get("func") == "AllReduce"]
            if not colls:
                self.fail(f"{name}: no in-flight AllReduce Coll in the open trees")
            elif check_seq and not any(n.get("seq") == skip_seq for n in colls):
                self.fail(f"{name}: in-flight AllReduce seqs {[n.get('seq') for n in colls]}, "
                          f"expected {skip_seq}")
            if check_seq:
                enq, done = self.seq_of(comm, "AllReduce")
                if enq != skip_seq or done != skip_seq - 1:
                    self.fail(f"{name}: AllReduce lastEnqueued {enq} / lastCompleted {done}, "
                              f"expected {skip_seq} / {skip_seq - 1}")
            waiting = s.get("waitingOn")
            self.note(f"rank {r}: stall after {since / 1000:.2f} s without progress"
                      + (f", waiting on {waiting}" if waiting else ""))
        if not stalled:
            self.fail("no waiting rank wrote a stall dump")
        peers = self.of(self.skip, "peer")
        if not peers:
            self.fail(f"the skipping rank {self.skip} wrote no peer dump")
        else:
            name, _, _, _, _, doc = peers[0]
            trig = doc.get("trigger") or {}
            if not isinstance(trig.get("origin"), dict) or not trig["origin"].get("stalls"):
                self.fail(f"{name}: trigger.origin carries no stalls")
            for c in doc["comms"]:
                comm_ids.setdefault(self.skip, c["commId"])
                if check_seq:
                    enq, done = self.seq_of(c, "AllReduce")
                    if enq != skip_seq - 1 or done != skip_seq - 1:
                        self.fail(f"{name}: the skipping rank shows AllReduce lastEnqueued {enq} / "
                                  f"lastCompleted {done}, expected {skip_seq - 1} / {skip_seq - 1}")
                if any(n.get("type") == "Coll" for n in self.walk(c.get("inflight"))):
                    self.fail(f"{name}: the skipping rank has a Coll in flight")
        if len(set(comm_ids.values())) > 1:
            self.fail(f"the ranks disagree on the communicator id: {comm_ids}")

    def run_analyzer(self, required):
        if not self.analyzer:
            self.note("analyzer not available: culprit not cross-checked")
            return
        env = dict(os.environ)
        if self.lib_path:
            env["LD_LIBRARY_PATH"] = self.lib_path + ":" + env.get("LD_LIBRARY_PATH", "")
        try:
            p = subprocess.run([self.analyzer, "--json", self.dump_dir], capture_output=True,
                               text=True, timeout=120, env=env)
        except (OSError, subprocess.TimeoutExpired) as e:
            self.fail(f"analyzer did not run: {e}")
            return
        try:
            report = json.loads(p.stdout)
        except ValueError:
            self.fail(f"analyzer --json printed no JSON (status {p.returncode}): {p.stderr.strip()[:300]}")
            return
        suspects = [s for c in report.get("comms", []) for s in c.get("suspects", [])]
        for c in report.get("comms", []):
            if c.get("summary"):
                self.note(f"analyzer: {c['summary']}")
        ranks = [s.get("rank") for s in suspects]
        if self.skip in ranks:
            s = suspects[ranks.index(self.skip)]
            self.note(f"analyzer names rank {self.skip}: {s.get('reason')}")
            others = sorted({r for r in ranks if r != self.skip})
            if others:
                self.note(f"analyzer also lists ranks {others}")
        elif required:
            self.fail(f"the analyzer does not name the skipping rank {self.skip}; suspects: "
                      f"{json.dumps(suspects)[:300]}")
        else:
            self.note(f"analyzer does not name rank {self.skip} (suspects {ranks}); not required here")

    def check_signal(self, per_rank, comms_per_dump):
        for r in range(self.n):
            sig = self.of(r, "signal")
            if len(sig) != per_rank:
                self.fail(f"rank {r} wrote {len(sig)} signal dumps, expected {per_rank}")
                continue
            for k, (name, _, _, _, _, doc) in enumerate(sig):
                trig = doc.get("trigger") or {}
                if trig.get("signal") != "SIGUSR1":
                    self.fail(f"{name}: trigger.signal is {trig.get('signal')!r}")
                if trig.get("senderPid") not in (0, self.m.get("launcherPid")):
                    self.fail(f"{name}: senderPid {trig.get('senderPid')}, the launcher is "
                              f"{self.m.get('launcherPid')}")
                want = comms_per_dump[k] if k < len(comms_per_dump) else None
                if want is not None and len(doc["comms"]) != want:
                    self.fail(f"{name}: {len(doc['comms'])} comms, expected {want}")
        for r in range(self.n):
            for reason in ("stall", "peer"):
                if self.of(r, reason):
                    self.fail(f"rank {r} wrote a {reason} dump in a healthy job")
        first = [self.of(r, "signal")[0][5] for r in range(self.n) if self.of(r, "signal")]
        if len(first) == self.n:
            ids = [sorted(c["commId"] for c in d["comms"]) for d in first]
            if any(i != ids[0] for i in ids):
                self.fail(f"the ranks' first signal dumps name different communicators: {ids}")
            threads = min(len((d.get("threads") or {}).get("list", [])) for d in first)
            self.note(f"signal dumps from all {self.n} ranks, at least {threads} threads each")
        if per_rank >= 2:
            for r in range(self.n):
                sig = self.of(r, "signal")
                if len(sig) >= 2:
                    before = {c["commId"] for c in sig[0][5]["comms"]}
                    after = {c["commId"] for c in sig[1][5]["comms"]}
                    if before & after:
                        self.fail(f"rank {r}: the reloaded plugin still reports the destroyed "
                                  f"communicators {sorted(before & after)}")

    def check_graph_launches(self):
        """The captured launch is followed (the plugin's host node and external event records in
        the graph): every rank's dump lists it, replayed, and a replaying rank's GPU is inside it
        at the last replay while the skipping rank's replays stop one short."""
        replays = {}
        for r in range(self.n):
            docs = [d[5] for d in self.dumps if self.rank_of_pid.get(d[2]) == r]
            ls = [l for d in docs for c in d.get("comms", []) for l in c.get("graphLaunches", [])]
            if not ls:
                self.fail(f"rank {r}: no dump lists the captured launch (comms[].graphLaunches)")
                continue
            replays[r] = max(ls, key=lambda l: l.get("replays", 0))
        others = [r for r in replays if r != self.skip]
        inside = [r for r in others if replays[r].get("state") == "inProgress"]
        if others and not inside:
            self.fail(f"no replaying rank's GPU is inside the captured launch: "
                      f"{ {r: replays[r].get('state') for r in others} }")
        if self.skip in replays and others:
            top = max(replays[r].get("replays", 0) for r in others)
            if replays[self.skip].get("replays", 0) >= top:
                self.fail(f"the skipping rank {self.skip} shows {replays[self.skip].get('replays')} "
                          f"replays, the others {top}")
        if replays:
            self.note("captured launch: " + ", ".join(
                f"rank {r} {replays[r].get('state')} at replay {replays[r].get('replays')}"
                for r in sorted(replays)))

    def expect_not_resumed(self):
        """The launcher ends a hung scenario with ncclCommAbort: the abort flag ends the kernels
        (their CUDA end events complete) while NCCL's transfers never do. That is no resumed
        episode (NCCL 2.28.9 on an H100 first showed the plugin saying so)."""
        resumed = sorted(n for n in os.listdir(self.dump_dir) if n.endswith(".resumed"))
        if resumed:
            self.fail(f"the hang was called a resumed episode after the abort: {resumed}")

    def run(self):
        sc = self.m["scenario"]
        self.load()
        if sc == "healthy":
            self.expect_no_dumps()
        elif sc == "skip":
            self.check_stall(check_seq=True)
            self.run_analyzer(required=True)
            self.expect_not_resumed()
        elif sc == "graph":
            if self.m.get("dumpsBeforeStall"):
                self.fail("dumps appeared during healthy graph replays")
            self.check_stall(check_seq=False)
            self.check_graph_launches()
            self.run_analyzer(required=True)  # named rank 1 on NCCL 2.28.9 (docs/gpu-testing.md)
            self.expect_not_resumed()
        elif sc == "signal":
            self.check_signal(1, [1])
        elif sc == "twocomms":
            self.check_signal(2, [2, 1])
        else:
            self.note(f"nothing to check for scenario {sc}")
        return not self.failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work_dir")
    ap.add_argument("--analyzer")
    ap.add_argument("--lib-path")
    a = ap.parse_args()
    try:
        c = Checker(a.work_dir, a.analyzer, a.lib_path)
    except (OSError, ValueError, KeyError) as e:
        print(f"FAIL: cannot read {a.work_dir}/manifest.json: {e}")
        return 1
    ok = c.run()
    for f in c.failures:
        print(f"FAIL: {f}")
    for n in c.notes:
        print(n)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
