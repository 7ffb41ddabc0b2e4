#!/usr/bin/env bash
# Autotuning against a grid (docs/autotune.md): trains the Fashion-MNIST MLP (default
# 784-3072-3072-10, 11.9 M parameters) with gradient_allreduce on N local ranks, each group of
# RPN ranks emulating one node (BAGUA_NODE_ID), so the ranks talk TCP and the streams and the
# ring segment matter. First every point of a fixed grid over the same parameters autotuning
# searches (bucket size x streams x segment, x hierarchical when there are several nodes of
# several ranks), autotuning off; then one run with BAGUA_AUTOTUNE=1 from the defaults.
#
# Throughput is the example's samples/s of one steady epoch of STEPS steps: the second epoch
# for a grid point (the first absorbs start-up), the third for the autotuned run (its first
# 2 * STEPS >= 80 steps hold the whole search with the default windows: 5 warm-up steps and at
# most 12 trials of 1 + 5 steps). Prints one row per grid point, the autotuned run's choice and
# steady samples/s, and its ratio to the best grid point (target: >= 0.95). The grid is a
# screening; the ratio comes from REPEAT (3) interleaved runs of the best grid point and of
# autotuning, so that load from elsewhere falls on both alike, and is the ratio of their
# medians; each side is printed as "median [min-max]" (with fewer than 3 runs, the runs). Every
# run, screening included, is kept with the load average at its end in the record that
# bench/record.py describes (BENCH_RECORD_DIR names its directory).
#
# usage: bench/autotune.sh [BUILD_DIR] [STEPS] [extra fashion_mnist flags...]
#   environment: N (ranks, 2), RPN (ranks per node, 1), BUCKETS (bytes, "2097152 8388608
#   33554432"), STREAMS ("1 2 4"), SEGMENTS ("262144 1048576"), HIDDEN (3072,3072), REPEAT (3)
set -euo pipefail
. "$(dirname "$0")/record.sh"
record_argv "$0" "$@"
build=${1:-build}; steps=${2:-40}; shift $(( $# < 2 ? $# : 2 ))
n=${N:-2}; rpn=${RPN:-1}; hidden=${HIDDEN:-3072,3072}
buckets=${BUCKETS:-"2097152 8388608 33554432"}
streams=${STREAMS:-"1 2 4"}
segments=${SEGMENTS:-"262144 1048576"}
hiers="0"; (( rpn > 1 && n / rpn > 1 )) && hiers="0 1"
exe=$build/examples/fashion_mnist
[ -x "$exe" ] || { echo "missing $exe: build the target fashion_mnist first" >&2; exit 2; }
repeat=${REPEAT:-3}
[[ $repeat =~ ^[1-9][0-9]*$ ]] ||
  { echo "REPEAT=\"$repeat\" is not a positive integer" >&2; exit 2; }
record_open autotune "" phase bucket_bytes:B hierarchical streams segment_bytes:B epoch \
  samples_per_s:samples/s
tmp=$(mktemp -d)
on_exit() { local rc=$?; rm -rf "$tmp"; record_close "$rc"; }
trap on_exit EXIT
batch=64

# run TAG EPOCHS [VAR=VALUE...] -> rank outputs in $tmp/TAG.<rank>
run() {
  local tag=$1 epochs=$2; shift 2
  local port pids=()
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  for ((r = 0; r < n; r++)); do
    env "$@" RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
      BAGUA_NODE_ID=node$((r / rpn)) timeout 900 "$exe" --algorithm gradient_allreduce \
      --hidden "$hidden" --batch-size $batch --epochs "$epochs" \
      --limit-train $((steps * batch * n)) --limit-test 256 "${extra[@]}" \
      >"$tmp/$tag.$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    wait "$p" || { echo "autotune.sh: $tag: a rank failed:" >&2; tail -5 "$tmp/$tag".* >&2; exit 1; }
  done
}
# sps TAG EPOCH -> rank 0's samples/s in that epoch
sps() { grep "^epoch $2/" "$tmp/$1.0" | sed 's/.*samples\/s \([0-9]*\).*/\1/'; }

extra=("$@")
echo "# $(nproc) CPUs, $n ranks ($rpn per node), --hidden $hidden, $steps steps per epoch, batch $batch per rank"
printf '| bucket_bytes | hierarchical | streams | segment_bytes | samples/s |\n| ---: | ---: | ---: | ---: | ---: |\n'
best=0 best_pt="" best_env=""
for b in $buckets; do for h in $hiers; do for s in $streams; do for g in $segments; do
  tag="grid_${b}_${h}_${s}_${g}"
  run "$tag" 2 BAGUA_AUTOTUNE=0 BAGUA_BUCKET_SIZE="$b" BAGUA_HIERARCHICAL="$h" \
    BAGUA_NET_NSTREAMS="$s" BAGUA_NET_SEGMENT_BYTES="$g"
  v=$(sps "$tag" 2)
  record_row grid 0 screening "$b" "$h" "$s" "$g" 2 "$v"
  printf '| %s | %s | %s | %s | %s |\n' "$b" "$h" "$s" "$g" "$v"
  if (( v > best )); then
    best=$v best_pt="bucket $b, hierarchical $h, streams $s, segment $g" best_env="$b $h $s $g"
  fi
done; done; done; done

# The comparison itself: the best grid point and the autotuned run, interleaved REPEAT times so
# that load from elsewhere falls on both alike; medians of each.
read -r bb bh bs bg <<<"$best_env"
grid_runs=() auto_runs=()
for ((i = 0; i < repeat; i++)); do
  run "best$i" 2 BAGUA_AUTOTUNE=0 BAGUA_BUCKET_SIZE="$bb" BAGUA_HIERARCHICAL="$bh" \
    BAGUA_NET_NSTREAMS="$bs" BAGUA_NET_SEGMENT_BYTES="$bg"
  grid_runs+=("$(sps "best$i" 2)")
  record_row best "$i" comparison "$bb" "$bh" "$bs" "$bg" 2 "${grid_runs[-1]}"
  run "auto$i" 3 BAGUA_AUTOTUNE=1
  auto_runs+=("$(sps "auto$i" 3)")
  record_row autotuned "$i" comparison auto auto auto auto 3 "${auto_runs[-1]}"
  grep -h "bagua autotune: done" "$tmp/auto$i.0" | sed "s/^/autotuned run $i: /" ||
    echo "autotuned run $i: the search did not end within the run (no \"autotune: done\")"
  echo "autotuned run $i: epochs 1-3 (tuning ends within the first 80 steps): $(sps "auto$i" 1), $(sps "auto$i" 2), $(sps "auto$i" 3) samples/s"
done
g=$(record_median "${grid_runs[@]}") a=$(record_median "${auto_runs[@]}")
echo
record_runs_note "$repeat"
echo "best grid point ($best_pt): screening $best samples/s; interleaved runs ${grid_runs[*]}" \
  "-> median [min-max] $(record_stat .0f "${grid_runs[@]}")"
echo "autotuned (epoch 3, after tuning): runs ${auto_runs[*]}" \
  "-> median [min-max] $(record_stat .0f "${auto_runs[@]}")"
/usr/bin/python3 -c "print(f'ratio autotuned / best grid point: {$a / $g:.3f} (target >= 0.95)')"
