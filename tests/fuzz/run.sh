#!/usr/bin/env bash
# Runs every libFuzzer target of a BAGUA_FUZZ=ON build for a bounded time, each from a copy
# of its checked-in seed corpus (the fuzzer adds the inputs it finds to the copy, never to
# the source tree).
#
#   tests/fuzz/run.sh BUILD_DIR [SECONDS_PER_TARGET] [TARGET...]
#
# A crash, leak, timeout or failed invariant leaves the reproducer in
# BUILD_DIR/fuzz-out/<target>/ (crash-*, leak-*, timeout-*); replay it with
# `BUILD_DIR/tests/fuzz/<target> FILE`. Exits non-zero if any target failed, after running
# them all.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR [SECONDS] [TARGET...]}" && pwd) || exit 1
secs=${2:-30}
shift $(($# < 2 ? $# : 2))
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=()
  for d in "$here"/corpus/*/; do targets+=("$(basename "$d")"); done
fi
failed=()
mkdir -p "$build/fuzz-out"
for t in "${targets[@]}"; do
  exe=$build/tests/fuzz/$t
  out=$build/fuzz-out/$t
  rm -rf "$out"
  mkdir -p "$out/corpus"
  cp "$here/corpus/$t"/* "$out/corpus/"
  if [ ! -x "$exe" ]; then
    failed+=("$t: not built")
    continue
  fi
  echo "--- $t: ${secs}s from $(ls "$here/corpus/$t" | wc -l) seeds"
  # -rss_limit_mb and -timeout make runaway memory or a hang a finding rather than a stuck
  # CI job; -max_len stays small because every parser's interesting inputs are short.
  if ! (cd "$out" && "$exe" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
        -print_final_stats=1 corpus >"$out/log" 2>&1); then
    failed+=("$t: see $out/log; reproducer: $(ls "$out" | grep -E '^(crash|leak|timeout|oom|slow-unit)-' | head -1)")
    tail -40 "$out/log"
  else
    grep -E '^stat::number_of_executed_units|^#[0-9]+.*DONE' "$out/log" | tail -2
  fi
done
# One line per failed target, for scripts/test.sh's summary.
: >"$build/fuzz-out/failed.txt"
if [ ${#failed[@]} -gt 0 ]; then
  printf '%s\n' "${failed[@]}" >"$build/fuzz-out/failed.txt"
  printf 'fuzz FAILED: %s\n' "${failed[@]}"
  exit 1
fi
