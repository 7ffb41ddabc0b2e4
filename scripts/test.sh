#!/usr/bin/env bash
# First lints the Python (scripts/lint.sh: pyflakes3 and pycodestyle, seconds). Then runs the
# whole test suite in two builds: an optimised -Werror build, and an AddressSanitizer +
# UndefinedBehaviorSanitizer build. Then compiles the tree warning-free (-Werror) in the
# builds users make: GCC Release (-O3 finds what -O2 does not) and Clang Release and Debug.
# Last, the continuous checks (docs/testing.md): a ThreadSanitizer build of the threaded tests
# and every libFuzzer target for a bounded time (BAGUA_FUZZ_SECONDS each, default 30); then
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

# run_build NAME CTEST_ENV CMAKE_ARGS...: configures, builds and tests one build directory.
run_build() {
  local dir=$1 envs=$2
  shift 2
  echo "=== $dir: configure and build"
  if ! cmake -S . -B "$dir" -G Ninja "$@" || ! cmake --build "$dir" -j "$jobs"; then
    failed+=("$dir: the build failed")
    return
  fi
  [ "$envs" = "--no-tests" ] && return
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

# run_fuzz: the libFuzzer targets of tests/fuzz, each for BAGUA_FUZZ_SECONDS (default 30) from
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
  if ! tests/fuzz/run.sh "$dir" "${BAGUA_FUZZ_SECONDS:-30}"; then
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

run_lint
run_build build "" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBAGUA_WERROR=ON
run_build build-asan "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1" \
  -DCMAKE_BUILD_TYPE=Debug -DBAGUA_WERROR=ON -DBAGUA_SANITIZE=ON
# Compile-only builds: warnings are errors in every build type and compiler we support. The
# test suite adds nothing there that the two builds above did not run.
run_build build-gcc-release --no-tests -DCMAKE_BUILD_TYPE=Release -DBAGUA_WERROR=ON
if command -v clang >/dev/null; then
  for type in Release Debug; do
    run_build "build-clang-${type,,}" --no-tests -DCMAKE_C_COMPILER=clang \
      -DCMAKE_BUILD_TYPE=$type -DBAGUA_WERROR=ON
  done
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
