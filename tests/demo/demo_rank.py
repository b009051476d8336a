#!/usr/bin/python3
"""One rank of the demo job as a Python program (the rank that hangs it): Debian's python3 plays
a training script, and the test host library (ctypes) plays NCCL towards the plugin.

usage: demo_rank.py PYHOST.so PLUGIN.so RANK NRANKS DUMP_DIR HANG_SEQ
"""
import ctypes
import os
import sys
import time

DEMO_COMM_ID = 0x5eed00d5c0ffee01


def dumps_settled(dump_dir, state):
    n = len([f for f in os.listdir(dump_dir) if f.endswith(".json") and not f.startswith(("trigger-", "."))])
    now = time.monotonic()
    if n != state["n"]:
        state["n"], state["since"] = n, now
    return n > 0 and now - state["since"] > 1.5


def wait_for_data_loader(dump_dir):
    """The training script's data loader never delivers the next batch."""
    state = {"n": -1, "since": time.monotonic()}
    end = time.monotonic() + 25
    while not dumps_settled(dump_dir, state) and time.monotonic() < end:
        time.sleep(0.05)


def train(nccl, rank, hang_seq, dump_dir):
    for step in range(hang_seq):
        nccl.pyhost_allreduce(4 << 20)  # gradients
        time.sleep(0.005)               # forward / backward
    print("rank %d (pid %d, Python): completed AllReduce #0..#%d, now stuck in its data loader: "
          "it never calls AllReduce #%d" % (rank, os.getpid(), hang_seq - 1, hang_seq), flush=True)
    wait_for_data_loader(dump_dir)


def main():
    helper, plugin, rank, nranks, dump_dir, hang_seq = sys.argv[1:7]
    nccl = ctypes.CDLL(helper)
    if nccl.pyhost_rank_init(plugin.encode(), ctypes.c_ulonglong(DEMO_COMM_ID), b"demo_pg",
                             int(rank), int(nranks)) != 0:
        print("demo_rank.py: the plugin did not load", file=sys.stderr)
        return 2
    nccl.pyhost_allreduce.argtypes = [ctypes.c_ulonglong]
    train(nccl, int(rank), int(hang_seq), dump_dir)
    nccl.pyhost_finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
