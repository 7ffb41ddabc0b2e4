#!/usr/bin/env bash
# In-process elastic recovery and join times for a >= 10M-parameter model (targets:
# recovery <= lease TTL + 1 s with TTL 2 s; a join adds the node within 2 s of its agent
# registering).
#
# One job of examples/fashion_mnist --elastic (MLP 784-4096-2048-10: 11.6M parameters) runs
# under real bagua-agents, one per emulated node, against a private etcd on a free loopback
# port. The script then alternates, CYCLES times:
#   kill: SIGKILL one node (its agent and worker) and wait for rank 0's first completed step
#         of the round without it; recovery = that step's wall-clock time - the kill time;
#   join: start a new agent and wait for the first completed step of the round that includes
#         it; join = that step's time - the moment the new agent registered in etcd (its INFO
#         log line "registered"), and also from the agent's start.
# Rank 0 prints "round N first_step_mono_ms T unix_ms U" after a new round's first step
# (train_elastic.c). Each time is printed as "median [min-max]" over the cycles at the end
# (with fewer than 3 cycles, the cycles themselves); nothing is asserted. Every kill and join
# is kept, with the load average at that moment, in the record that bench/record.py describes
# (--record-dir DIR, or BENCH_RECORD_DIR, names its directory).
#
# Usage: bench/elastic_recovery.sh [--build DIR] [--cycles N] [--ttl S] [--settle-ms MS]
#                                  [--algorithm A] [--hidden W1,W2] [--batch B]
#                                  [--record-dir DIR]
set -euo pipefail
. "$(dirname "$0")/record.sh"
. "$(dirname "$0")/free_port.sh"
record_argv "$0" "$@"

BUILD=build
CYCLES=3
TTL=2
SETTLE=300
ALGO=gradient_allreduce
HIDDEN=4096,2048
BATCH=16
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --cycles) CYCLES=$2; shift 2 ;;
    --ttl) TTL=$2; shift 2 ;;
    --settle-ms) SETTLE=$2; shift 2 ;;
    --algorithm) ALGO=$2; shift 2 ;;
    --hidden) HIDDEN=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --record-dir) export BENCH_RECORD_DIR=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--cycles N] [--ttl S] [--settle-ms MS] [--algorithm A]" \
            "[--hidden W1,W2] [--batch B] [--record-dir DIR]" >&2; exit 2 ;;
  esac
done
AGENT=$BUILD/agent/bagua-agent
FM=$BUILD/examples/fashion_mnist
for b in "$AGENT" "$FM" /usr/bin/etcd; do [ -x "$b" ] || { echo "$b is missing" >&2; exit 2; }; done

now_ms() { local t=$EPOCHREALTIME; t=${t/./}; echo $((t / 1000)); }

record_open elastic_recovery "" algorithm node round ms:ms from_agent_start_ms:ms
dir=$(mktemp -d /tmp/bagua-elastic-bench-XXXXXX)
pids=()
cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do pkill -KILL -P "$p" 2>/dev/null || true; kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$dir"
  record_close $rc
}
trap cleanup EXIT

cport=$(free_port); pport=$(free_port)
/usr/bin/etcd --name bench --data-dir "$dir/etcd" \
  --listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
  --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
  --initial-cluster "bench=http://127.0.0.1:$pport" > "$dir/etcd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$cport/version" > /dev/null 2>&1 && break
  sleep 0.1
done

