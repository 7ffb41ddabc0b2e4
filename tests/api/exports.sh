#!/usr/bin/env bash
# The public API is exactly what libbagua.so exports: every function declared BAGUA_EXTERN in
# include/bagua/*.h, and nothing else (no bagua__ internals, no helper of a static library).
# usage: exports.sh LIBBAGUA_SO INCLUDE_DIR
set -euo pipefail
lib=$1 inc=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$lib" | awk '$2 == "T" || $2 == "W" {print $3}' | sort -u >"$tmp/exported"
# A declaration may span lines: join each header, then take the name before "(" that follows
# BAGUA_EXTERN and its return type.
for h in "$inc"/bagua/*.h; do grep -v "^#" "$h" | tr '\n' ' ' | grep -oE 'BAGUA_EXTERN[^;{]*\(' || true; done |
  grep -oE '[A-Za-z_][A-Za-z0-9_]*[[:space:]]*\($' | tr -d ' (' | sort -u >"$tmp/declared"
n_exp=$(wc -l <"$tmp/exported")
n_dec=$(wc -l <"$tmp/declared")
if [ "$n_dec" -lt 50 ]; then
  echo "FAIL: only $n_dec declarations found in $inc/bagua: the header scan is broken"
  exit 1
fi
if ! diff -u "$tmp/declared" "$tmp/exported" >"$tmp/diff"; then
  echo "FAIL: the exported symbols differ from the BAGUA_EXTERN declarations"
  echo "(- declared but not exported, + exported but not declared):"
  grep -E '^[-+][^-+]' "$tmp/diff"
  exit 1
fi
echo "OK: $n_exp symbols exported, the same $n_dec declared in $inc/bagua"
