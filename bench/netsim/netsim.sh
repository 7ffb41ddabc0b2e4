#!/usr/bin/env bash
# An emulated cluster on one machine : N hosts, each a network namespace with one
# interface on a switch, every host's link shaped to a rate, optionally with a one-way delay.
#
#   bench/netsim/netsim.sh run --hosts 4 --rate 1gbit [--delay MS] -- COMMAND...
#       creates the cluster, runs COMMAND in the root namespace with NETSIM_HOSTS (the
#       namespace names, comma-separated), NETSIM_ADDRS (their addresses, same order),
#       NETSIM_RATE and NETSIM_DELAY_MS in its environment, and tears everything down when
#       COMMAND ends, fails, or the script is interrupted (Ctrl-C, SIGTERM: COMMAND and its
#       children get the signal first). Exits with COMMAND's status.
#   bench/netsim/netsim.sh up --hosts 4 --rate 1gbit [--delay MS] [--name NAME]
#   bench/netsim/netsim.sh down [--name NAME]
#   Other options: --relay (the delay switch even with --delay 0, to measure the switch itself),
#   --switch PATH (or NETSIM_SWITCH; default build/bench/netsim-delayswitch of this checkout).
#
# Layout: host i is namespace NAME-hI with interface eth0 = 198.18.0.I/24 (RFC 2544
# benchmarking space) and its loopback up; the root namespace gets no interface, route or
# address. With rate R every host sends and receives at most R, like a host on a switch with R
# ports. Two kinds of links:
#
# --delay 0 (the default): veth pairs on a Linux bridge inside its own namespace NAME-sw.
# Both directions of each link are shaped with tc's token bucket filter: the host's egress
# (tbf on eth0) and the switch port's egress towards the host (tbf on the port). The links
# have a veth pair's sub-millisecond latency: the netem qdisc (tc ... netem delay) is not
# available in this kernel.
#
# --delay MS > 0: latency comes from a userspace switch, bench/netsim/delayswitch.c
# (netsim-delayswitch, one process). Each host's eth0 is a TUN device the switch holds; it
# delivers every packet after the sender's link and the receiver's port have serialised it at
# R and MS milliseconds have passed (round trip 2 x MS), and drops at a port whose backlog is
# over max(1 MiB, 2 x R x RTT). TUN devices have no offloads here, so every packet is at most
# the MTU: the links use 9000-byte (jumbo) frames to keep the packet rate, and the switch's CPU
# cost on a small machine, low at 1 Gbit/s. The switch relays every packet in one thread, so
# its own ceiling (docs/results/2026-11-26-net-plugin-delay.md) bounds the rate.
#
# Needs root and Debian's iproute2.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)

usage() {
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

cmd=${1:-}
[ -n "$cmd" ] || usage
shift
hosts=4 rate=1gbit name=ns$$ delay=0 relay=0
switch=${NETSIM_SWITCH:-$here/../../build/bench/netsim-delayswitch}
while [ $# -gt 0 ]; do
  case $1 in
    --hosts) hosts=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --relay) relay=1; shift ;;
    --switch) switch=$2; shift 2 ;;
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
if ! [[ $delay =~ ^[0-9]+(\.[0-9]+)?$ ]] || awk -v d="$delay" 'BEGIN { exit !(d > 10000) }'; then
  echo "netsim: --delay \"$delay\": accepted a number of milliseconds from 0 to 10000 (one way)" >&2
  exit 2
fi
awk -v d="$delay" 'BEGIN { exit !(d > 0) }' && relay=1
# The delay switch writes its pid here once the links are up, and removes it when it exits.
pidfile=/run/netsim-$name.pid
switch_pid= cmd_pid=

# alive PID: the process exists and is not a zombie waiting for this shell to reap it.
alive() {
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "${st%% *}" != Z ]
}

# stop PID: SIGTERM, up to 5 s to exit, then SIGKILL; reaps it when it is this shell's child.
stop() {
  local i
  kill -TERM "$1" 2>/dev/null
  for ((i = 0; i < 50; i++)); do alive "$1" || break; sleep 0.1; done
  alive "$1" && kill -KILL "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}

# stop_cmd SIG: sends SIG to the command's process group (the command and what it started),
# gives them 5 s, then SIGKILL.
stop_cmd() {
  local i
  kill -"$1" -- -"$cmd_pid" 2>/dev/null
  for ((i = 0; i < 50; i++)); do
    alive "$cmd_pid" || wait "$cmd_pid" 2>/dev/null
    kill -0 -- -"$cmd_pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL -- -"$cmd_pid" 2>/dev/null
  wait "$cmd_pid" 2>/dev/null
}

# Stops this cluster's delay switch: the one this shell started, or (for `down`) the one named
# by the pid file, if its command line shows it serves this cluster (a stale pid file may name
# an unrelated process by now).
stop_switch() {
  local pid=$switch_pid cmdline
  [ -z "$pid" ] && [ -s "$pidfile" ] && pid=$(cat "$pidfile")
  if [[ $pid =~ ^[0-9]+$ ]]; then
    cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) "
    [[ $cmdline == *"--ns $name-h1"[,\ ]* ]] && stop "$pid"
  fi
  rm -f "$pidfile"
}

