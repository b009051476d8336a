#!/usr/bin/python3
"""Signals taken back from a framework, in a real CPython process with the plugin loaded.

PyTorch Lightning's _SignalConnector (lightning/pytorch/trainer/connectors/signal_connector.py,
register_signal_handlers / teardown -> _restore_previous_handlers) saves "the original handlers"
of every valid signal with signal.getsignal, installs its SLURM requeue handler on SIGUSR1, and
at the end of every fit, validate, test and predict puts the saved handlers back with
signal.signal. CPython records each signal's action when the interpreter starts
(Modules/signalmodule.c, signal_install_handlers / the Handlers table): a handler a C library
installed later still reads as SIG_DFL, so the "restore" sets SIG_DFL on the plugin's stack
signal, on SIGUSR1 and on the fatal signals, while NCCL and the plugin live on.

This test does exactly that, with CPython's own signal module (no model of it), then checks:
  1. during "fit": each SIGUSR1 runs the requeue handler exactly once and still gives a snapshot
     dump (the plugin took SIGUSR1 back at a poll, chaining to the handler), and the log says so;
  2. after "teardown": a SIGUSR1 gives a snapshot and does not kill the process;
  3. a hang after teardown: the process lives, its stall dump holds the other threads' stacks
     (the stack signal was taken back before any thread was asked: the dump says SIG_DFL was
     found), and the log says the fatal handlers were taken back.
Before the fix the hang's stack signal (SIG_DFL) ended the process (-37), and SIGUSR1 after
teardown killed it.

usage: test_python_signals.py PYHOST.so PLUGIN.so
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

BT_SIGNAL = signal.SIGRTMIN + 3  # NCCL_WATCHDOG_BACKTRACE_SIGNAL's default


def fail(msg):
    print("FAIL: " + msg)
    sys.stdout.flush()
    os._exit(1)


def wait_for(what, cond, timeout=10.0):
    end = time.time() + timeout
    while not cond():
        if time.time() > end:
            fail("timed out waiting for " + what)
        time.sleep(0.01)


class LightningLikeConnector:
    """The steps of Lightning's _SignalConnector that touch signals, in its order."""

    def __init__(self):
        self.original = {}
        self.requeue_calls = 0

    def _requeue(self, signum, frame):  # SLURMEnvironment auto-requeue: _slurm_sigusr_handler_fn
        self.requeue_calls += 1

    def register_signal_handlers(self):
        sigs = set(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}
        self.original = {s: signal.getsignal(s) for s in sigs}
        signal.signal(signal.SIGUSR1, self._requeue)

    def teardown(self):
        for s, h in self.original.items():
            if h is not None:
                signal.signal(s, h)


def dumps_of(d, reason):
    return sorted(glob.glob(os.path.join(d, "*", "*-%s.json" % reason)))


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    helper, plugin = sys.argv[1], sys.argv[2]
    d = tempfile.mkdtemp(prefix="wd-pysig-")
    os.environ.update({"NCCL_WATCHDOG_DUMP_DIR": d, "NCCL_WATCHDOG_RING_DIR": d,
                       "NCCL_WATCHDOG_TIMEOUT": "1s", "NCCL_WATCHDOG_POLL": "50ms",
                       "NCCL_WATCHDOG_VERDICT": "0", "NCCL_WATCHDOG_PYTHON": "0",
                       "NCCL_WATCHDOG_MAX_DUMPS": "100"})
    lib = ctypes.CDLL(helper)
    lib.pyhost_log_contains.argtypes = [ctypes.c_int, ctypes.c_char_p]
    if lib.pyhost_start(plugin.encode()) != 0:
        fail("the plugin did not load")

    # A second thread, as a data loader's pin-memory thread would be: its stack must be asked.
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="loader")
    t.start()

    conn = LightningLikeConnector()
    conn.register_signal_handlers()
    # CPython's cache: the plugin's handlers, installed from C after start, read as SIG_DFL.
    if conn.original.get(signal.SIGUSR1) != signal.SIG_DFL or conn.original.get(BT_SIGNAL) != signal.SIG_DFL:
        fail("CPython did not report SIG_DFL for the plugin's signals: %r %r" %
             (conn.original.get(signal.SIGUSR1), conn.original.get(BT_SIGNAL)))

    # 1. "fit": the requeue handler is installed over the plugin's; a poll takes SIGUSR1 back.
    wait_for("the log line about SIGUSR1 taken back",
             lambda: lib.pyhost_log_contains(-1, b"snapshot signal 10 had been replaced") > 0)
    for i in range(3):
        before = len(dumps_of(d, "signal"))
        os.kill(os.getpid(), signal.SIGUSR1)
        wait_for("snapshot %d during fit" % i, lambda: len(dumps_of(d, "signal")) > before)
        wait_for("the requeue handler for signal %d" % i, lambda: conn.requeue_calls >= i + 1)
    time.sleep(0.2)
    if conn.requeue_calls != 3:
        fail("the requeue handler ran %d times for 3 signals" % conn.requeue_calls)

    # 2. "teardown": the saved SIG_DFLs go back on every signal, the plugin's included.
    conn.teardown()
    wait_for("the fatal handlers taken back",
             lambda: lib.pyhost_log_contains(-1, b"fatal-signal handlers had been replaced") > 0)
    before = len(dumps_of(d, "signal"))
    os.kill(os.getpid(), signal.SIGUSR1)
    wait_for("a snapshot after teardown", lambda: len(dumps_of(d, "signal")) > before)

    # 3. a hang after teardown: the stack signal is SIG_DFL until the dump takes it back.
    conn.teardown()  # once more, right before the hang: nothing polled since
    lib.pyhost_hang()
    wait_for("the stall dump", lambda: len(dumps_of(d, "stall")) >= 1, timeout=20)
    time.sleep(0.3)
    path = dumps_of(d, "stall")[0]
    doc = json.load(open(path))
    th = doc.get("threads") or {}
    sig = th.get("signal") or {}
    if sig.get("found") != "SIG_DFL" or sig.get("action") != "taken_back":
        fail("%s: the stall dump does not say the stack signal was found SIG_DFL and taken back: %r" % (path, sig))
    ok = [x for x in th.get("list", []) if x.get("status") == "ok"]
    if th.get("answered", 0) < 1 or not ok:
        fail("%s: no other thread's stack (asked %r, answered %r)" % (path, th.get("asked"), th.get("answered")))
    if lib.pyhost_log_contains(-1, b"stack signal %d had been replaced" % BT_SIGNAL) < 1:
        fail("the log does not say the stack signal was taken back")

    lib.pyhost_unhang()
    stop.set()
    t.join()
    failures = lib.pyhost_finish()
    if failures:
        fail("%d plugin callbacks failed" % failures)
    shutil.rmtree(d)
    print("PASS: Lightning's save/restore of signal handlers under CPython: the requeue handler ran "
          "once per SIGUSR1 (3) with a snapshot each; after teardown a SIGUSR1 snapshot and a stall "
          "dump with %d other thread(s)' stacks, the process alive" % len(ok))
    return 0


if __name__ == "__main__":
    sys.exit(main())
