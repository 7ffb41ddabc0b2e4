#!/usr/bin/env bash
# The record every benchmark script under bench/ keeps of a run (bench/record.py, sourced by
# the shell scripts through bench/record.sh). First the helper on its own, then three scripts in
# a quick mode (tiny sizes, 3 repetitions, no root, no network shaping):
#   bench/launch_time.sh     one variant, 3 runs; and 2 runs, which must not print a median
#   bench/peers.sh           bagua-bench only: shared memory and TCP, interleaved
#   bench/fm_algorithms.sh   the six algorithms of the C example, interleaved
# Each record must hold every meta field, one raw.csv row per run (per message size for
# peers.sh), the variants in interleaved order, and the script's output a "median [min-max]"
# line. tests/bench/check_record.py does the checking; it is also shown a record whose
# variants ran in blocks (a a a b b b) and must reject it, so that a script that stopped
# interleaving would fail here.
# usage: record.sh BUILD_DIR   (the build holding bagua-launch, bagua-bench, fashion_mnist)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: record.sh BUILD_DIR}" && pwd) || exit 2
py=/usr/bin/python3
check=$here/check_record.py
tmp=$(mktemp -d /tmp/bagua-record-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
# expect_line FILE REGEX WHAT: the output must hold a line matching the (extended) REGEX.
expect_line() { grep -Eq "$2" "$1" || { fail "$3: no line matching /$2/ in:"; cat "$1" >&2; }; }

# ---- The helper on its own ----
# A stand-in benchmark: two variants interleaved over 3 repetitions (or in blocks, with
# "blocks"), the second variant's rows added by a child process the way the
# network-namespace scripts add theirs from inside the emulated cluster, and exit status 3.
cat >"$tmp/demo.sh" <<EOF
#!/usr/bin/env bash
set -euo pipefail
. "$root/bench/record.sh"
record_argv "\$0" "\$@"
record_open demo "" size:B value:ms
trap 'record_close \$?' EXIT
order="a 0 b 0 a 1 b 1 a 2 b 2"
[ "\${1:-}" = blocks ] && order="a 0 a 1 a 2 b 0 b 1 b 2"
set -- \$order
while [ \$# -gt 0 ]; do
  if [ "\$1" = b ]; then
    bash -c '. "$root/bench/record.sh"; record_attach; record_row "\$0" "\$1" 64 "\$RANDOM"' \
      "\$1" "\$2"
  else
    record_row "\$1" "\$2" 64 "\$RANDOM"
  fi
  shift 2
done
exit 3
EOF
chmod +x "$tmp/demo.sh"
BENCH_RECORD_DIR=$tmp/demo "$tmp/demo.sh" "an argument" 2>"$tmp/demo.err"
[ $? = 3 ] || fail "the helper changed the script's exit status"
"$py" "$check" "$tmp/demo" 6 "a b" --status 3 || fail "the helper's own record"
grep -qx "command: $tmp/demo.sh 'an argument'" "$tmp/demo/meta.txt" ||
  fail "meta.txt does not hold the exact command line"
grep -qx "units: size=B;value=ms" "$tmp/demo/meta.txt" || fail "meta.txt: the units"
grep -q "record: $tmp/demo" "$tmp/demo.err" || fail "the script does not say where its record is"

# Every check of the checker must be able to fail: variants run in blocks are rejected.
BENCH_RECORD_DIR=$tmp/blocks "$tmp/demo.sh" blocks 2>/dev/null
"$py" "$check" "$tmp/blocks" 6 "a b" --status 3 2>"$tmp/blocks.err" &&
  fail "the checker accepted variants run in blocks (a a a b b b)"
grep -q "not interleaved" "$tmp/blocks.err" || fail "the checker rejected blocks for another reason"
# ... and a record with a row too few, or a missing meta field.
"$py" "$check" "$tmp/demo" 7 "a b" --status 3 2>/dev/null && fail "the checker miscounted rows"
grep -v '^load_end:' "$tmp/demo/meta.txt" >"$tmp/meta" && cp "$tmp/meta" "$tmp/demo/meta.txt"
"$py" "$check" "$tmp/demo" 6 "a b" --status 3 2>/dev/null && fail "the checker missed load_end"

# A directory that holds a record already is refused, and the record is left as it was.
before=$(md5sum <"$tmp/blocks/raw.csv")
BENCH_RECORD_DIR=$tmp/blocks "$tmp/demo.sh" 2>"$tmp/again.err"
[ $? = 2 ] || fail "a second run into the same record directory was not refused (exit 2)"
[ "$(md5sum <"$tmp/blocks/raw.csv")" = "$before" ] || fail "the refused run changed the record"

# The default directory: docs/results/raw/<date>-<script>-<short commit> in this checkout.
d=$("$py" "$root/bench/record.py" default-dir demo)
day='[0-9]{4}-[0-9]{2}-[0-9]{2}'
[[ $d =~ ^$root/docs/results/raw/$day-demo-([0-9a-f]{7,}|unknown)(-[0-9]+)?$ ]] ||
  fail "default record directory \"$d\""
[ -e "$d" ] && fail "default-dir made the directory it only names"

# The cells: a median of 3 or more runs with its range, never a median of fewer.
[ "$("$py" "$root/bench/record.py" stat .1f 3 1 2)" = "2.0 [1.0-3.0]" ] || fail "stat of 3 runs"
[ "$("$py" "$root/bench/record.py" stat .1f 1 2)" = "1.0, 2.0 (2 runs)" ] || fail "stat of 2 runs"
[ "$("$py" "$root/bench/record.py" stat .1f 3 3)" = "3.0 (2 equal runs)" ] || fail "stat of 2 equal runs"
[ "$("$py" "$root/bench/record.py" stat .0f 5 fail)" = "5 (1 run) (1 failed)" ] ||
  fail "stat of 1 run and a failure"
[ -n "$("$py" "$root/bench/record.py" runs-note 2)" ] || fail "no note for 2 runs per cell"
[ -z "$("$py" "$root/bench/record.py" runs-note 3)" ] || fail "a note for 3 runs per cell"

# ---- bench/launch_time.sh: one variant ----
t0=$SECONDS
"$root/bench/launch_time.sh" --launch "$build/launcher/bagua-launch" --runs 3 --nproc 2 \
  --record-dir "$tmp/launch" >"$tmp/launch.out" 2>&1 ||
  { fail "launch_time.sh"; cat "$tmp/launch.out" >&2; }
"$py" "$check" "$tmp/launch" 3 "bagua-launch" || fail "launch_time.sh's record"
range='[0-9]+ \[[0-9]+-[0-9]+\]'
expect_line "$tmp/launch.out" "^median \\[min-max\\] +$range +$range +$range\$" "launch_time.sh"
# With 2 runs the last line lists them and says how many; no median.
"$root/bench/launch_time.sh" --launch "$build/launcher/bagua-launch" --runs 2 --nproc 2 \
  --record-dir "$tmp/launch2" >"$tmp/launch2.out" 2>&1 || fail "launch_time.sh --runs 2"
# (Two runs that took the same milliseconds print once, as "N (2 equal runs)".)
expect_line "$tmp/launch2.out" \
  '^median \[min-max\] +([0-9]+, [0-9]+ \(2 runs\)|[0-9]+ \(2 equal runs\))' "--runs 2"
expect_line "$tmp/launch2.out" '^note: 2 runs per cell' "launch_time.sh --runs 2"
grep -Eq "$range" "$tmp/launch2.out" && fail "launch_time.sh printed a median of 2 runs"
echo "launch_time.sh: $((SECONDS - t0)) s"

# ---- bench/peers.sh, bagua-bench only: two transports interleaved, 2 sizes, 3 repeats ----
t0=$SECONDS
"$root/bench/peers.sh" --bagua "$build/bench/bagua-bench" --peers none --transports "shm tcp" \
  --nranks 2 --min-bytes 1K --max-bytes 2K --iters 2 --warmup 1 --repeat 3 \
  --record-dir "$tmp/peers" >"$tmp/peers.out" 2>"$tmp/peers.err" ||
  { fail "peers.sh"; cat "$tmp/peers.out" "$tmp/peers.err" >&2; }
"$py" "$check" "$tmp/peers" 12 "bagua_shm bagua_tcp" || fail "peers.sh's record"
range='[0-9.]+ \[[0-9.]+-[0-9.]+\]'
expect_line "$tmp/peers.out" "^2 +1024 +$range +$range " "peers.sh"
grep -q "^open_mpi:\|^torch:" "$tmp/peers/meta.txt" && fail "peers.sh recorded peers it did not run"
echo "peers.sh: $((SECONDS - t0)) s"

# ---- bench/fm_algorithms.sh: six algorithms interleaved, 3 repeats ----
if [ -d /usr/share/datasets/fashion-mnist ]; then
  t0=$SECONDS
  REPEAT=3 BENCH_RECORD_DIR=$tmp/fm "$root/bench/fm_algorithms.sh" "$build" 2 1 \
    --limit-train 512 --limit-test 64 --hidden 16 >"$tmp/fm.out" 2>&1 ||
    { fail "fm_algorithms.sh"; cat "$tmp/fm.out" >&2; }
  "$py" "$check" "$tmp/fm" 18 \
    "gradient_allreduce bytegrad decentralized low_precision_decentralized qadam async" ||
    fail "fm_algorithms.sh's record"
  expect_line "$tmp/fm.out" "^\\| bytegrad \\| 2 \\| 1 \\| $range \\| $range \\|" "fm_algorithms.sh"
  echo "fm_algorithms.sh: $((SECONDS - t0)) s"
else
  echo "fm_algorithms.sh: not run (no Fashion-MNIST in /usr/share/datasets/fashion-mnist)"
fi

[ "$fails" = 0 ] || { echo "$fails check(s) failed" >&2; exit 1; }
echo "all records complete"
