#!/usr/bin/env bash
# Trains the Fashion-MNIST MLP with every Bagua algorithm on N local ranks, each rank emulating
# its own node (BAGUA_NODE_ID), so compressed algorithms really compress over TCP.
# Prints one row per algorithm: final test accuracy, bytes per step, samples/s, and whether
# all ranks ended with identical parameters.
#
# REPEAT (environment, default 1) trains every algorithm that many times, interleaved (each
# repeat runs every algorithm once, so that load from elsewhere falls on all of them alike);
# a measured cell then reads "median [min-max]", and with fewer than 3 repeats it lists the
# runs instead. Every run is kept, with the load average at its end, in the record that
# bench/record.py describes (BENCH_RECORD_DIR names its directory).
# usage: [REPEAT=3] bench/fm_algorithms.sh [BUILD_DIR] [NRANKS] [EPOCHS]
#          [extra fashion_mnist flags...]
set -euo pipefail
. "$(dirname "$0")/record.sh"
record_argv "$0" "$@"
build=${1:-build}; n=${2:-4}; epochs=${3:-5}; shift $(( $# < 3 ? $# : 3 ))
repeat=${REPEAT:-1}
[[ $repeat =~ ^[1-9][0-9]*$ ]] ||
  { echo "REPEAT=\"$repeat\" is not a positive integer" >&2; exit 2; }
exe=$build/examples/fashion_mnist
[ -x "$exe" ] || { echo "missing $exe: build the project first" >&2; exit 2; }
record_open fm_algorithms "" ranks epochs test_acc:fraction bytes_per_step:bytes \
  samples_per_s:samples/s overlap:% distinct_params:ranks
tmp=$(mktemp -d)
on_exit() { local rc=$?; rm -rf "$tmp"; record_close "$rc"; }
trap on_exit EXIT
algorithms="gradient_allreduce bytegrad decentralized low_precision_decentralized qadam async"
declare -A acc=() bytes=() sps=() ovl=() distinct=()
for ((i = 0; i < repeat; i++)); do
  for alg in $algorithms; do
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    pids=()
    for ((r = 0; r < n; r++)); do
      RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port BAGUA_NODE_ID=node$r \
        timeout 900 "$exe" --algorithm "$alg" --epochs "$epochs" "$@" >"$tmp/$alg.$r" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || { echo "$alg: a rank failed:" >&2; tail -5 "$tmp/$alg".* >&2; exit 1; }; done
    last=$(grep "^epoch $epochs/" "$tmp/$alg.0")
    a=$(grep -h '^final' "$tmp/$alg.0" | sed 's/.*test_acc=//')
    b=$(echo "$last" | sed 's/.*bytes\/step \([0-9]*\).*/\1/')
    s=$(echo "$last" | sed 's/.*samples\/s \([0-9]*\).*/\1/')
    o=$(echo "$last" | sed 's/.*overlap \([0-9.]*\)%.*/\1/')
    d=$(grep -h '^final' "$tmp/$alg".* | sed 's/.*params_crc=\([0-9a-f]*\).*/\1/' | sort -u | wc -l)
    record_row "$alg" "$i" "$n" "$epochs" "$a" "$b" "$s" "$o" "$d"
    acc[$alg]+="$a " bytes[$alg]+="$b " sps[$alg]+="$s " ovl[$alg]+="$o "
    # The most distinct parameter sets any run of this algorithm ended with.
    [ "${distinct[$alg]:-0}" -ge "$d" ] || distinct[$alg]=$d
  done
done

record_runs_note "$repeat"
printf '| algorithm | ranks | epochs | test_acc | bytes/step | vs allreduce | samples/s | overlap %% | identical params |\n'
printf '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n'
base=$(record_median ${bytes[gradient_allreduce]})
for alg in $algorithms; do
  ratio=$(awk -v a="$(record_median ${bytes[$alg]})" -v b="$base" 'BEGIN {printf "%.3f", a / b}')
  d=${distinct[$alg]}
  printf '| %s | %d | %d | %s | %s | %s | %s | %s | %s |\n' "$alg" "$n" "$epochs" \
    "$(record_stat .4f ${acc[$alg]})" "$(record_stat .0f ${bytes[$alg]})" "$ratio" \
    "$(record_stat .0f ${sps[$alg]})" "$(record_stat .1f ${ovl[$alg]})" \
    "$([ "$d" = 1 ] && echo yes || echo "no ($d distinct)")"
done
