#!/usr/bin/env bash
# First lints the Python (scripts/lint.sh: pyflakes3 and pycodestyle, seconds). Then runs the
# whole test suite in two builds: a GCC Release -Werror build (-O3 finds warnings -O2 does
# not), and an AddressSanitizer + UndefinedBehaviorSanitizer build. Then compiles the tree
# warning-free (-Werror) with Clang Release, the other compiler users build with.
# Last, the continuous checks (docs/testing.md): a ThreadSanitizer build of the threaded tests
# and every libFuzzer target for a bounded time (BAGUA_FUZZ_SECONDS each, default 10); then
# the Debian packages (scripts/package-test.sh).
# BAGUA_TEST_ONLY=tsan,fuzz,lint (any of them) runs just the sections it names.
# A failure in one build does not stop the others: every build runs, every failing test is
# listed at the end, and the exit status is non-zero if anything failed (a build that does not
# compile counts as a failure of that build).
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
failed=()

# run_ctest DIR CTEST_ENV [CTEST_ARGS...]: runs the tests of a build directory and adds every
# failing test to the list.
run_ctest() {
  local dir=$1 envs=$2
  shift 2
  echo "=== $dir: tests"
  if ! (cd "$dir" && env $envs ctest --output-on-failure -j 1 "$@"); then
    local log="$dir/Testing/Temporary/LastTestsFailed.log"
    if [ -s "$log" ]; then
      while IFS= read -r line; do failed+=("$dir: ${line#*:}"); done <"$log"
    else
      failed+=("$dir: ctest failed")
    fi
  fi
}

# run_build NAME CTEST_ENV CMAKE_ARGS...: configures, builds and tests one build directory
# (CTEST_ENV --no-tests: builds only). Returns 1 if it does not build.
run_build() {
  local dir=$1 envs=$2
  shift 2
  echo "=== $dir: configure and build"
  if ! cmake -S . -B "$dir" -G Ninja "$@" || ! cmake --build "$dir" -j "$jobs"; then
    failed+=("$dir: the build failed")
    return 1
  fi
  [ "$envs" = "--no-tests" ] && return 0
  run_ctest "$dir" "$envs"
}

# run_lint: pyflakes3 and pycodestyle over the project's Python (setup.cfg). A linter that is
# not installed is skipped with a message; a finding fails this section.
run_lint() {
  if ! scripts/lint.sh; then failed+=("lint (scripts/lint.sh)"); fi
}

# run_tsan: a ThreadSanitizer build of only the tests labelled "threads" (the ddp scheduler and
# async averaging, the etcd watch and lease keeper, the elastic stall timer, the agent's output
# thread), and only those run. halt_on_error turns a report into a failed rank, hence a failed
# test, even in the forked ranks that leave through _exit().
run_tsan() {
  local dir=build-tsan
  echo "=== $dir: configure and build the threaded tests"
  if ! cmake -S . -B "$dir" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
         -DBAGUA_WERROR=ON -DBAGUA_TSAN=ON -DBAGUA_WITH_CUDA=OFF ||
     ! cmake --build "$dir" -j "$jobs" --target bagua_threaded_tests; then
    failed+=("$dir: the build failed")
    return
  fi
  run_ctest "$dir" "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1" -L threads
}

# run_fuzz: the libFuzzer targets of tests/fuzz, each for BAGUA_FUZZ_SECONDS (default 10) from
# its checked-in corpus. A finding leaves its reproducer in build-fuzz/fuzz-out/<target>/.
run_fuzz() {
  local dir=build-fuzz
  echo "=== $dir: configure and build the fuzz targets"
  if ! cmake -S . -B "$dir" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
         -DBAGUA_WERROR=ON -DBAGUA_FUZZ=ON -DBAGUA_BUILD_TESTS=OFF -DBAGUA_WITH_CUDA=OFF ||
     ! cmake --build "$dir" -j "$jobs" --target bagua_fuzz; then
    failed+=("$dir: the build failed")
    return
  fi
  echo "=== $dir: fuzzing"
  if ! tests/fuzz/run.sh "$dir" "${BAGUA_FUZZ_SECONDS:-10}"; then
    local log="$dir/fuzz-out/failed.txt"
    if [ -s "$log" ]; then
      while IFS= read -r line; do failed+=("$dir: $line"); done <"$log"
    else
      failed+=("$dir: tests/fuzz/run.sh failed")
    fi
  fi
}

# With BAGUA_TEST_ONLY=tsan, fuzz or lint (or several, comma-separated) only those sections run:
# how a developer reruns the continuous checks, or the linters, without the whole suite.
if [ -n "${BAGUA_TEST_ONLY:-}" ]; then
  for only in ${BAGUA_TEST_ONLY//,/ }; do
    case $only in
      tsan | fuzz | lint) "run_$only" ;;
      *) failed+=("BAGUA_TEST_ONLY: unknown section \"$only\"; accepted: tsan, fuzz, lint") ;;
    esac
  done
  if [ ${#failed[@]} -gt 0 ]; then
    echo "=== FAILED (${#failed[@]}):"
    printf '  %s\n' "${failed[@]}"
    exit 1
  fi
  echo "=== $BAGUA_TEST_ONLY passed"
  exit 0
fi

# Under ASan, the tests that only repeat, slower, code paths other tests already run under it:
# the example's multi-rank training runs (the ddp_* tests run every algorithm), the benchmark
# record checks (bench_check_* stay) and five of the seven agent scenarios (sigkill_leader, the
# hardest, and belowmin stay; the agent_* tests run the departure and join paths). They run in
# the optimised build. Together about 250 s of a 1,000 s ASan suite on 2 vCPUs.
asan_skip='^(example_fm_run_ranks_|bench_record$|bench_allreduce_256M_|'
asan_skip+='scenario_(sigkill_rank0|sigkill_node|sigstop_node|join_one|join_two)$)'

run_lint
run_build build "" -DCMAKE_BUILD_TYPE=Release -DBAGUA_WERROR=ON
run_build build-asan --no-tests -DCMAKE_BUILD_TYPE=Debug -DBAGUA_WERROR=ON -DBAGUA_SANITIZE=ON &&
  run_ctest build-asan "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1" \
    -E "$asan_skip"
# A compile-only build: warnings are errors with the other compiler too. Clang's warnings do
# not depend on the optimisation level, so one build type is enough; the test suite adds
# nothing there that the two builds above did not run.
if command -v clang >/dev/null; then
  run_build build-clang-release --no-tests -DCMAKE_C_COMPILER=clang \
    -DCMAKE_BUILD_TYPE=Release -DBAGUA_WERROR=ON
  # Continuous checks, both clang builds of their own (docs/testing.md).
  run_tsan
  run_fuzz
else
  failed+=("clang is not installed (scripts/install-deps.sh installs it)")
fi
# The Debian packages, built in a copy of the tree and checked from their installed files only
# (a real two-worker job, the Python import, pkg-config and find_package; docs/packaging.md).
echo "=== packages"
if ! scripts/package-test.sh; then failed+=("packages (scripts/package-test.sh)"); fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "=== FAILED (${#failed[@]}):"
  printf '  %s\n' "${failed[@]}"
  exit 1
fi
echo "=== all builds passed"
