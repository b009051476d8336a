#!/usr/bin/python3
"""One rank of the demo job as a Python program (the rank that hangs it): Debian's python3 plays
a training script, and the test host library (ctypes) plays NCCL towards the plugin.

The job is 2 pipeline stages x 2 data-parallel replicas (tests/demo/demo_rank.c): this rank is
stage 0 of replica 1, global rank 2. Each step it sends its activations to stage 1 (pp_d1) and
all-reduces its gradients with stage 0 of replica 0 (dp_p0).

usage: demo_rank.py PYHOST.so PLUGIN.so RANK NRANKS DUMP_DIR HANG_SEQ
"""
import ctypes
import os
import sys
import time

PP_COMM_ID = 0x5eed00d5c0ff0e00  # + replica (demo_rank.c: PP_ID)
DP_COMM_ID = 0x5eed00d5c0ffd000  # + stage (demo_rank.c: DP_ID)


def dumps_settled(dump_dir, state):
    n = sum(1 for _, _, files in os.walk(dump_dir) for f in files  # <dump dir>/<host>/*.json
            if f.endswith(".json") and not f.startswith("."))
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


def train(nccl, pp, dp, rank, hang_seq, dump_dir):
    for step in range(hang_seq):
        nccl.pyhost_p2p(pp, 1, 1, 1 << 20)  # activations to stage 1
        time.sleep(0.005)                   # forward / backward
        nccl.pyhost_allreduce(dp, 4 << 20)  # gradients
    print("rank %d (pid %d, Python): completed step #0..#%d, now stuck in its data loader: "
          "it never sends step #%d's activations to stage 1" % (rank, os.getpid(), hang_seq - 1, hang_seq),
          flush=True)
    wait_for_data_loader(dump_dir)


def main():
    helper, plugin, rank, nranks, dump_dir, hang_seq = sys.argv[1:7]
    nccl = ctypes.CDLL(helper)
    rank, stage, replica = int(rank), int(rank) % 2, int(rank) // 2
    pp = nccl.pyhost_rank_init(plugin.encode(), ctypes.c_ulonglong(PP_COMM_ID + replica),
                               b"pp_d%d" % replica, stage, 2)
    dp = nccl.pyhost_rank_init(plugin.encode(), ctypes.c_ulonglong(DP_COMM_ID + stage),
                               b"dp_p%d" % stage, replica, 2)
    if pp < 0 or dp < 0 or stage != 0:
        print("demo_rank.py: the plugin did not load (or this rank is not a stage 0)", file=sys.stderr)
        return 2
    nccl.pyhost_allreduce.argtypes = [ctypes.c_int, ctypes.c_ulonglong]
    nccl.pyhost_p2p.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_ulonglong]
    train(nccl, pp, dp, rank, int(hang_seq), dump_dir)
    nccl.pyhost_finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
