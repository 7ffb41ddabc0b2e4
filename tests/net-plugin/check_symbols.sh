#!/bin/sh
# Checks the dynamic symbol table of libnccl-net-bagua.so: the four plugin tables NCCL looks
# up are exported as data objects of the sizes net-plugin/nccl_net.h pins (LP64: 19, 20, 20 and
# 22 pointers), and nothing else of ours leaks out (no bagua_* or bagua__* symbol).
# With --any-size the sizes are not compared: AddressSanitizer pads globals with redzones.
set -eu
lib=$1
any_size=${2:-}
syms=$(nm -D --defined-only -S "$lib")
fail=0
for spec in v11:176 v10:160 v9:160 v8:152; do
  v=${spec%%:*}
  want=${spec#*:}
  line=$(printf '%s\n' "$syms" | awk -v s="ncclNetPlugin_$v" '$4 == s')
  if [ -z "$line" ]; then
    echo "FAIL: ncclNetPlugin_$v is not exported"
    fail=1
    continue
  fi
  size=$((0x$(printf '%s\n' "$line" | awk '{print $2}')))
  type=$(printf '%s\n' "$line" | awk '{print $3}')
  if [ "$any_size" = --any-size ]; then want=$size; fi
  if [ "$size" -ne "$want" ] || { [ "$type" != R ] && [ "$type" != D ]; }; then
    echo "FAIL: ncclNetPlugin_$v is type $type size $size, expected a data object (R or D) of $want bytes"
    fail=1
  else
    echo "ok: ncclNetPlugin_$v, $size bytes"
  fi
done
extra=$(printf '%s\n' "$syms" | awk '{print $NF}' | grep -v '^ncclNetPlugin_v\(8\|9\|10\|11\)$' |
  grep -v '^_\(init\|fini\)$' || true)
if [ -n "$extra" ]; then
  echo "FAIL: unexpected exported symbols:"
  printf '%s\n' "$extra"
  fail=1
fi
# The plugin must not drag libbagua or the etcd client's libraries into NCCL's process.
needed=$(readelf -d "$lib" | awk '/NEEDED/ {print $NF}' | tr -d '[]' | tr '\n' ' ')
echo "NEEDED: $needed"
case "$needed" in
  *libbagua*|*libcurl*|*libcjson*) echo "FAIL: unexpected dependency"; fail=1 ;;
esac
exit $fail
