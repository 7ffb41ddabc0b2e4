#!/usr/bin/env bash
# with_bagua on the GPU against torch DDP over NCCL: the same script (examples/torch/train.py
# --device cuda), the same model (ResNet-18, 11.2 M parameters, on generated 3x32x32 images), 2
# ranks sharing one GPU, interleaved repeats, medians.
#
#   bench/torch_gpu.sh [--python PY] [--pythonpath DIR] [--nranks N] [--steps S] [--batch B]
#                      [--repeat R] [--algorithms "gradient_allreduce bytegrad ..."]
#                      [--budget SECONDS] [--record-dir DIR]
#
# --python is an interpreter whose torch has CUDA (default: python3 on PATH); --pythonpath the
# directory holding the bagua package built for it (scripts/build-py-ext.sh; default
# build/python). Each run is one process per rank started here with torchrun's variables and its
# own NCCL_HOSTID (two ranks on one GPU must look like two hosts to NCCL, which otherwise
# refuses a duplicate device), NCCL over loopback sockets for DDP and libbagua alike. The
# figure compared is the steady-state step time (train.py's "steady", timed after
# torch.cuda.synchronize() at both ends, first steps left out); "vs DDP" is DDP's median over
# the variant's (above 1: faster than DDP). A run that would start after --budget seconds is
# not started, and the table says how many repeats each variant got. Records: bench/record.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/record.sh
. bench/free_port.sh
record_argv "$0" "$@"
py=python3
pypath=$PWD/build/python
nranks=2
steps=60
batch=32
repeat=3
budget=240
algorithms="gradient_allreduce bytegrad qadam decentralized"
while [ $# -gt 0 ]; do
  case $1 in
    --python) py=$2; shift 2 ;;
    --pythonpath) pypath=$2; shift 2 ;;
    --nranks) nranks=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --algorithms) algorithms=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --record-dir) export BENCH_RECORD_DIR=$2; shift 2 ;;
    *) echo "unknown argument $1; see the header of $0" >&2; exit 2 ;;
  esac
done
for v in nranks steps batch repeat budget; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "--$v \"${!v}\" is not a positive integer" >&2; exit 2; }
done
if ! "$py" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  echo "$0: $py has no torch with a visible CUDA device; nothing measured" >&2
  exit 2
fi
export PYTHONPATH=$pypath OMP_NUM_THREADS=4 NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
export RECORD_TORCH_PYTHON=$py
record_open torch_gpu torch nranks steady_ms:ms/step fwd_bwd_ms:ms/step samples_per_s:samples/s \
  test_acc:fraction
tmp=$(mktemp -d)
on_exit() { local rc=$?; rm -rf "$tmp"; record_close "$rc"; }
trap on_exit EXIT
start=$SECONDS

# run ALGO: one run on $nranks ranks; rank 0's output in $tmp/out.
run() {
  local algo=$1 port pids=() extra=(--algorithm "$1")
  port=$(free_port)
  [ "$algo" = ddp ] && extra=(--ddp)
  for ((r = 0; r < nranks; r++)); do
    RANK=$r WORLD_SIZE=$nranks LOCAL_RANK=$r LOCAL_WORLD_SIZE=$nranks MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port NCCL_HOSTID=bagua-bench-$r \
      timeout 300 "$py" examples/torch/train.py --device cuda --model resnet18 \
      --synthetic 8192 --batch-size "$batch" --epochs 1 --max-steps "$steps" \
      --timing-warmup 10 "${extra[@]}" >"$tmp/r$r" 2>&1 &
    pids+=($!)
  done
  local bad=0
  for p in "${pids[@]}"; do wait "$p" || bad=1; done
  if [ $bad = 1 ]; then
    echo "run $algo failed:" >&2
    tail -n 20 "$tmp"/r* >&2
    return 1
  fi
  cp "$tmp/r0" "$tmp/out"
}
field() { grep -oE "$1" "$tmp/out" | head -1 | grep -oE '[0-9.]+' | head -1; }

echo "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null |
  head -1); torch $("$py" -c 'import torch; print(torch.__version__)'); git" \
  "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "ResNet-18, batch $batch per rank, $steps steps per run ($nranks ranks on one GPU)," \
  "median [min-max] of up to $repeat interleaved repeats"
declare -A std=() fb=() sps=() acc=() done_runs=()
for ((i = 0; i < repeat; i++)); do
  for algo in ddp $algorithms; do
    if [ $((SECONDS - start)) -ge "$budget" ]; then
      echo "budget of $budget s spent: repeat $i of $algo not run" >&2
      continue
    fi
    run "$algo" || continue
    t=$(field 'steady [0-9.]+') f=$(field 'fwd\+bwd [0-9.]+') s=$(field '[0-9]+ samples/s, fwd')
    a=$(field 'test_acc=[0-9.]+')
    record_row "$algo" "$i" "$nranks" "$t" "$f" "$s" "$a"
    std[$algo]+="$t " fb[$algo]+="$f " sps[$algo]+="$s " acc[$algo]+="$a "
    done_runs[$algo]=$((${done_runs[$algo]:-0} + 1))
  done
done
[ -n "${std[ddp]:-}" ] || { echo "no DDP run finished: no table" >&2; exit 1; }
base=$(record_median ${std[ddp]})
echo
echo "| algorithm | runs | steady ms/step | vs DDP | fwd+bwd ms/step (host) | test_acc |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for algo in ddp $algorithms; do
  [ -n "${std[$algo]:-}" ] || { echo "| $algo | 0 | not run | | | |"; continue; }
  t=$(record_median ${std[$algo]})
  echo "| $algo | ${done_runs[$algo]} | $(record_stat .2f ${std[$algo]}) |" \
    "$(awk -v a="$t" -v b="$base" 'BEGIN {printf "%.2f", b / a}') |" \
    "$(record_stat .2f ${fb[$algo]}) | $(record_stat .4f ${acc[$algo]}) |"
done
