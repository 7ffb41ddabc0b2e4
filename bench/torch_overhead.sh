#!/usr/bin/env bash
# The PyTorch front end's own cost per step: examples/torch/train.py on ONE process (no peer,
# so no communication time), the plain torch loop (--plain) against the same loop under
# with_bagua(gradient_allreduce) and under torch DDP (Gloo, world 1). With one rank libbagua
# still runs everything a step does (the gradient-ready hook per parameter, bucket hand-off to
# the communication thread, the post-backward wait, the wrapped optimizer step), so the
# difference to --plain is the front end's overhead. Interleaved repeats; medians.
#
# usage: bench/torch_overhead.sh [--build build] [--models "cnn wide"] [--steps 300] [--repeat 5]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build models="cnn" steps=300 repeat=5
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    *) echo "unknown argument $1; see the header of $0" >&2; exit 2 ;;
  esac
done
py=/usr/bin/python3
export PYTHONPATH=$PWD/$build/python OMP_NUM_THREADS=1

# loop_ms MODEL VARIANT -> the training loop's ms per step of one run
loop_ms() {
  local model=$1 variant=$2 extra=()
  case $variant in
    plain) extra=(--plain) ;;
    ddp) extra=(--ddp) ;;
    bagua) extra=(--algorithm gradient_allreduce) ;;
  esac
  RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$((20000 + RANDOM % 20000)) timeout 600 $py examples/torch/train.py \
    --model "$model" --epochs 1 --max-steps "$steps" --test-limit 100 "${extra[@]}" |
    grep -oE 'loop [0-9.]+ ms/step' | grep -oE '[0-9.]+'
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "machine: $(nproc --all) vCPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs);" \
  "torch $($py -c 'import torch; print(torch.__version__)'); git $(git rev-parse --short HEAD)"
echo "one process, $steps steps of batch 64, median of $repeat interleaved repeats"
echo
echo "| model | plain torch ms/step | with_bagua ms/step | overhead ms/step | torch DDP ms/step | DDP overhead ms/step |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for model in $models; do
  p="" b="" d=""
  for ((i = 0; i < repeat; i++)); do
    p+="$(loop_ms "$model" plain) "
    b+="$(loop_ms "$model" bagua) "
    d+="$(loop_ms "$model" ddp) "
  done
  mp=$(tr ' ' '\n' <<<"$p" | grep . | median)
  mb=$(tr ' ' '\n' <<<"$b" | grep . | median)
  md=$(tr ' ' '\n' <<<"$d" | grep . | median)
  awk -v m="$model" -v p="$mp" -v b="$mb" -v d="$md" \
    'BEGIN {printf "| %s | %.3f | %.3f | %+.3f | %.3f | %+.3f |\n", m, p, b, b - p, d, d - p}'
done
