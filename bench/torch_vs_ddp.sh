#!/usr/bin/env bash
# The PyTorch front end against torch DDP (Gloo) on the same script, machine and run:
# examples/torch/train.py with --ddp and with each Bagua algorithm, interleaved, on N local
# ranks (each its own emulated node, so compression and peer exchanges cross "nodes").
# Prints a markdown table: median samples/s over --repeat runs (the whole run after set-up,
# evaluation included) and its ratio to DDP; the steady-state step time (the training loop
# without its first 2 steps and without evaluation: with few steps of a big model, the fixed
# costs in samples/s pull every ratio towards 1) and DDP's steady step time over it; rank 0's
# forward+backward time per step and how much of it waited for communication (libbagua's
# counter; the wait runs inside backward), bytes sent per step, and test accuracy.
#
# usage: bench/torch_vs_ddp.sh [--build build] [--nranks "2 4"] [--models "cnn wide"]
#          [--steps 150] [--repeat 3] [--algorithms "gradient_allreduce bytegrad ..."]
#          [--test-limit 10000]   (evaluating the wide model on all 10000 images takes longer
#                                  than its training steps; fewer keep a run short)
#          [--same-node]          all ranks on one emulated node, as bagua-launch runs them on
#                                  one host: libbagua then uses shared memory (default: each
#                                  rank its own node, so compression crosses "nodes" over TCP)
set -euo pipefail
cd "$(dirname "$0")/.."
build=build nranks="2 4" models="cnn wide" steps=150 repeat=3 test_limit=10000 same_node=0
algorithms="gradient_allreduce bytegrad decentralized low_precision_decentralized qadam async"
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --nranks) nranks=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --algorithms) algorithms=$2; shift 2 ;;
    --test-limit) test_limit=$2; shift 2 ;;
    --same-node) same_node=1; shift ;;
    *) echo "unknown argument $1; see the header of $0" >&2; exit 2 ;;
  esac
done
py=/usr/bin/python3
export PYTHONPATH=$PWD/$build/python OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run N MODEL ALGO -> writes rank 0's output to $tmp/out
run() {
  local n=$1 model=$2 algo=$3 port=$((20000 + RANDOM % 20000)) pids=()
  local extra=(--algorithm "$algo")
  [ "$algo" = ddp ] && extra=(--ddp)
  for ((r = 0; r < n; r++)); do
    local lr=0 lws=1 node=node$r
    [ "$same_node" = 1 ] && { lr=$r; lws=$n; node=node0; }
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$lr LOCAL_WORLD_SIZE=$lws MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port BAGUA_NODE_ID=$node GROUP_RANK=$r \
      timeout 600 $py examples/torch/train.py --model "$model" --epochs 1 \
      --max-steps "$steps" --test-limit "$test_limit" "${extra[@]}" >"$tmp/r$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { cat "$tmp"/r*; return 1; }; done
  cp "$tmp/r0" "$tmp/out"
}

field() { grep -oE "$1" "$tmp/out" | head -1 | grep -oE '[0-9.]+' | head -1; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "machine: $(nproc --all) vCPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs);" \
  "torch $($py -c 'import torch; print(torch.__version__)'); git $(git rev-parse --short HEAD)"
echo "steps: $steps per run (batch 64 per rank), median of $repeat interleaved repeats;" \
  "$([ "$same_node" = 1 ] && echo "all ranks one emulated node" || echo "each rank its own emulated node")"
echo
echo "| ranks | model | algorithm | samples/s | vs DDP | steady ms/step | steady vs DDP | fwd+bwd ms/step | of which comm wait ms | bytes/step | test_acc |"
echo "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for n in $nranks; do
  for model in $models; do
    declare -A sps=() std=() fb=() wait=() bytes=() acc=()
    for ((i = 0; i < repeat; i++)); do
      for algo in ddp $algorithms; do
        run "$n" "$model" "$algo"
        sps[$algo]+="$(field '[0-9]+ samples/s, fwd' ) "
        std[$algo]+="$(field 'steady [0-9.]+') "
        fb[$algo]+="$(field 'fwd\+bwd [0-9.]+') "
        wait[$algo]+="$(field 'communication [0-9.]+') "
        bytes[$algo]+="$(field '[0-9]+ bytes/step') "
        acc[$algo]="$(field 'test_acc=[0-9.]+')"
      done
    done
    base=$(tr ' ' '\n' <<<"${sps[ddp]}" | grep . | median)
    sbase=$(tr ' ' '\n' <<<"${std[ddp]}" | grep . | median)
    for algo in ddp $algorithms; do
      s=$(tr ' ' '\n' <<<"${sps[$algo]}" | grep . | median)
      t=$(tr ' ' '\n' <<<"${std[$algo]}" | grep . | median)
      f=$(tr ' ' '\n' <<<"${fb[$algo]}" | grep . | median)
      w=$(tr ' ' '\n' <<<"${wait[$algo]}" | grep . | median)
      b=$(tr ' ' '\n' <<<"${bytes[$algo]}" | grep . | median)
      [ "$algo" = ddp ] && { w=n/a; b=n/a; }
      ratio=$(awk -v a="$s" -v b="$base" 'BEGIN {printf "%.2f", a / b}')
      sratio=$(awk -v a="$t" -v b="$sbase" 'BEGIN {printf "%.2f", b / a}')
      echo "| $n | $model | $algo | $s | $ratio | $t | $sratio | $f | $w | $b | ${acc[$algo]} |"
    done
    unset sps std fb wait bytes acc
  done
done
