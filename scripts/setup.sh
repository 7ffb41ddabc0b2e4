#!/usr/bin/env bash
# One command on a fresh Debian machine: install dependencies, build, run a real job.
# The job: bagua-launch starts a private etcd and an agent, which runs two workers training
# the Fashion-MNIST MLP with ByteGrad (Debian's dataset-fashion-mnist), then removes the etcd.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build
# Make `import bagua.torch_api` work for Debian's python3 in any new shell, and so for the
# workers bagua-launch starts: a .pth file in its site directory points at the package the
# build assembled (build/python). No PYTHONPATH to set by hand.
if [ -d build/python/bagua ]; then
  site=$(/usr/bin/python3 -c 'import site; print(site.getsitepackages()[0])')
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  $SUDO mkdir -p "$site"
  echo "$PWD/build/python" | $SUDO tee "$site/bagua-c.pth" >/dev/null
  echo "bagua.torch_api: $(/usr/bin/python3 -c 'import bagua.torch_api as b, bagua; print(bagua.__version__, b.__file__)')"
fi
build/launcher/bagua-launch --nproc-per-node 2 \
  build/examples/fashion_mnist --algorithm bytegrad --epochs 2
