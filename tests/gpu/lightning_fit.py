#!/usr/bin/env python3
"""PyTorch Lightning puts back "the original handlers" after trainer.fit(): the process lives.

One process, one GPU. NCCL (and the plugin, through NCCL_PROFILER_PLUGIN) is loaded by a
one-rank nccl process group and an all_reduce before the Trainer exists, as a job whose process
group outlives fit() has it. Lightning's _SignalConnector
(lightning/pytorch/trainer/connectors/signal_connector.py) saves every signal's handler through
signal.getsignal, which CPython answers from the table it filled at start (SIG_DFL for the
plugin's handlers), and restores them at the end of fit(). Then a SIGUSR1 snapshot: the plugin
takes SIGUSR1 and its stack signal back, so the process lives and the snapshot holds the other
threads' stacks (before: SIGUSR1 ended the process, and the stack signal would have too).

Prints one line, "PASS lightning_fit", "FAIL lightning_fit: why" or "SKIP lightning_fit: why"
(no torch, Lightning, GPU or NCCL backend). Exit status 0 unless FAIL.
"""
import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time


def child(a):
    import datetime
    import torch
    import torch.distributed as dist
    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl

    dist.init_process_group("nccl", init_method="file://" + os.path.join(a.work_dir, "init"), rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=600))
    x = torch.ones(1024, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch, _):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 8)), batch_size=16)
    trainer = pl.Trainer(accelerator="gpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Tiny(), data)
    print("after fit: SIGUSR1 handler", signal.getsignal(signal.SIGUSR1), flush=True)
    time.sleep(2 * a.poll + 0.5)  # a poll or two: the plugin sees what fit() put back
    os.kill(os.getpid(), signal.SIGUSR1)
    deadline = time.time() + 30
    while time.time() < deadline and not glob.glob(os.path.join(a.dump_dir, "*", "*-signal.json")):
        time.sleep(0.1)
    dist.all_reduce(x)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    print("child done", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--poll", type=float, default=0.5)
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--dump-dir", default=None)
    a = ap.parse_args()
    if a.child:
        child(a)
        return 0
    try:
        import torch
        if not torch.cuda.is_available():
            print("SKIP lightning_fit: torch sees no GPU")
            return 0
        if not torch.distributed.is_nccl_available():
            print("SKIP lightning_fit: this torch has no NCCL backend")
            return 0
        try:
            import lightning.pytorch  # noqa: F401
        except ImportError:
            import pytorch_lightning  # noqa: F401
    except ImportError as e:
        print(f"SKIP lightning_fit: {e}")
        return 0
    work = a.work_dir or tempfile.mkdtemp(prefix="wd-lightning-")
    os.makedirs(work, exist_ok=True)
    dumps = os.path.join(work, "dumps")
    env = dict(os.environ, NCCL_PROFILER_PLUGIN=a.plugin, NCCL_WATCHDOG_DUMP_DIR=dumps,
               NCCL_WATCHDOG_RING_DIR=os.path.join(work, "rings"), NCCL_WATCHDOG_POLL=f"{int(a.poll * 1000)}ms",
               NCCL_WATCHDOG_TIMEOUT="5m", NCCL_WATCHDOG_VERDICT="0", NCCL_DEBUG="WARN",
               NCCL_DEBUG_SUBSYS="INIT,PROFILE")
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "--plugin", a.plugin,
                        "--work-dir", work, "--dump-dir", dumps, "--poll", str(a.poll)],
                       env=env, capture_output=True, text=True, timeout=400)
    with open(os.path.join(work, "child.log"), "w") as f:
        f.write(p.stdout + p.stderr)
    if p.returncode != 0:
        print(f"FAIL lightning_fit: the process ended with status {p.returncode} after fit() "
              f"({(p.stderr.strip().splitlines() or [''])[-1][:200]})")
        return 1
    snaps = glob.glob(os.path.join(dumps, "*", "*-signal.json"))
    if not snaps:
        print("FAIL lightning_fit: no snapshot after fit()")
        return 1
    doc = json.load(open(snaps[0]))
    th = doc.get("threads") or {}
    if th.get("answered", 0) < 1:
        print(f"FAIL lightning_fit: the snapshot holds no other thread's stack ({th.get('asked')} asked)")
        return 1
    said = "had been replaced" in (p.stdout + p.stderr)
    print("PASS lightning_fit")
    print(f"  snapshot after fit(): {th.get('answered')} of {th.get('asked')} threads answered; "
          f"stack signal {th.get('signal') or 'still the plugin' + chr(39) + 's'}; log says taken back: {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
