#!/usr/bin/env bash
# bagua-bench as ranks of an outer launcher: two processes with RANK/WORLD_SIZE/MASTER_* set,
# as torchrun or bagua-launch would start them. Both must succeed with every element right.
set -euo pipefail
bench=$1
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port
out=$(mktemp)
trap 'rm -f "$out"' EXIT
RANK=1 timeout 60 "$bench" allreduce --max-bytes 1M --iters 2 --check >/dev/null &
pid=$!
RANK=0 timeout 60 "$bench" allreduce --max-bytes 1M --iters 2 --check >"$out"
wait $pid
grep -q "nranks=2" "$out"
rows=$(grep -vc '^#\|bytes' "$out")
echo "outer launch: $rows rows, all checked"
[ "$rows" -ge 10 ]
