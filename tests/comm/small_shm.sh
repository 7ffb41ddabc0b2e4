#!/usr/bin/env bash
# A /dev/shm too small for the arena (a 256 KiB tmpfs in a private mount namespace): creating a
# shm communicator must fail on every rank with a message naming /dev/shm and the way out,
# never die of SIGBUS (exit 135) when the pages are first touched.
# usage: small_shm.sh BAGUA_BENCH. Skips (77) where a mount namespace cannot be made.
set -uo pipefail
bench=$1
if ! unshare -m true 2>/dev/null; then
  echo "skipped: cannot create a mount namespace (needs root)"
  exit 77
fi
out=$(unshare -m sh -c 'mount -t tmpfs -o size=256k tmpfs /dev/shm && exec "$0" allreduce \
  --nranks 2 --transport shm --min-bytes 1M --max-bytes 1M --iters 1 --warmup 0 --check' \
  "$bench" 2>&1)
rc=$?
echo "$out"
echo "exit status: $rc"
if [ $rc -ge 128 ]; then
  echo "FAIL: killed by signal $((rc - 128))"
  exit 1
fi
if [ $rc -eq 0 ]; then
  echo "FAIL: a 4 MiB arena cannot fit in 256 KiB, yet the run succeeded"
  exit 1
fi
grep -q "cannot reserve shared memory .* in /dev/shm" <<<"$out" || { echo "FAIL: no clear message"; exit 1; }
grep -q "BAGUA_TRANSPORT=tcp" <<<"$out" || { echo "FAIL: the message names no way out"; exit 1; }
echo "OK: refused at creation with a clear message"
