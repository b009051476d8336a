#!/usr/bin/env python3
"""A real PyTorch hang, caught by nccl-watchdog and diagnosed by the analyzer.

Two processes (no torchrun: init_method file://, world_size 2, nccl backend) share one GPU; each
has its own NCCL_HOSTID so NCCL connects them through the socket transport over loopback, and
each loads the plugin through NCCL_PROFILER_PLUGIN. After a few healthy all_reduces rank 1 skips
one; rank 0 enters it and hangs. The script waits for rank 0's stall dump and rank 1's peer dump,
runs the analyzer, checks that it names rank 1, kills the job, and prints one line:
"PASS torch_hang", "FAIL torch_hang: why" or "SKIP torch_hang: why" (torch missing, no GPU,
NCCL too old), with indented notes after a PASS. Exit status 0 unless FAIL.
"""
import argparse
import datetime
import gzip
import json
import os
import shutil
import re
import signal
import subprocess
import sys
import tempfile
import time

SKIP_RANK = 1
DUMP_RE = re.compile(r"^.+-(?P<pid>\d+)-\d+-(?P<reason>[a-z]+)\.json(\.gz)?$")


def mark(work, name, rank):
    path = os.path.join(work, "marks", f"{name}-{rank}")
    with open(path + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {time.time()}\n")
    os.rename(path + ".tmp", path)


def wait_marks(work, name, ranks, timeout, procs=None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if all(os.path.exists(os.path.join(work, "marks", f"{name}-{r}")) for r in ranks):
            return True
        if procs and any(p.poll() is not None for p in procs):
            return False
        time.sleep(0.05)
    return False


def worker(a):
    import torch
    import torch.distributed as dist

    r = a.worker
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method="file://" + os.path.join(a.work_dir, "init"),
                            rank=r, world_size=2, timeout=datetime.timedelta(seconds=900))
    x = torch.full((1 << 16,), float(r + 1), device="cuda")
    for _ in range(a.iters):
        y = x.clone()
        dist.all_reduce(y)
        torch.cuda.synchronize()
        if y[0].item() != 3.0:
            print(f"rank {r}: all_reduce gave {y[0].item()}, expected 3", flush=True)
            sys.exit(1)
    # File marks, not dist.barrier(): a barrier is itself an NCCL all_reduce and would shift seqs.
    mark(a.work_dir, "warm", r)
    if not wait_marks(a.work_dir, "warm", [0, 1], 300):
        sys.exit(6)
    if r == SKIP_RANK:
        mark(a.work_dir, "skipped", r)
        while True:  # alive, communicator open, never entering the all_reduce
            time.sleep(1)
    mark(a.work_dir, "entered", r)
    y = x.clone()
    dist.all_reduce(y)
    torch.cuda.synchronize()  # hangs: rank 1 never joins
    print(f"rank {r}: the all_reduce rank {SKIP_RANK} skipped completed", flush=True)
    sys.exit(1)


def dumps_by(dump_dir, pid, reason):
    out = []
    for root, _, files in sorted(os.walk(dump_dir)):  # <dump dir>/<host>/<dump>.json
        for name in sorted(files):
            m = DUMP_RE.match(name)
            if m and int(m["pid"]) == pid and m["reason"] == reason:
                out.append(os.path.join(root, name))
    return out


def fallback_verdict(dump_dir, pids):
    """Without the analyzer: the rank whose AllReduce lastEnqueued is behind the others'."""
    enq = {}
    for r, pid in enumerate(pids):
        files = dumps_by(dump_dir, pid, "stall") + dumps_by(dump_dir, pid, "peer")
        for path in files[:1]:
            opener = gzip.open if path.endswith(".gz") else open  # peer dumps are compressed
            with opener(path, "rt") as f:
                doc = json.load(f)
            for c in doc.get("comms", []):
                for s in c.get("seq", []):
                    if s.get("func") == "AllReduce":
                        enq[r] = max(enq.get(r, -1), s.get("lastEnqueued", -1))
    if len(enq) == 2 and enq[SKIP_RANK] < enq[1 - SKIP_RANK]:
        return True, f"dumps show rank {SKIP_RANK} behind (AllReduce lastEnqueued {enq})"
    return False, f"dumps do not show rank {SKIP_RANK} behind (AllReduce lastEnqueued {enq})"


def parent(a):
    try:
        import torch
        import torch.distributed as dist
    except Exception as e:  # ImportError, or a broken CUDA install raising at import
        print(f"SKIP torch_hang: torch not importable ({type(e).__name__}: {e})")
        return 0
    if not torch.cuda.is_available():
        print("SKIP torch_hang: torch sees no GPU")
        return 0
    if not dist.is_available() or not dist.is_nccl_available():
        print("SKIP torch_hang: this torch has no NCCL backend")
        return 0
    ver = torch.cuda.nccl.version()
    if isinstance(ver, int):  # old torch returned NCCL_VERSION_CODE: 2708 before 2.9, 22703 after
        ver = (ver // 10000, ver // 100 % 100, ver % 100) if ver >= 10000 else \
            (ver // 1000, ver // 100 % 10, ver % 100)
    if tuple(ver) < (2, 27, 0):
        print(f"SKIP torch_hang: torch's NCCL {'.'.join(map(str, ver))} is older than 2.27 "
              "(no profiler ABI v4 for the plugin)")
        return 0
    if not os.path.exists(a.plugin):
        print(f"FAIL torch_hang: no plugin at {a.plugin}")
        return 1

    work = a.work_dir or tempfile.mkdtemp(prefix="nccl-watchdog-torch.")
    os.makedirs(os.path.join(work, "marks"), exist_ok=True)
    dump_dir = os.path.join(work, "dumps")
    os.makedirs(dump_dir, exist_ok=True)
    shutil.rmtree(dump_dir, ignore_errors=True)
    os.makedirs(dump_dir, exist_ok=True)
    for name in os.listdir(os.path.join(work, "marks")):
        os.unlink(os.path.join(work, "marks", name))
    if os.path.exists(os.path.join(work, "init")):
        os.unlink(os.path.join(work, "init"))

    procs, logs = [], []
    for r in range(2):
        env = dict(os.environ)
        env.update({
            "NCCL_HOSTID": f"torch-hang-{os.getpid()}-rank{r}",
            "NCCL_NET": "Socket",
            "NCCL_SOCKET_IFNAME": "lo",
            "GLOO_SOCKET_IFNAME": "lo",
            "NCCL_IB_DISABLE": "1",
            "NCCL_PROFILER_PLUGIN": a.plugin,
            "NCCL_WATCHDOG_DUMP_DIR": dump_dir,
            "NCCL_WATCHDOG_TIMEOUT": f"{int(a.timeout * 1000)}ms",
            "NCCL_WATCHDOG_POLL": f"{int(a.poll * 1000)}ms",
            "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2",
        })
        if tuple(ver) >= (2, 30, 0):
            env["NCCL_MULTI_RANK_GPU_ENABLE"] = "1"
        env.setdefault("NCCL_DEBUG", "INFO")
        env.setdefault("NCCL_DEBUG_SUBSYS", "INIT,PROFILE")
        if a.lib_path:
            env["LD_LIBRARY_PATH"] = a.lib_path + ":" + env.get("LD_LIBRARY_PATH", "")
        log = open(os.path.join(work, f"rank{r}.log"), "w")
        logs.append(log)
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", str(r), "--work-dir", work,
             "--iters", str(a.iters)],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    pids = [p.pid for p in procs]

    def log_tail(r, n=6):
        try:
            with open(os.path.join(work, f"rank{r}.log")) as f:
                lines = [l.rstrip() for l in f if "WARN" in l or "Error" in l or "rank" in l]
            return lines[-n:]
        except OSError:
            return []

    def finish(verdict, why, notes=()):
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        for p in procs:
            p.wait()
        for log in logs:
            log.close()
        if verdict == "PASS":
            print("PASS torch_hang")
        else:
            print(f"FAIL torch_hang: {why}")
        for n in notes:
            print(f"  {n}")
        print(f"  work dir: {work}")
        return 0 if verdict == "PASS" else 1

    if not wait_marks(work, "entered", [1 - SKIP_RANK], 300, procs) or \
            not wait_marks(work, "skipped", [SKIP_RANK], 60, procs):
        dead = [f"rank {r} exited with {p.returncode}" for r, p in enumerate(procs) if p.poll() is not None]
        return finish("FAIL", "the job did not reach the skipped all_reduce" +
                      (f" ({', '.join(dead)})" if dead else ""), log_tail(0) + log_tail(1))
    t0 = time.monotonic()
    budget = a.timeout + 2 * a.poll + 30
    stall = peer = []
    while time.monotonic() - t0 < budget:
        stall = dumps_by(dump_dir, pids[1 - SKIP_RANK], "stall")
        peer = dumps_by(dump_dir, pids[SKIP_RANK], "peer")
        if stall and peer:
            break
        if any(p.poll() is not None for p in procs):
            return finish("FAIL", "a rank died while the job hung: " +
                          ", ".join(f"rank {r} status {p.returncode}" for r, p in enumerate(procs)),
                          log_tail(0) + log_tail(1))
        time.sleep(0.1)
    if not stall or not peer:
        return finish("FAIL", f"after {budget:.0f} s: {len(stall)} stall dump(s) from rank "
                      f"{1 - SKIP_RANK}, {len(peer)} peer dump(s) from rank {SKIP_RANK} "
                      f"(files: {sorted(os.listdir(dump_dir))[:6]})", log_tail(0) + log_tail(1))
    notes = [f"stall dump from rank {1 - SKIP_RANK} {time.monotonic() - t0:.1f} s after it entered "
             f"the all_reduce; peer dump from rank {SKIP_RANK}"]

    if a.analyzer and os.access(a.analyzer, os.X_OK):
        env = dict(os.environ)
        if a.lib_path:
            env["LD_LIBRARY_PATH"] = a.lib_path + ":" + env.get("LD_LIBRARY_PATH", "")
        p = subprocess.run([a.analyzer, "--json", dump_dir], capture_output=True, text=True,
                           timeout=120, env=env)
        try:
            report = json.loads(p.stdout)
        except ValueError:
            return finish("FAIL", f"analyzer printed no JSON (status {p.returncode}): "
                          f"{p.stderr.strip()[:200]}", notes)
        suspects = [s for c in report.get("comms", []) for s in c.get("suspects", [])]
        ranks = [s.get("rank") for s in suspects]
        for c in report.get("comms", []):
            if c.get("summary"):
                notes.append(f"analyzer: {c['summary']}")
        if SKIP_RANK not in ranks:
            return finish("FAIL", f"the analyzer does not name rank {SKIP_RANK}: suspects "
                          f"{json.dumps(suspects)[:300]}", notes)
        notes.append(f"analyzer names rank {SKIP_RANK}: {suspects[ranks.index(SKIP_RANK)].get('reason')}")
    else:
        ok, why = fallback_verdict(dump_dir, pids)
        notes.append(f"analyzer not available; {why}")
        if not ok:
            return finish("FAIL", why, notes)
    return finish("PASS", "", notes)


def main():
    ap = argparse.ArgumentParser(description="torch.distributed hang caught by nccl-watchdog")
    ap.add_argument("--plugin", help="path of libnccl-profiler-watchdog.so")
    ap.add_argument("--analyzer", help="path of nccl-watchdog-analyze (optional)")
    ap.add_argument("--lib-path", help="directory of bundled shared libraries (bundle.sh)")
    ap.add_argument("--work-dir", help="dumps, logs and rendezvous files (default: a temp dir)")
    ap.add_argument("--timeout", type=float, default=5.0, help="NCCL_WATCHDOG_TIMEOUT, seconds")
    ap.add_argument("--poll", type=float, default=0.5, help="NCCL_WATCHDOG_POLL, seconds")
    ap.add_argument("--iters", type=int, default=20, help="healthy all_reduces before the skip")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker is not None:
        worker(a)
        return 0
    if not a.plugin:
        ap.error("--plugin is required")
    if not (0 < a.poll < a.timeout):
        ap.error("--poll must be positive and shorter than --timeout")
    a.plugin = os.path.abspath(a.plugin)
    if a.work_dir:
        a.work_dir = os.path.abspath(a.work_dir)
    return parent(a)


if __name__ == "__main__":
    sys.exit(main())
