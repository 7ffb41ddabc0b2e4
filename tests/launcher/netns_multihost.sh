#!/usr/bin/env bash
# Two emulated hosts in network namespaces joined by a veth pair (198.18.0.1 and .2, with a
# tbf bandwidth cap), one bagua-launch command starting an agent on each through
# "ip netns exec {host}", and 4 bagua-bench ranks (2 per host) running a checked allreduce:
# private etcd, rendezvous, the etcd bootstrap and the hierarchical shm+tcp transport all
# cross a real (virtual) network. Exits 77 (skipped) where namespaces cannot be created.
# usage: netns_multihost.sh BUILD_DIR
set -uo pipefail
build=$1
[ "$(id -u)" = 0 ] || { echo "SKIP: creating network namespaces needs root"; exit 77; }
command -v ip >/dev/null || { echo "SKIP: ip (Debian package iproute2) is missing"; exit 77; }
[ -x /usr/bin/etcd ] || { echo "SKIP: etcd (Debian package etcd-server) is missing"; exit 77; }
tag=bg$$
h1=${tag}a h2=${tag}b
out=$(mktemp)
cleanup() {
  ip netns del "$h1" 2>/dev/null
  ip netns del "$h2" 2>/dev/null
  rm -f "$out"
}
trap cleanup EXIT
ip netns add "$h1" 2>/dev/null || { echo "SKIP: cannot create network namespaces here"; exit 77; }
ip netns add "$h2" || exit 1
ip link add "${tag}v1" type veth peer name "${tag}v2" || exit 1
ip link set "${tag}v1" netns "$h1" && ip link set "${tag}v2" netns "$h2" || exit 1
ip -n "$h1" addr add 198.18.0.1/24 dev "${tag}v1" && ip -n "$h2" addr add 198.18.0.2/24 dev "${tag}v2"
for h in "$h1" "$h2"; do ip -n "$h" link set lo up; done
ip -n "$h1" link set "${tag}v1" up && ip -n "$h2" link set "${tag}v2" up || exit 1
# A 2 Gbit/s link between the hosts: an emulated network, as the other multi-host tests use.
if command -v tc >/dev/null; then
  for pair in "$h1 ${tag}v1" "$h2 ${tag}v2"; do
    set -- $pair
    tc -n "$1" qdisc add dev "$2" root tbf rate 2gbit burst 1mb latency 50ms || exit 1
  done
fi
timeout 120 ip netns exec "$h1" "$build/launcher/bagua-launch" --hosts "$h1:2,$h2:2" \
  --remote-cmd "ip netns exec {host}" --rdzv-host 198.18.0.1 --job-id "netns-$$" \
  "$build/bench/bagua-bench" allreduce --min-bytes 8 --max-bytes 8M --iters 3 --warmup 1 \
  --check >"$out" 2>&1
rc=$?
cat "$out"
[ "$rc" = 0 ] || { echo "FAIL: bagua-launch exited $rc"; exit 1; }
grep -q "nranks=4 transport=hier(shm+tcp)" "$out" || { echo "FAIL: not a 4-rank shm+tcp job"; exit 1; }
rows=$(grep -cE '^\[[^]]+\] +[0-9]+ +[0-9]+ +f32 +sum .* 0$' "$out")
[ "$rows" -ge 21 ] || { echo "FAIL: expected 21 checked rows, got $rows"; exit 1; }
echo "passed: 2 hosts x 2 ranks across network namespaces, $rows rows checked"