declare -A agent_pid agent_start
start_node() { # node id
  local n=$1
  agent_start[$n]=$(now_ms)
  BAGUA_DEBUG=INFO BAGUA_DEBUG_SUBSYS=AGENT "$AGENT" --rdzv-endpoint "127.0.0.1:$cport" \
    --job-id bench --node-id "$n" --nnodes 2:4 --nproc-per-node 1 --max-restarts 0 \
    --lease-ttl "$TTL" --settle-ms "$SETTLE" --last-call-ms 200 --elastic-mode in-process \
    --rdzv-timeout 30 -- \
    "$FM" --elastic --algorithm "$ALGO" --hidden "$HIDDEN" --batch-size "$BATCH" --epochs 1000 \
    --limit-test 200 > "$dir/$n.out" 2> "$dir/$n.err" &
  agent_pid[$n]=$!
  pids+=($!)
}
kill_node() { # node id: the node dies, agent and worker at once
  local n=$1
  local a=${agent_pid[$n]}
  local w; w=$(pgrep -P "$a" || true)
  kill -KILL "$a" $w 2>/dev/null || true
}
# The wall-clock ms of the first step of a round newer than $2, from rank 0's output in any
# node's file; waits up to 60 s. Prints "round ms".
wait_first_step() {
  local after=$1 deadline=$(( $(now_ms) + 60000 ))
  while [ "$(now_ms)" -lt "$deadline" ]; do
    local line
    line=$(cat "$dir"/*.out 2>/dev/null | grep -o 'round [0-9]* first_step_mono_ms [0-9]* unix_ms [0-9]*' \
           | awk -v a="$after" '$2 > a {print $2, $6}' | sort -n | tail -1 || true)
    if [ -n "$line" ]; then echo "$line"; return 0; fi
    sleep 0.02
  done
  echo "timed out waiting for a round after $after" >&2
  tail -n 5 "$dir"/*.out "$dir"/*.err >&2
  return 1
}
registered_ms() { # node id: wall-clock ms of the agent's "registered" log line (its log has no
  # timestamp, so poll the file from the agent's start and take the first time it is seen)
  local n=$1 deadline=$(( $(now_ms) + 20000 ))
  while [ "$(now_ms)" -lt "$deadline" ]; do
    grep -q "registered" "$dir/$n.err" 2>/dev/null && { now_ms; return 0; }
    sleep 0.005
  done
  echo "agent $n never registered" >&2; return 1
}

start_node n0; start_node n1; start_node n2
first=$(wait_first_step 0) || exit 1
round=${first%% *}
# Let the starting round settle into steady state.
sleep 3
cat "$dir"/*.out | grep -m1 "model" || true
rec=(); join=(); join_start=()
next=3
alive=(n0 n1 n2)
printf '%-6s %-6s %10s %12s %14s\n' cycle event node round ms
for c in $(seq 1 "$CYCLES"); do
  # Kill the youngest node: rank 0 (the oldest node, n0) prints the measurements.
  victim=${alive[-1]}
  unset 'alive[-1]'
  t_kill=$(now_ms)
  kill_node "$victim"
  got=$(wait_first_step "$round") || exit 1
  round=${got%% *}; ms=$(( ${got##* } - t_kill ))
  rec+=("$ms")
  printf '%-6s %-6s %10s %12s %14s\n' "$c" kill "$victim" "$round" "$ms"
  record_row recovery "$c" "$ALGO" "$victim" "$round" "$ms" n/a
  sleep 2
  n=n$next; next=$((next + 1))
  start_node "$n"
  alive+=("$n")
  t_reg=$(registered_ms "$n") || exit 1
  got=$(wait_first_step "$round") || exit 1
  round=${got%% *}
  ms=$(( ${got##* } - t_reg )); ms0=$(( ${got##* } - ${agent_start[$n]} ))
  join+=("$ms"); join_start+=("$ms0")
  printf '%-6s %-6s %10s %12s %14s (%s ms from the agent start)\n' "$c" join "$n" "$round" "$ms" "$ms0"
  record_row join "$c" "$ALGO" "$n" "$round" "$ms" "$ms0"
  sleep 2
done
echo "model: $(cat "$dir"/*.out | grep -o "model [0-9]* params" | head -1), algorithm $ALGO, lease TTL ${TTL} s, settle ${SETTLE} ms"
record_runs_note "$CYCLES"
echo "recovery (kill -> first step of the new round) median [min-max] ms: $(record_stat .0f "${rec[@]}")  runs: ${rec[*]}"
echo "join (registered -> first step with the newcomer) median [min-max] ms: $(record_stat .0f "${join[@]}")  runs: ${join[*]}"
echo "join (agent start -> first step with the newcomer) median [min-max] ms: $(record_stat .0f "${join_start[@]}")"
grep -h "recovery_ms" "$dir"/*.out | sed 's/^/  /' | tail -$((2 * CYCLES)) || true
