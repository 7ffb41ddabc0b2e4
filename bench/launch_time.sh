#!/usr/bin/env bash
# Start-up time of a standalone bagua-launch job: from the moment bagua-launch is executed
# until every worker is running, with the private etcd's start included. It reports, per run
# and as medians: etcd ready (from bagua-launch's INFO log), all workers running (the latest
# worker start time), and the whole run including shutdown and clean-up.
#
# Usage: bench/launch_time.sh [--launch PATH] [--agent PATH] [--runs N] [--nproc N]
#   defaults: build/launcher/bagua-launch, the agent bagua-launch finds itself, 10 runs, 4.
# Each worker records its start time (date +%s%N) in a file and exits; nothing is asserted.
set -euo pipefail

LAUNCH=build/launcher/bagua-launch
AGENT=()
RUNS=10
NPROC=4
while [ $# -gt 0 ]; do
  case "$1" in
    --launch) LAUNCH=$2; shift 2 ;;
    --agent) AGENT=(--agent "$2"); shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --nproc) NPROC=$2; shift 2 ;;
    *) echo "usage: $0 [--launch PATH] [--agent PATH] [--runs N] [--nproc N]" >&2; exit 2 ;;
  esac
done
[ -x "$LAUNCH" ] || { echo "$LAUNCH is not built" >&2; exit 2; }

now_us() { local t=$EPOCHREALTIME; echo "${t/./}"; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

etcd_ms=() ; ready_ms=() ; total_ms=()
printf '%-4s %12s %20s %14s\n' run etcd_ready_ms all_workers_running_ms total_ms
for run in $(seq 1 "$RUNS"); do
  dir=$(mktemp -d /tmp/bagua-launch-bench-XXXXXX)
  t0=$(now_us)
  BAGUA_DEBUG=INFO BAGUA_DEBUG_SUBSYS=LAUNCH "$LAUNCH" "${AGENT[@]}" --nproc-per-node "$NPROC" \
    -- sh -c 'date +%s%N > "$0/w$RANK"' "$dir" > "$dir/launch.log" 2>&1
  t1=$(now_us)
  n=$(ls "$dir"/w* 2>/dev/null | wc -l)
  if [ "$n" -ne "$NPROC" ]; then
    echo "run $run: only $n of $NPROC workers ran; log:" >&2
    cat "$dir/launch.log" >&2
    rm -rf "$dir"
    exit 1
  fi
  last_ns=$(cat "$dir"/w* | sort -n | tail -1)
  ready=$(( (last_ns / 1000 - t0) / 1000 ))
  total=$(( (t1 - t0) / 1000 ))
  etcd=$(sed -n 's/.*private etcd at .* ready in \([0-9]*\) ms.*/\1/p' "$dir/launch.log")
  printf '%-4s %12s %20s %14s\n' "$run" "${etcd:-?}" "$ready" "$total"
  etcd_ms+=("${etcd:-0}"); ready_ms+=("$ready"); total_ms+=("$total")
  rm -rf "$dir"
done
printf '%-4s %12s %20s %14s\n' median \
  "$(printf '%s\n' "${etcd_ms[@]}" | median)" \
  "$(printf '%s\n' "${ready_ms[@]}" | median)" \
  "$(printf '%s\n' "${total_ms[@]}" | median)"
echo "command: $LAUNCH ${AGENT[*]} --nproc-per-node $NPROC -- sh -c 'date +%s%N > \$0/w\$RANK' DIR"
