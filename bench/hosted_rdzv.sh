#!/usr/bin/env bash
# The rendezvous nodes host for torchrun's c10d backend, against the same job on an etcd of its
# own: N bagua-launch commands on this machine (node addresses 127.0.0.2 ... 127.0.0.N+1), one
# sleeping worker each, timed from the first launch to every node's first round, and etcd's
# requests counted (grpc_server_handled_total, summed over every member) once formed.
#
#   bench/hosted_rdzv.sh [--launch PATH] [--nodes "4 8 16"] [--runs 3]
#
# Prints one line per run (variant, N, run, seconds to form, requests, requests per node, exit
# statuses), the variants interleaved within each run. "etcd" is the same command with
# --rdzv_backend etcd against an etcd-server this script starts (its requests are the agents'
# own); "hosted" is --rdzv_backend c10d with nothing started. The difference per node is what
# hosting costs. Processes are stopped by their PIDs.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
LAUNCH=build/launcher/bagua-launch
NODES="4 8 16"
RUNS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --launch) LAUNCH=$2; shift 2 ;;
    --nodes) NODES=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    *) echo "usage: $0 [--launch PATH] [--nodes \"4 8 16\"] [--runs N]" >&2; exit 2 ;;
  esac
done
[ -x "$LAUNCH" ] || { echo "$LAUNCH is not built" >&2; exit 2; }
command -v etcdctl >/dev/null || { echo "etcdctl missing (Debian package etcd-client)" >&2; exit 2; }
TMP=$(mktemp -d /tmp/bagua-hosted-XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sleep 1
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT

# shellcheck source=bench/free_port.sh
. bench/free_port.sh

# Sum of grpc_server_handled_total over the client URLs given.
requests() {
  local total=0 url
  for url in "$@"; do
    local n
    n=$(curl -s "$url/metrics" | awk '/^grpc_server_handled_total/ {s += $2} END {printf "%d", s}')
    total=$((total + ${n:-0}))
  done
  echo "$total"
}

# run VARIANT N RUN
run() {
  local variant=$1 n=$2 r=$3 port etcd_pid="" dir=$TMP/$1-$2-$3 urls=()
  mkdir -p "$dir"
  port=$(free_port)
  local flags=(--nnodes="$n" --nproc_per_node=1 --rdzv_id="hr$r" --lease-ttl 10)
  if [ "$variant" = etcd ]; then
    local peer
    peer=$(free_port)
    etcd --name b --data-dir "$dir/etcd" --listen-client-urls "http://127.0.0.2:$port" \
      --advertise-client-urls "http://127.0.0.2:$port" --listen-peer-urls "http://127.0.0.1:$peer" \
      --initial-advertise-peer-urls "http://127.0.0.1:$peer" --initial-cluster "b=http://127.0.0.1:$peer" \
      >"$dir/etcd.log" 2>&1 &
    etcd_pid=$!
    PIDS+=("$etcd_pid")
    for _ in $(seq 100); do curl -s "http://127.0.0.2:$port/health" | grep -q true && break; sleep 0.1; done
    flags+=(--rdzv_backend=etcd --rdzv_endpoint="127.0.0.2:$port")
  else
    flags+=(--rdzv_backend=c10d --rdzv_endpoint="127.0.0.2:$port")
  fi
  local t0 pids=() i
  t0=$(date +%s.%N)
  for i in $(seq 1 "$n"); do
    "$LAUNCH" "${flags[@]}" --local_addr "127.0.0.$((i + 1))" -- sh -c 'sleep 3' \
      >"$dir/n$i.log" 2>&1 &
    pids+=($!)
    PIDS+=($!)
  done
  # Formed: every node printed its first round.
  local formed="" t
  for _ in $(seq 600); do
    local k=0
    for i in $(seq 1 "$n"); do grep -q "round .*: node .* of $n," "$dir/n$i.log" && k=$((k + 1)); done
    if [ "$k" = "$n" ]; then formed=$(date +%s.%N); break; fi
    sleep 0.05
  done
  t=$(awk -v a="$t0" -v b="${formed:-0}" 'BEGIN { if (b > 0) printf "%.2f", b - a; else print "-" }')
  urls=("http://127.0.0.2:$port")
  if [ "$variant" = hosted ]; then
    mapfile -t urls < <(ETCDCTL_API=3 etcdctl --endpoints "127.0.0.2:$port" member list 2>/dev/null |
      awk -F', ' '$5 != "" {print $5}')
  fi
  local req
  req=$(requests "${urls[@]}")
  local codes=""
  for p in "${pids[@]}"; do wait "$p"; codes="$codes$?"; done
  [ -n "$etcd_pid" ] && kill "$etcd_pid" 2>/dev/null && wait "$etcd_pid" 2>/dev/null
  printf '%-7s N=%-3d run=%d form_s=%-6s requests=%-6d per_node=%-6s exits=%s\n' "$variant" "$n" \
    "$r" "$t" "$req" "$(awk -v a="$req" -v b="$n" 'BEGIN {printf "%.1f", a / b}')" "$codes"
}

for r in $(seq 1 "$RUNS"); do
  for n in $NODES; do
    for v in etcd hosted; do run "$v" "$n" "$r"; done
  done
done
