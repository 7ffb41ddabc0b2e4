#!/bin/sh
# bagua-launch --autotune --log-dir reaches libbagua in the workers (docs/autotune.md): the
# workers tune (rank 0 logs its trials and the choice) and rank 0 writes autotune.csv into the
# job's log directory, which bagua-agent passes to its workers as BAGUA_LOG_DIR. The windows
# are shrunk to fit the worker's two steps: one trial of one timed step.
# Usage: launch_autotune.sh BAGUA_LAUNCH WORKER. Skips (77) without /usr/bin/etcd.
set -u
launch=$1 worker=$2
[ -x /usr/bin/etcd ] || { echo "skip: /usr/bin/etcd is missing (etcd-server)"; exit 77; }
dir=$(mktemp -d /tmp/bagua-launch-autotune.XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
unset BAGUA_AUTOTUNE BAGUA_LOG_DIR BAGUA_RDZV_ENDPOINT BAGUA_JOB_ID BAGUA_ALGORITHM

fail() {
  echo "FAIL: $1"
  [ -f "$dir/out" ] && sed 's/^/  | /' "$dir/out"
  exit 1
}

BAGUA_AUTOTUNE_WARMUP_STEPS=0 BAGUA_AUTOTUNE_SAMPLE_STEPS=1 BAGUA_AUTOTUNE_MAX_SAMPLES=1 \
  timeout 120 "$launch" --nproc-per-node 2 --autotune --log-dir "$dir/logs" -- "$worker" \
  > "$dir/out" 2>&1 || fail "bagua-launch --autotune exited $?"
grep -q "bagua autotune: done after 1 trials at step 2" "$dir/out" ||
  fail "rank 0 did not log the end of tuning"
[ -f "$dir/logs/autotune.csv" ] || fail "no autotune.csv under --log-dir"
n=$(wc -l < "$dir/logs/autotune.csv")
[ "$n" = 2 ] || fail "autotune.csv has $n lines, expected the header and one trial"
head -1 "$dir/logs/autotune.csv" | grep -q '^trial,step,bucket_bytes,hierarchical,streams,' ||
  fail "autotune.csv has no header"
echo "ok: --autotune tuned the workers and --log-dir received autotune.csv"
