#!/usr/bin/env bash
# Checks that the given client objects or archives (the Python extension's objects, the
# example's library) call no internal libbagua function: every bagua__ symbol they need must be
# defined in themselves, never left for libbagua to provide. Prints what it found on failure.
set -euo pipefail
bad=0
for f in "$@"; do
  syms=$(nm -u "$f" 2>/dev/null | awk '{print $NF}' | grep -E '^bagua__' | sort -u || true)
  if [ -n "$syms" ]; then
    echo "FAIL: $f calls internal libbagua functions (use the public bagua_* API):"
    echo "$syms"
    bad=1
  else
    echo "$f: public API only ($(nm -u "$f" | grep -c ' bagua_' || true) bagua_* calls)"
  fi
done
exit $bad
