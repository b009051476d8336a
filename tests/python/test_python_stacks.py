#!/usr/bin/python3
"""Python stacks in dumps. Debian's python3 loads the plugin through the test host (ctypes),
with a Python thread blocked at a known line and another busy in a loop; 100 snapshot signals
in a row must each give a dump, the process must not crash, and the dumps must hold both threads'
Python stacks by function, file and line, matched to their native thread ids (at most 5 may say
the interpreter's dumper faulted instead: it reads frames the busy thread changes).

usage: test_python_stacks.py PYHOST.so PLUGIN.so
"""
import ctypes
import glob
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    helper, plugin = sys.argv[1], sys.argv[2]
    dumps = tempfile.mkdtemp(prefix="wd-py-")
    os.environ["NCCL_WATCHDOG_DUMP_DIR"] = dumps
    os.environ["NCCL_WATCHDOG_RING_DIR"] = dumps
    os.environ["NCCL_WATCHDOG_TIMEOUT"] = "1h"
    os.environ["NCCL_WATCHDOG_POLL"] = "50ms"
    os.environ["NCCL_WATCHDOG_BACKTRACE"] = "0"
    os.environ["NCCL_WATCHDOG_MAX_DUMPS"] = "1000"
    lib = ctypes.CDLL(helper)
    if lib.pyhost_start(plugin.encode()) != 0:
        fail("the plugin did not load")

    stop = threading.Event()
    started = threading.Barrier(3)

    def blocked_in_known_place():
        started.wait()
        stop.wait()  # BLOCKED_LINE

    def busy_loop():
        started.wait()
        n = 0
        while not stop.is_set():
            n += sum(range(50))
        return n

    blocked_line = next(i + 1 for i, l in enumerate(open(__file__)) if "# BLOCKED_LINE" in l
                        and "next(" not in l)
    t1 = threading.Thread(target=blocked_in_known_place)
    t2 = threading.Thread(target=busy_loop)
    t1.start()
    t2.start()
    started.wait()
    time.sleep(0.1)

    rounds = 100
    for i in range(rounds):
        before = len(glob.glob(os.path.join(dumps, "*", "*-signal.json")))
        os.kill(os.getpid(), signal.SIGUSR1)
        deadline = time.time() + 10
        while len(glob.glob(os.path.join(dumps, "*", "*-signal.json"))) <= before:
            if time.time() > deadline:
                fail("no dump for snapshot %d" % i)
            time.sleep(0.005)
    stop.set()
    t1.join()
    t2.join()
    failures = lib.pyhost_finish()
    if failures:
        fail("%d plugin callbacks failed" % failures)

    files = sorted(glob.glob(os.path.join(dumps, "*", "*-signal.json")))
    if len(files) != rounds:
        fail("%d snapshot dumps, expected %d" % (len(files), rounds))
    ok_blocked = ok_busy = faulted = 0
    for path in files:
        doc = json.load(open(path))
        py = doc.get("python")
        if not py or not py.get("available"):
            fail("%s: no Python section" % path)
        # The interpreter's dumper reads frames the busy thread keeps changing; when it faults,
        # that dump goes without Python stacks and says so (the process lives on). Rare.
        if "faulted" in (py.get("note") or ""):
            faulted += 1
            continue
        by_tid = {t.get("tid"): t for t in py["threads"]}
        for t, want in ((t1, "blocked_in_known_place"), (t2, "busy_loop")):
            th = by_tid.get(t.native_id)
            if th is None:
                fail("%s: Python thread %d not matched to its native id (%s)" %
                     (path, t.native_id, sorted(k for k in by_tid if k)))
            names = [f["function"] for f in th["frames"]]
            if want not in names:
                fail("%s: %s not in %s" % (path, want, names))
            if want == "blocked_in_known_place":
                f = th["frames"][names.index(want)]
                if os.path.basename(f["file"]) != os.path.basename(__file__) or f["line"] != blocked_line:
                    fail("%s: blocked frame at %s:%d, expected line %d" %
                         (path, f["file"], f["line"], blocked_line))
                ok_blocked += 1
            else:
                ok_busy += 1
        if os.getpid() not in by_tid:
            fail("%s: the main thread is not matched" % path)
    if faulted > rounds // 20:
        fail("%d of %d snapshots lost their Python stacks to a fault in the dumper" % (faulted, rounds))
    shutil.rmtree(dumps)
    print("PASS: %d snapshots of a busy Python process, both threads' stacks in every one the "
          "dumper did not fault in (blocked %d, busy %d, faulted %d)" %
          (rounds, ok_blocked, ok_busy, faulted))
    return 0


if __name__ == "__main__":
    sys.exit(main())
