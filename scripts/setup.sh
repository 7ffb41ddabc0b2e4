#!/usr/bin/env bash
# One command on a fresh Debian machine: install dependencies, build, run a real job.
# The job is a 4-rank allreduce benchmark on this host that checks every result element.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build
build/bench/bagua-bench allreduce --nranks 4 --min-bytes 1K --max-bytes 64M --iters 10 --check
