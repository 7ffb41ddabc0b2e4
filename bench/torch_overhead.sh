#!/usr/bin/env bash
# The PyTorch front end's own cost per step: examples/torch/train.py on ONE process (no peer,
# so no communication time), the plain torch loop (--plain) against the same loop under
# with_bagua(gradient_allreduce) and under torch DDP (Gloo, world 1). With one rank libbagua
# still runs everything a step does (the gradient-ready hook per parameter, bucket hand-off to
# the communication thread, the post-backward wait, the wrapped optimizer step), so the
# difference to --plain is the front end's overhead. Interleaved repeats (plain, with_bagua,
# DDP, plain, ...); a cell reads "median [min-max]" over the repeats (with fewer than 3, the
# runs themselves), and the overheads are differences of the medians. Every run is also kept,
# with the load average at its end, in the record that bench/record.py describes
# (--record-dir DIR, or BENCH_RECORD_DIR, names its directory).
#
# usage: bench/torch_overhead.sh [--build build] [--models "cnn wide"] [--steps 300] [--repeat 5]
#          [--record-dir DIR]
set -euo pipefail
. "$(dirname "$0")/record.sh"
. "$(dirname "$0")/free_port.sh"
record_argv "$0" "$@"
cd "$(dirname "$0")/.."
build=build models="cnn" steps=300 repeat=5
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --record-dir) export BENCH_RECORD_DIR=$2; shift 2 ;;
    *) echo "unknown argument $1; see the header of $0" >&2; exit 2 ;;
  esac
done
py=/usr/bin/python3
# --build may be relative to the checkout (the default) or absolute.
case $build in /*) ;; *) build=$PWD/$build ;; esac
export PYTHONPATH=$build/python OMP_NUM_THREADS=1
[[ $repeat =~ ^[1-9][0-9]*$ ]] ||
  { echo "--repeat \"$repeat\" is not a positive integer" >&2; exit 2; }
record_open torch_overhead torch model loop_ms:ms/step
trap 'record_close $?' EXIT

# loop_ms MODEL VARIANT -> the training loop's ms per step of one run
loop_ms() {
  local model=$1 variant=$2 extra=()
  case $variant in
    plain) extra=(--plain) ;;
    ddp) extra=(--ddp) ;;
    bagua) extra=(--algorithm gradient_allreduce) ;;
  esac
  RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$(free_port) timeout 600 $py examples/torch/train.py \
    --model "$model" --epochs 1 --max-steps "$steps" --test-limit 100 "${extra[@]}" |
    grep -oE 'loop [0-9.]+ ms/step' | grep -oE '[0-9.]+'
}

echo "machine: $(nproc --all) vCPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs);" \
  "torch $($py -c 'import torch; print(torch.__version__)'); git $(git rev-parse --short HEAD)"
echo "one process, $steps steps of batch 64, median [min-max] of $repeat interleaved repeats"
record_runs_note "$repeat"
echo
echo "| model | plain torch ms/step | with_bagua ms/step | overhead ms/step | torch DDP ms/step | DDP overhead ms/step |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for model in $models; do
  declare -A runs=([plain]="" [bagua]="" [ddp]="")
  for ((i = 0; i < repeat; i++)); do
    for variant in plain bagua ddp; do
      v=$(loop_ms "$model" "$variant")
      record_row "$variant" "$i" "$model" "$v"
      runs[$variant]+="$v "
    done
  done
  mp=$(record_median ${runs[plain]}) mb=$(record_median ${runs[bagua]})
  md=$(record_median ${runs[ddp]})
  echo "| $model | $(record_stat .3f ${runs[plain]}) | $(record_stat .3f ${runs[bagua]})" \
    "| $(awk -v a="$mb" -v b="$mp" 'BEGIN {printf "%+.3f", a - b}')" \
    "| $(record_stat .3f ${runs[ddp]})" \
    "| $(awk -v a="$md" -v b="$mp" 'BEGIN {printf "%+.3f", a - b}') |"
  unset runs
done
