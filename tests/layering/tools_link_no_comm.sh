#!/usr/bin/env bash
# Checks that the given executables (bagua-agent, bagua-launch) need no CUDA or NCCL library
# and contain no communicator, data-parallel or kernel code: they are built on the common
# layer alone. Prints what it found on failure.
set -euo pipefail
bad=0
for exe in "$@"; do
  if ldd "$exe" | grep -Ei 'libcudart|libnccl|libcuda\.|libbagua'; then
    echo "FAIL: $exe links the libraries above"
    bad=1
  fi
  syms=$(nm "$exe" | awk '$2 ~ /^[TtDdBb]$/ {print $3}' |
    grep -E '^bagua_(allreduce|comm_|ddp_|sampler_|elastic_|nccl_)|^bagua__(kernels|shm|tcp|ddp)' || true)
  if [ -n "$syms" ]; then
    echo "FAIL: $exe contains code of the comm layer or above:"
    echo "$syms" | head -20
    bad=1
  fi
  echo "$exe: $(nm "$exe" | grep -c ' [Tt] bagua') bagua functions, none above the common layer"
done
exit $bad
