#!/usr/bin/env bash
# The PyTorch front end against torch DDP (Gloo) on the same script, machine and run:
# examples/torch/train.py with --ddp and with each Bagua algorithm, interleaved, on N local
# ranks (each its own emulated node, so compression and peer exchanges cross "nodes").
# Prints a markdown table: samples/s over --repeat runs (the whole run after set-up,
# evaluation included) and the ratio of its median to DDP's; the steady-state step time (the
# training loop without its first 2 steps and without evaluation: with few steps of a big
# model, the fixed costs in samples/s pull every ratio towards 1) and DDP's steady step time
# over it; rank 0's forward+backward time per step and how much of it waited for communication
# (libbagua's counter; the wait runs inside backward), bytes sent per step, and test accuracy.
# A measured cell reads "median [min-max]" over the runs; with fewer than 3 runs it lists them.
# Every run is kept, with the load average at its end, in the record that bench/record.py
# describes (--record-dir DIR, or BENCH_RECORD_DIR, names its directory).
#
# usage: bench/torch_vs_ddp.sh [--build build] [--nranks "2 4"] [--models "cnn wide"]
#          [--steps 150] [--repeat 3] [--algorithms "gradient_allreduce bytegrad ..."]
#          [--test-limit 10000]   (evaluating the wide model on all 10000 images takes longer
#                                  than its training steps; fewer keep a run short)
#          [--same-node]          all ranks on one emulated node, as bagua-launch runs them on
#                                  one host: libbagua then uses shared memory (default: each
#                                  rank its own node, so compression crosses "nodes" over TCP)
#          [--record-dir DIR]
# --algorithms may also name torch DDP's communication hooks, "ddp:hook=fp16" and
# "ddp:hook=powersgd+rank=R[+start=K]" (bench/variants.sh): they run interleaved with the
# others, the table's "vs DDP" ratios are still to plain DDP, which always runs first.
set -euo pipefail
. "$(dirname "$0")/record.sh"
. "$(dirname "$0")/free_port.sh"
. "$(dirname "$0")/variants.sh"
record_argv "$0" "$@"
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
declare -A ddp_args_of=([ddp]=--ddp)
for algo in $algorithms; do
  if [ "$algo" = ddp ]; then
    echo "torch_vs_ddp: --algorithms: ddp always runs first (the baseline); name only" \
      "Bagua algorithms and ddp:hook=... variants there" >&2
    exit 2
  fi
  if variant_is_ddp "$algo"; then
    ddp_args_of[$algo]=$(ddp_variant_args "$algo" torch_vs_ddp) || exit 2
  fi
done
record_open torch_vs_ddp torch nranks model samples_per_s:samples/s steady_ms:ms/step \
  fwd_bwd_ms:ms/step comm_wait_ms:ms/step bytes_per_step:bytes test_acc:fraction
tmp=$(mktemp -d)
on_exit() { local rc=$?; rm -rf "$tmp"; record_close "$rc"; }
trap on_exit EXIT

# run N MODEL ALGO -> writes rank 0's output to $tmp/out
run() {
  local n=$1 model=$2 algo=$3 port pids=()
  port=$(free_port)
  local extra=(--algorithm "$algo")
  variant_is_ddp "$algo" && mapfile -t extra <<<"${ddp_args_of[$algo]}"
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

echo "machine: $(nproc --all) vCPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs);" \
  "torch $($py -c 'import torch; print(torch.__version__)'); git $(git rev-parse --short HEAD)"
echo "steps: $steps per run (batch 64 per rank), median [min-max] of $repeat interleaved repeats;" \
  "$([ "$same_node" = 1 ] && echo "all ranks one emulated node" || echo "each rank its own emulated node")"
record_runs_note "$repeat"
echo
echo "| ranks | model | algorithm | samples/s | vs DDP | steady ms/step | steady vs DDP | fwd+bwd ms/step | of which comm wait ms | bytes/step | test_acc |"
echo "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for n in $nranks; do
  for model in $models; do
    declare -A sps=() std=() fb=() wait=() bytes=() acc=()
    # Interleaved: every repeat runs DDP and each algorithm once, so that load from elsewhere
    # falls on all of them alike.
    for ((i = 0; i < repeat; i++)); do
      for algo in ddp $algorithms; do
        run "$n" "$model" "$algo"
        s=$(field '[0-9]+ samples/s, fwd') t=$(field 'steady [0-9.]+') f=$(field 'fwd\+bwd [0-9.]+')
        w=$(field 'communication [0-9.]+') b=$(field '[0-9]+ bytes/step') a=$(field 'test_acc=[0-9.]+')
        variant_is_ddp "$algo" && { w=n/a; b=n/a; }
        record_row "$algo" "$i" "$n" "$model" "$s" "$t" "$f" "$w" "$b" "$a"
        sps[$algo]+="$s " std[$algo]+="$t " fb[$algo]+="$f " wait[$algo]+="$w "
        bytes[$algo]+="$b " acc[$algo]+="$a "
      done
    done
    base=$(record_median ${sps[ddp]})
    sbase=$(record_median ${std[ddp]})
    for algo in ddp $algorithms; do
      s=$(record_median ${sps[$algo]})
      t=$(record_median ${std[$algo]})
      ratio=$(awk -v a="$s" -v b="$base" 'BEGIN {printf "%.2f", a / b}')
      sratio=$(awk -v a="$t" -v b="$sbase" 'BEGIN {printf "%.2f", b / a}')
      echo "| $n | $model | $algo | $(record_stat .0f ${sps[$algo]}) | $ratio" \
        "| $(record_stat .3f ${std[$algo]}) | $sratio | $(record_stat .2f ${fb[$algo]})" \
        "| $(record_stat .2f ${wait[$algo]}) | $(record_stat .0f ${bytes[$algo]})" \
        "| $(record_stat .4f ${acc[$algo]}) |"
    done
    unset sps std fb wait bytes acc
  done
done
