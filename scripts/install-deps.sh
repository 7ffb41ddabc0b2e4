#!/usr/bin/env bash
# Installs the Debian packages Bagua-C needs to build and test. Idempotent; needs root (or sudo).
# libclang-rt-dev holds clang's sanitizer and libFuzzer runtimes (libclang_rt.fuzzer,
# libclang_rt.tsan): clang recommends it, and --no-install-recommends would leave it out.
# yamllint and python3-yaml check the Kubernetes example's manifests (examples/k8s/).
# redis-server and python3-redis back bagua.torch_api.contrib's cached dataset and Redis store.
# pyflakes3 and pycodestyle lint the Python (scripts/lint.sh, the first step of scripts/test.sh).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
PKGS=(build-essential cmake ninja-build pkg-config git
      clang libclang-rt-dev libcurl4-openssl-dev libcjson-dev libinih-dev libcmocka-dev zlib1g-dev
      etcd-server etcd-client iproute2 dataset-fashion-mnist
      python3-dev python3-numpy python3-pytest python3-torch python3-torchvision
      python3-yaml yamllint redis-server python3-redis pyflakes3 pycodestyle
      debhelper dh-python help2man)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
