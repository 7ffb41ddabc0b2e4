#!/usr/bin/env bash
# Start-up time of a standalone bagua-launch job: from the moment bagua-launch is executed
# until every worker is running, with the private etcd's start included. It reports, per run
# and as medians: etcd ready (from bagua-launch's INFO log), all workers running (the latest
# worker start time), and the whole run including shutdown and clean-up. The last line gives
# each as "median [min-max]" (with fewer than 3 runs, the runs themselves).
#
# Usage: bench/launch_time.sh [--launch PATH] [--agent PATH] [--runs N] [--nproc N]
#                             [--record-dir DIR]
#   defaults: build/launcher/bagua-launch, the agent bagua-launch finds itself, 10 runs, 4.
# Each worker records its start time (date +%s%N) in a file and exits; nothing is asserted.
# Every run is also kept, with the load average at its end, in the record that
# bench/record.py describes (--record-dir DIR, or BENCH_RECORD_DIR, names its directory).
set -euo pipefail
. "$(dirname "$0")/record.sh"
record_argv "$0" "$@"

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
    --record-dir) export BENCH_RECORD_DIR=$2; shift 2 ;;
    *) echo "usage: $0 [--launch PATH] [--agent PATH] [--runs N] [--nproc N] [--record-dir DIR]" >&2
       exit 2 ;;
  esac
done
[ -x "$LAUNCH" ] || { echo "$LAUNCH is not built" >&2; exit 2; }
record_open launch_time "" nproc etcd_ready_ms:ms all_workers_running_ms:ms total_ms:ms
trap 'record_close $?' EXIT

now_us() { local t=$EPOCHREALTIME; echo "${t/./}"; }

etcd_ms=() ; ready_ms=() ; total_ms=()
printf '%-16s %14s %22s %16s\n' run etcd_ready_ms all_workers_running_ms total_ms
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
  printf '%-16s %14s %22s %16s\n' "$run" "${etcd:-?}" "$ready" "$total"
  record_row bagua-launch "$run" "$NPROC" "${etcd:-n/a}" "$ready" "$total"
  etcd_ms+=("${etcd:-n/a}"); ready_ms+=("$ready"); total_ms+=("$total")
  rm -rf "$dir"
done
record_runs_note "$RUNS"
printf '%-16s %14s %22s %16s\n' "median [min-max]" \
  "$(record_stat .0f "${etcd_ms[@]}")" \
  "$(record_stat .0f "${ready_ms[@]}")" \
  "$(record_stat .0f "${total_ms[@]}")"
echo "command: $LAUNCH ${AGENT[*]} --nproc-per-node $NPROC -- sh -c 'date +%s%N > \$0/w\$RANK' DIR"
