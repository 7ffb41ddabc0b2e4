#!/usr/bin/env bash
# Runs the whole test suite in two builds: an optimised -Werror build, and an AddressSanitizer +
# UndefinedBehaviorSanitizer build. Then compiles the tree warning-free (-Werror) in the
# builds users make: GCC Release (-O3 finds what -O2 does not) and Clang Release and Debug.
# A failure in one build does not stop the others: every build runs, every failing test is
# listed at the end, and the exit status is non-zero if anything failed (a build that does not
# compile counts as a failure of that build).
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
failed=()

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
  echo "=== $dir: tests"
  if ! (cd "$dir" && env $envs ctest --output-on-failure -j 1); then
    local log="$dir/Testing/Temporary/LastTestsFailed.log"
    if [ -s "$log" ]; then
      while IFS= read -r line; do failed+=("$dir: ${line#*:}"); done <"$log"
    else
      failed+=("$dir: ctest failed")
    fi
  fi
}

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
else
  failed+=("clang is not installed (scripts/install-deps.sh installs it)")
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "=== FAILED (${#failed[@]}):"
  printf '  %s\n' "${failed[@]}"
  exit 1
fi
echo "=== all builds passed"
