#!/usr/bin/env bash
# Runs the whole test suite twice: an optimised -Werror build, and an AddressSanitizer +
# UndefinedBehaviorSanitizer build. Exits non-zero if any test fails in either.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBAGUA_WERROR=ON
cmake --build build -j "$jobs"
(cd build && ctest --output-on-failure -j 1)
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DBAGUA_WERROR=ON -DBAGUA_SANITIZE=ON
cmake --build build-asan -j "$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j 1)
