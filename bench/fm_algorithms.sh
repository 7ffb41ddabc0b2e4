#!/usr/bin/env bash
# Trains the Fashion-MNIST MLP with every Bagua algorithm on N local ranks, each rank emulating
# its own node (BAGUA_NODE_ID), so compressed algorithms really compress over TCP.
# Prints one row per algorithm: final test accuracy, bytes per step, samples/s, and whether
# all ranks ended with identical parameters.
# usage: bench/fm_algorithms.sh [BUILD_DIR] [NRANKS] [EPOCHS] [extra fashion_mnist flags...]
set -euo pipefail
build=${1:-build}; n=${2:-4}; epochs=${3:-5}; shift $(( $# < 3 ? $# : 3 ))
exe=$build/examples/fashion_mnist
[ -x "$exe" ] || { echo "missing $exe: build the project first" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf '| algorithm | ranks | epochs | test_acc | bytes/step | vs allreduce | samples/s | overlap | identical params |\n'
printf '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n'
base=""
for alg in gradient_allreduce bytegrad decentralized low_precision_decentralized qadam async; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  pids=()
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port BAGUA_NODE_ID=node$r \
      timeout 900 "$exe" --algorithm "$alg" --epochs "$epochs" "$@" >"$tmp/$alg.$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { echo "$alg: a rank failed:" >&2; tail -5 "$tmp/$alg".* >&2; exit 1; }; done
  last=$(grep "^epoch $epochs/" "$tmp/$alg.0")
  acc=$(grep -h '^final' "$tmp/$alg.0" | sed 's/.*test_acc=//')
  bytes=$(echo "$last" | sed 's/.*bytes\/step \([0-9]*\).*/\1/')
  sps=$(echo "$last" | sed 's/.*samples\/s \([0-9]*\).*/\1/')
  ovl=$(echo "$last" | sed 's/.*overlap \([0-9.]*%\).*/\1/')
  crcs=$(grep -h '^final' "$tmp/$alg".* | sed 's/.*params_crc=\([0-9a-f]*\).*/\1/' | sort -u | wc -l)
  [ -z "$base" ] && base=$bytes
  ratio=$(python3 -c "print(f'{$bytes/$base:.3f}')")
  printf '| %s | %d | %d | %s | %s | %s | %s | %s | %s |\n' "$alg" "$n" "$epochs" "$acc" "$bytes" \
    "$ratio" "$sps" "$ovl" "$([ "$crcs" = 1 ] && echo yes || echo "no ($crcs distinct)")"
done
