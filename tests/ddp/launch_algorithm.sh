#!/bin/sh
# bagua-launch's [algorithm] reaches libbagua in the workers (docs/configuration.md):
#   1. [algorithm] name = bytegrad: every worker's bagua_ddp_create(NULL config) runs bytegrad;
#   2. BAGUA_ALGORITHM in the launcher's environment beats the INI file (environment > INI);
#   3. an unknown [algorithm] key stops the launch with exit 2 and a file:line message;
#   4. --advise with name = auto, auto_allow = gradient_allreduce,async: rank 0 prints the
#      advisor's ranked table of the six algorithms, and both workers end on async (no
#      exposed communication: always predicted fastest).
# Usage: launch_algorithm.sh BAGUA_LAUNCH WORKER. Skips (77) without /usr/bin/etcd.
set -u
launch=$1 worker=$2
[ -x /usr/bin/etcd ] || { echo "skip: /usr/bin/etcd is missing (etcd-server)"; exit 77; }
dir=$(mktemp -d /tmp/bagua-launch-algo.XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
unset BAGUA_ALGORITHM BAGUA_ERROR_FEEDBACK BAGUA_HIERARCHICAL BAGUA_RDZV_ENDPOINT BAGUA_JOB_ID

fail() {
  echo "FAIL: $1"
  [ -f "$dir/out" ] && sed 's/^/  | /' "$dir/out"
  exit 1
}

cat > "$dir/job.ini" <<INI
[job]
nproc_per_node = 2
[algorithm]
name = bytegrad
hierarchical = 0
INI

# 1. The INI file's algorithm runs.
timeout 120 "$launch" --config "$dir/job.ini" -- "$worker" > "$dir/out" 2>&1 ||
  fail "bagua-launch with name = bytegrad exited $?"
n=$(grep -c "ddp worker: rank [01] of 2 runs bytegrad," "$dir/out")
[ "$n" = 2 ] || fail "expected both workers to run bytegrad, saw $n"
echo "ok: [algorithm] name = bytegrad ran bytegrad on both workers"

# 2. The environment beats the INI file.
BAGUA_ALGORITHM=decentralized timeout 120 "$launch" --config "$dir/job.ini" -- "$worker" \
  > "$dir/out" 2>&1 || fail "bagua-launch with BAGUA_ALGORITHM=decentralized exited $?"
n=$(grep -c "ddp worker: rank [01] of 2 runs decentralized," "$dir/out")
[ "$n" = 2 ] || fail "expected BAGUA_ALGORITHM=decentralized to beat the INI file, saw $n"
echo "ok: BAGUA_ALGORITHM=decentralized in the environment beat the INI file"

# 3. A key nobody reads is refused before anything starts.
printf '[algorithm]\nname = bytegrad\nwarmup = 5\n' > "$dir/bad.ini"
"$launch" --config "$dir/bad.ini" -- "$worker" > "$dir/out" 2>&1
rc=$?
[ "$rc" = 2 ] || fail "an unknown [algorithm] key exited $rc, expected 2"
grep -q 'bad.ini:3: key "warmup" in \[algorithm\]: unknown key; accepted: name,' "$dir/out" ||
  fail "the message does not name the key, file:line and the accepted keys"
grep -q "ddp worker" "$dir/out" && fail "a worker ran"
echo "ok: an unknown [algorithm] key is refused with file:line and the accepted keys"

# 4. The advisor through the launcher.
printf '[job]\nnproc_per_node = 2\n[algorithm]\nname = auto\nauto_allow = gradient_allreduce,async\n' \
  > "$dir/auto.ini"
timeout 120 "$launch" --advise -x BAGUA_ADVISE_STEPS=1 --config "$dir/auto.ini" -- "$worker" \
  > "$dir/out" 2>&1 || fail "bagua-launch --advise with name = auto exited $?"
n=$(grep -cE 'advise: [1-6] +[a-z_]+ +[01] +[0-9.]+ ' "$dir/out")
[ "$n" = 6 ] || fail "expected one table of six ranked rows from rank 0, saw $n rows"
n=$(grep -c "ddp worker: rank [01] of 2 runs async," "$dir/out")
[ "$n" = 2 ] || fail "expected both workers to end on async under name = auto, saw $n"
echo "ok: --advise printed the ranked table; name = auto moved both workers to async"