# The processes still inside the namespaces `$@`, one pid per line.
ns_pids() {
  local ns
  for ns in "$@"; do ip netns pids "$ns" 2>/dev/null; done
}

down() {
  local ns nss i
  stop_switch
  nss=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name-(sw|h[0-9]+)$")
  # Deleting a namespace does not stop what runs in it. A command may have put children in
  # process groups of their own (timeout(1) does, and so do launchers), which the signal to the
  # command's group misses; they would go on running, cut off from every link. So whatever is
  # left inside the cluster gets SIGTERM, up to 5 s, then SIGKILL.
  if [ -n "$nss" ] && [ -n "$(ns_pids $nss)" ]; then
    ns_pids $nss | xargs -r kill -TERM 2>/dev/null
    for ((i = 0; i < 50; i++)); do [ -z "$(ns_pids $nss)" ] && break; sleep 0.1; done
    ns_pids $nss | xargs -r kill -KILL 2>/dev/null
  fi
  for ns in $nss; do
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

up_tbf() {
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

# The hosts' namespaces, then one delay switch that creates, addresses and serves their eth0.
up_relay() {
  local i
  if [ ! -x "$switch" ]; then
    echo "netsim: the delay switch \"$switch\" is missing: build it (ninja -C build" \
      "netsim-delayswitch), or name it with --switch PATH or NETSIM_SWITCH" >&2
    return 2
  fi
  for ((i = 1; i <= hosts; i++)); do
    if ! ip netns add "$name-h$i"; then
      [ "$i" = 1 ] && { echo "netsim: cannot create network namespaces here" >&2; return 77; }
      return 1
    fi
    ip -n "$name-h$i" link set lo up || return 1
  done
  rm -f "$pidfile"
  # A session of its own: `up` leaves it running after this script has exited, and only
  # down() stops it (not a Ctrl-C meant for the command).
  setsid "$switch" --ns "$(host_list)" --prefix 198.18.0 --delay-ms "$delay" --rate "$rate" \
    --mtu 9000 --ready-file "$pidfile" </dev/null &
  switch_pid=$!
  for ((i = 0; i < 100; i++)); do
    [ -s "$pidfile" ] && return 0
    alive "$switch_pid" || break
    sleep 0.1
  done
  echo "netsim: the delay switch did not start (its message, if any, is above)" >&2
  return 1
}

up() {
  [ "$(id -u)" = 0 ] || { echo "netsim: creating network namespaces needs root" >&2; return 77; }
  command -v ip >/dev/null || { echo "netsim: ip (Debian package iproute2) is missing" >&2; return 77; }
  if [ "$relay" = 1 ]; then
    up_relay
  else
    command -v tc >/dev/null || { echo "netsim: tc (Debian package iproute2) is missing" >&2; return 77; }
    up_tbf
  fi
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
    echo "hosts $(host_list) addresses $(addr_list) rate $rate delay ${delay}ms"
    ;;
  down) down ;;
  run)
    [ $# -gt 0 ] || { echo "netsim: run needs a command after --" >&2; usage; }
    # The command runs in the background, in a process group of its own (set -m), and this
    # shell waits for it: bash runs a trap only once the foreground command has ended, so a
    # SIGTERM would otherwise tear nothing down until the command finished by itself. On
    # Ctrl-C or SIGTERM the command's whole group gets the same signal, then the cluster goes.
    trap 'rc=$?; [ -n "$cmd_pid" ] && stop_cmd "$sig"; down; exit $rc' EXIT
    trap 'sig=INT; exit 130' INT
    trap 'sig=TERM; exit 143' TERM
    sig=TERM
    up
    rc=$?
    [ $rc -eq 0 ] || exit $rc
    set -m
    NETSIM_HOSTS=$(host_list) NETSIM_ADDRS=$(addr_list) NETSIM_RATE=$rate NETSIM_DELAY_MS=$delay \
      "$@" <&0 &
    cmd_pid=$!
    set +m
    wait "$cmd_pid"
    rc=$?
    cmd_pid=
    exit $rc
    ;;
  *) echo "netsim: unknown command \"$cmd\"; accepted: run, up, down" >&2; usage ;;
esac
