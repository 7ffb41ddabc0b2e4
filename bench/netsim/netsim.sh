#!/usr/bin/env bash
# An emulated cluster on one machine (DESIGN §10): N hosts, each a network namespace with one
# interface on a switch, every host's link shaped to a rate with tc's token bucket filter.
#
#   bench/netsim/netsim.sh run --hosts 4 --rate 1gbit -- COMMAND...
#       creates the cluster, runs COMMAND in the root namespace with NETSIM_HOSTS (the
#       namespace names, comma-separated), NETSIM_ADDRS (their addresses, same order) and
#       NETSIM_RATE in its environment, and tears everything down when COMMAND ends, fails,
#       or the script is interrupted (Ctrl-C, SIGTERM). Exits with COMMAND's status.
#   bench/netsim/netsim.sh up --hosts 4 --rate 1gbit [--name NAME]   (prints the hosts)
#   bench/netsim/netsim.sh down [--name NAME]
#
# Layout: the switch is a Linux bridge inside its own namespace NAME-sw, so the root
# namespace gets no interface, route or address; host i is namespace NAME-hI with interface
# eth0 = 198.18.0.I/24 (RFC 2544 benchmarking space) and its loopback up. Both directions of
# each link are shaped: the host's egress (tbf on eth0) and the switch port's egress towards
# the host (tbf on the port). With rate R every host sends and receives at most R, like a
# host on a switch with R ports.
#
# Latency is not emulated: the netem qdisc (tc ... netem delay) is not available in this
# kernel, so every link has the sub-millisecond latency of a veth pair; the benchmarks treat
# latency as unmeasured. Needs root and Debian's iproute2.
set -uo pipefail

usage() {
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

cmd=${1:-}
[ -n "$cmd" ] || usage
shift
hosts=4 rate=1gbit name=ns$$
while [ $# -gt 0 ]; do
  case $1 in
    --hosts) hosts=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --) shift; break ;;
    -h | --help) usage ;;
    *) [ "$cmd" = run ] && break; echo "netsim: unknown argument \"$1\"" >&2; usage ;;
  esac
done
if ! [[ $hosts =~ ^[0-9]+$ ]] || [ "$hosts" -lt 1 ] || [ "$hosts" -gt 200 ]; then
  echo "netsim: --hosts \"$hosts\": accepted 1..200" >&2
  exit 2
fi
if ! [[ $rate =~ ^[0-9]+(\.[0-9]+)?(kbit|mbit|gbit)$ ]]; then
  echo "netsim: --rate \"$rate\": accepted a number with kbit, mbit or gbit (e.g. 100mbit, 10gbit)" >&2
  exit 2
fi
if ! [[ $name =~ ^[a-z][a-z0-9]{0,7}$ ]]; then
  echo "netsim: --name \"$name\": accepted 1-8 lowercase letters and digits, starting with a letter" >&2
  exit 2
fi

down() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name-(sw|h[0-9]+)$"); do
    ip netns del "$ns" 2>/dev/null
  done
}

# Burst: at least one MTU-sized packet and about 1 ms of traffic at the rate (tbf needs the
# bucket to hold what arrives between two timer ticks, or it cannot reach the rate).
burst_for() {
  awk -v r="$1" 'BEGIN {
    n = r + 0; u = r; sub(/^[0-9.]+/, "", u)
    bps = n * (u == "gbit" ? 1e9 : u == "mbit" ? 1e6 : 1e3)
    b = bps / 8 / 1000; if (b < 16384) b = 16384
    printf "%d", b }'
}

up() {
  [ "$(id -u)" = 0 ] || { echo "netsim: creating network namespaces needs root" >&2; return 77; }
  command -v tc >/dev/null || { echo "netsim: tc (Debian package iproute2) is missing" >&2; return 77; }
  local sw=$name-sw burst i
  burst=$(burst_for "$rate")
  ip netns add "$sw" || { echo "netsim: cannot create network namespaces here" >&2; return 77; }
  ip -n "$sw" link add br0 type bridge || return 1
  ip -n "$sw" link set br0 up || return 1
  for ((i = 1; i <= hosts; i++)); do
    local h=$name-h$i port=p$i
    ip netns add "$h" || return 1
    ip link add "$name-e$i" type veth peer name "$name-p$i" || return 1
    ip link set "$name-e$i" netns "$h" || return 1
    ip link set "$name-p$i" netns "$sw" || return 1
    ip -n "$h" link set "$name-e$i" name eth0 || return 1
    ip -n "$sw" link set "$name-p$i" name "$port" || return 1
    ip -n "$sw" link set "$port" master br0 || return 1
    ip -n "$h" addr add "198.18.0.$i/24" dev eth0 || return 1
    ip -n "$h" link set lo up && ip -n "$h" link set eth0 up && ip -n "$sw" link set "$port" up ||
      return 1
    tc -n "$h" qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 50ms || return 1
    tc -n "$sw" qdisc add dev "$port" root tbf rate "$rate" burst "$burst" latency 50ms || return 1
  done
}

host_list() {
  local i out=""
  for ((i = 1; i <= hosts; i++)); do out+="${out:+,}$name-h$i"; done
  echo "$out"
}

addr_list() {
  local i out=""
  for ((i = 1; i <= hosts; i++)); do out+="${out:+,}198.18.0.$i"; done
  echo "$out"
}

case $cmd in
  up)
    up
    rc=$?
    if [ $rc -ne 0 ]; then down; exit $rc; fi
    echo "hosts $(host_list) addresses $(addr_list) rate $rate"
    ;;
  down) down ;;
  run)
    [ $# -gt 0 ] || { echo "netsim: run needs a command after --" >&2; usage; }
    trap 'rc=$?; down; exit $rc' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    up
    rc=$?
    [ $rc -eq 0 ] || exit $rc
    NETSIM_HOSTS=$(host_list) NETSIM_ADDRS=$(addr_list) NETSIM_RATE=$rate "$@"
    exit $?
    ;;
  *) echo "netsim: unknown command \"$cmd\"; accepted: run, up, down" >&2; usage ;;
esac
