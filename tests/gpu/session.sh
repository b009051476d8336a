#!/usr/bin/env bash
# One GPU session in one command, for a machine lent for minutes: every real-NCCL scenario
# (run.sh), then the overhead table (overhead.sh) within a time bound, each in its own time
# bound, and everything kept in OUTDIR: session.log, overhead.md, work.tgz (each scenario's
# manifest, dumps and NCCL logs) and overhead-raw.tgz. Uses PyTorch's NCCL when it is there, the
# one torch_hang.py uses. docs/gpu-testing.md, "Running it".
#
# usage: tests/gpu/session.sh --bundle DIR OUTDIR [--scenarios S] [--overhead S] [--only LIST]
#   --scenarios S   time bound of the scenarios (default 270 s; about 170 s on an H100)
#   --overhead S    time bound of the overhead table (default 150 s; 0 skips it)
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUNDLE= OUTDIR= T_SC=270 T_OV=150 ONLY=
while (($#)); do
  case $1 in
    --bundle) BUNDLE=$2; shift 2 ;;
    --scenarios) T_SC=$2; shift 2 ;;
    --overhead) T_OV=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "session.sh: unknown option '$1'" >&2; exit 2 ;;
    *) OUTDIR=$1; shift ;;
  esac
done
[[ -n $BUNDLE && -n $OUTDIR ]] || { echo "usage: tests/gpu/session.sh --bundle DIR OUTDIR" >&2; exit 2; }
mkdir -p "$OUTDIR" || exit 1
exec > >(tee "$OUTDIR/session.log") 2>&1

date -u
nvidia-smi -L 2>&1 | head -4
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -2
python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "cuda", torch.version.cuda)' 2>&1 | tail -1
# PyTorch's NCCL for the C scenarios too (a bundled nccl_e2e links libnccl.so.2 by name).
NL=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH=${NL:+$NL:}/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/nccl-watchdog-session.XXXXXX")
SECONDS=0
timeout -k 5 "$T_SC" "$HERE/run.sh" --bundle "$BUNDLE" --work-dir "$WORK/gw" ${ONLY:+--only "$ONLY"}
echo "run.sh: status $? after ${SECONDS} s"
[[ -d $WORK/gw ]] && tar czf "$OUTDIR/work.tgz" --exclude=e2e-build -C "$WORK" gw

if [[ $T_OV != 0 ]]; then
  E2E=$BUNDLE/bin/nccl_e2e
  [[ -x $WORK/gw/e2e-build/bin/nccl_e2e ]] && E2E=$WORK/gw/e2e-build/bin/nccl_e2e
  mkdir -p "$WORK/ovh"
  SECONDS=0
  TMPDIR=$WORK/ovh timeout -k 5 "$T_OV" "$HERE/overhead.sh" --bundle "$BUNDLE" --e2e "$E2E" \
    --rounds 3 --iters 50 --max-bytes 65536 >"$OUTDIR/overhead.md"
  echo "overhead.sh: status $? after ${SECONDS} s"
  cat "$OUTDIR/overhead.md"
  tar czf "$OUTDIR/overhead-raw.tgz" -C "$WORK" ovh
fi
rm -rf "$WORK"
