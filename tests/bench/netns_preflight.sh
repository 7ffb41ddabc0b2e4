# Sourced by the tests that emulate hosts in network namespaces (bench/netsim/netsim.sh):
# netns_preflight exits the test with 77 (skipped), saying why, where this machine cannot run
# them: no root, no iproute2, or namespaces refused (an unprivileged container).
netns_preflight() {
  [ "$(id -u)" = 0 ] || { echo "SKIP: network namespaces need root"; exit 77; }
  if ! command -v ip >/dev/null || ! ip netns list >/dev/null 2>&1; then
    echo "SKIP: ip netns is unavailable (Debian package iproute2)"
    exit 77
  fi
  command -v tc >/dev/null || { echo "SKIP: tc (Debian package iproute2) is missing"; exit 77; }
  local probe_ns=nspf$$
  ip netns add "$probe_ns" 2>/dev/null || { echo "SKIP: cannot create network namespaces here"; exit 77; }
  ip netns del "$probe_ns"
}
