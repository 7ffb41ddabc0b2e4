#!/usr/bin/env bash
# One command on a fresh Debian machine: install dependencies, build, run a real job.
# The job: bagua-launch starts a private etcd and an agent, which runs two workers training
# the Fashion-MNIST MLP with ByteGrad (Debian's dataset-fashion-mnist), then removes the etcd.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build
build/launcher/bagua-launch --nproc-per-node 2 \
  build/examples/fashion_mnist --algorithm bytegrad --epochs 2
