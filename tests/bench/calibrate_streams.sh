#!/usr/bin/env bash
# The stream count a TCP communicator calibrates at creation (comm/calibrate.c), on real shaped
# links: 3 emulated hosts (bench/netsim/netsim.sh, tbf), one bagua-bench rank each (env://
# bootstrap). At 100 Mbit/s every rank must use one stream per peer, at 10 Gbit/s keep the
# registry's two, and at 100 Mbit/s with BAGUA_NET_NSTREAMS=2 set keep the user's two. The
# count is read from each rank's INFO line of the calibration. Exits 77 (skipped) where
# network namespaces cannot be made.
# usage: calibrate_streams.sh BAGUA_BENCH
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
netsim=$here/../../bench/netsim/netsim.sh
bench=${1:?usage: calibrate_streams.sh BAGUA_BENCH}

# ---- Inside a cluster: calibrate_streams.sh BENCH --inner: each rank's calibration line ----
if [ "${2:-}" = --inner ]; then
  IFS=, read -ra H <<<"$NETSIM_HOSTS"
  IFS=, read -ra A <<<"$NETSIM_ADDRS"
  n=${#H[@]} port=$((20000 + RANDOM % 20000)) rc=0 pids=()
  out=$(mktemp -d)
  for ((i = 0; i < n; i++)); do
    ip netns exec "${H[$i]}" env RANK=$i WORLD_SIZE=$n MASTER_ADDR="${A[0]}" MASTER_PORT=$port \
      BAGUA_NODE_ID="${H[$i]}" BAGUA_DEBUG=INFO BAGUA_DEBUG_SUBSYS=COMM timeout 60 "$bench" \
      allreduce --nranks "$n" --transport tcp --min-bytes 4096 --max-bytes 4096 --iters 2 \
      --warmup 1 --check >"$out/$i.out" 2>"$out/$i.err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  for ((i = 0; i < n; i++)); do
    grep -h "calibrated" "$out/$i.err" || echo "rank $i: no calibration line; its stderr: $(tail -3 "$out/$i.err")"
  done
  rm -rf "$out"
  exit $rc
fi

# ---- The test ----
. "$here/netns_preflight.sh"
netns_preflight
[ -x "$bench" ] || { echo "FAIL: $bench is not built"; exit 1; }

fails=0
tag=s$(($$ % 100000)) # cluster names: at most 8 characters (netsim.sh --name)

# expect RATE STREAMS [VAR=VALUE...]: every one of the 3 ranks reports STREAMS stream(s).
expect() {
  local rate=$1 want=$2 lines got
  shift 2
  lines=$(env "$@" "$netsim" run --hosts 3 --rate "$rate" --name "$tag" -- "$0" "$bench" --inner)
  local rc=$?
  got=$(grep -c " $want stream(s) per peer" <<<"$lines")
  echo "$rate ${*:-(defaults)}: $got of 3 ranks report $want stream(s) (rc $rc)"
  if [ "$rc" != 0 ] || [ "$got" != 3 ]; then
    echo "FAIL: $rate ${*:-}: expected $want stream(s) on every rank; the ranks said:"
    echo "$lines"
    fails=$((fails + 1))
  fi
}

expect 100mbit 1
expect 10gbit 2
expect 100mbit 2 BAGUA_NET_NSTREAMS=2
[ "$fails" = 0 ] && echo "PASS calibrate_streams"
exit $((fails > 0))
