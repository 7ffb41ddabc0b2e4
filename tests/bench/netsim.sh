#!/usr/bin/env bash
# bench/netsim/netsim.sh: set-up and tear-down leave no namespace, link, process or
# pid file behind, also after the command fails and after a SIGTERM; a 2-host TCP transfer runs
# within 20 % of the configured rate on both kinds of link (tbf on veth, and the delay switch's
# TUN links), and the delay switch gives the round trip it was asked for. Exits 77 (skipped)
# where network namespaces or TUN devices cannot be made.
# usage: netsim.sh SWITCH   (the netsim-delayswitch executable)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
netsim=$here/../../bench/netsim/netsim.sh
export NETSIM_SWITCH=${1:?usage: netsim.sh SWITCH}

# ---- Inside a cluster (netsim.sh run ... -- this script --inner MODE) ----
# The probe: a TCP server in host 2 and a client in host 1, Python sockets.
#   rate BYTES: the client sends BYTES; the server prints the rate in Mbit/s over all but the
#     first quarter (the first quarter lets TCP ramp up to the rate, which takes some round
#     trips at 40 ms).
#   rtt: 2 + 15 ping-pongs of one byte each way; the client prints the median round trip, ms.
probe='
import socket, statistics, sys, time
role, mode, addr = sys.argv[1], sys.argv[2], sys.argv[3]
n = int(sys.argv[4]) if len(sys.argv) > 4 else 0
if role == "server":
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((addr, 5999)); l.listen(1); l.settimeout(30); s, _ = l.accept()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if mode == "rtt":
        while (b := s.recv(1)):
            s.sendall(b)
    else:
        got, t_warm = 0, None
        while (d := s.recv(1 << 20)):
            got += len(d)
            if t_warm is None and got >= n // 4:
                t_warm, warm = time.monotonic(), got
        print("%.1f" % ((got - warm) * 8 / (time.monotonic() - t_warm) / 1e6))
    sys.exit(0)
for _ in range(100):  # the server may still be starting
    try:
        s = socket.create_connection((addr, 5999)); break
    except OSError:
        time.sleep(0.05)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
if mode == "rtt":
    rtts = []
    for i in range(17):
        t0 = time.monotonic(); s.sendall(b"x"); s.recv(1); rtts.append(time.monotonic() - t0)
    print("%.1f" % (statistics.median(rtts[2:]) * 1e3))
else:
    buf = bytes(1 << 20)
    left = n
    while left > 0:
        left -= s.send(buf[:min(left, len(buf))])
s.close()
'
if [ "${2:-}" = --inner ]; then
  IFS=, read -ra H <<<"$NETSIM_HOSTS"
  IFS=, read -ra A <<<"$NETSIM_ADDRS"
  mode=$3 n=${4:-0}
  out=$(mktemp)
  ip netns exec "${H[1]}" timeout 60 /usr/bin/python3 -c "$probe" server "$mode" "${A[1]}" "$n" >"$out" &
  srv=$!
  ip netns exec "${H[0]}" timeout 60 /usr/bin/python3 -c "$probe" client "$mode" "${A[1]}" "$n" >>"$out"
  rc=$?
  wait $srv || rc=1
  cat "$out"
  rm -f "$out"
  exit $rc
fi

# ---- The test ----
. "$here/netns_preflight.sh"
netns_preflight
[ -c /dev/net/tun ] || { echo "SKIP: /dev/net/tun is missing (the delay switch needs TUN)"; exit 77; }
[ -x "$NETSIM_SWITCH" ] || { echo "FAIL: $NETSIM_SWITCH is not built"; exit 1; }

fails=0
tag=t$(($$ % 100000)) # cluster names: at most 8 characters (netsim.sh --name)
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# leftovers NAME: nothing of cluster NAME may remain: namespace, link in this namespace, delay
# switch process, pid file. (Outputs are captured before grep: with pipefail, `ip ... | grep -q`
# fails when grep quits early and ip dies of SIGPIPE.)
leftovers() {
  local n=$1 what="" out
  out=$(ip netns list | grep "^$n-") && what+=" namespaces: $(tr '\n' ' ' <<<"$out")"
  out=$(ip -o link show | grep ": $n-") && what+=" links: $(cut -d: -f2 <<<"$out" | tr '\n' ' ')"
  out=$(pgrep -f -- "--ns $n-h1[, ]") && what+=" switch process: $out"
  [ -e "/run/netsim-$n.pid" ] && what+=" pid file /run/netsim-$n.pid"
  [ -z "$what" ] || fail "cluster $n left behind:$what"
}

# within VALUE LO HI: LO <= VALUE <= HI.
within() { awk -v v="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v != "" && v >= lo && v <= hi) }'; }

# 1. tbf links at 100 Mbit/s: 16 MB, rate within 20 %.
t0=$SECONDS
r=$("$netsim" run --hosts 2 --rate 100mbit --name ${tag}a -- "$0" "$1" --inner rate 16000000)
echo "tbf 100mbit: ${r:-nothing} Mbit/s ($((SECONDS - t0)) s)"
within "$r" 80 120 || fail "tbf 100mbit: measured \"$r\" Mbit/s, accepted 80-120"
leftovers ${tag}a

# 2. The delay switch at 100 Mbit/s, 20 ms each way: round trip 35-60 ms, rate within 20 %.
t0=$SECONDS
r=$("$netsim" run --hosts 2 --rate 100mbit --delay 20 --name ${tag}b -- bash -c \
  "'$0' '$1' --inner rtt && '$0' '$1' --inner rate 24000000")
rtt=$(sed -n 1p <<<"$r") rate=$(sed -n 2p <<<"$r")
echo "delay switch 100mbit 20 ms: rtt ${rtt:-nothing} ms, ${rate:-nothing} Mbit/s ($((SECONDS - t0)) s)"
within "$rtt" 35 60 || fail "delay switch: round trip \"$rtt\" ms, accepted 35-60 for a 40 ms one"
within "$rate" 80 120 || fail "delay switch 100mbit: measured \"$rate\" Mbit/s, accepted 80-120"
leftovers ${tag}b

# 3. A command that fails: its status comes back and nothing remains, on both kinds of link.
# Its stderr (the switch's counters) is left out of the log.
for d in 0 5; do
  "$netsim" run --hosts 3 --rate 100mbit --delay $d --name ${tag}c -- false 2>/dev/null
  rc=$?
  [ $rc = 1 ] || fail "a failing command under --delay $d: netsim.sh exited $rc, expected 1"
  leftovers ${tag}c
done

# A delay switch that does not start: netsim.sh fails, and nothing remains either.
"$netsim" run --hosts 2 --rate 100mbit --delay 5 --switch /bin/false --name ${tag}c -- true \
  2>/dev/null
rc=$?
[ $rc = 1 ] || fail "a delay switch that does not start: netsim.sh exited $rc, expected 1"
leftovers ${tag}c

# 4. SIGTERM while the command runs: the command is stopped and the cluster torn down at once,
# not when the command would have ended. A child that left the command's process group (as
# timeout(1) and launchers do; here setsid inside host 2) is stopped too.
pidf=$(mktemp)
"$netsim" run --hosts 2 --rate 100mbit --delay 5 --name ${tag}d -- \
  bash -c 'ip netns exec ${NETSIM_HOSTS#*,} setsid sleep 60 & echo $! >"$0.esc";
           echo $$ >"$0"; exec sleep 60' "$pidf" &
runner=$!
for ((i = 0; i < 100; i++)); do [ -s "$pidf" ] && [ -s "$pidf.esc" ] && break; sleep 0.1; done
esc=$(cat "$pidf.esc")
# ip netns exec, then setsid, exec themselves into sleep under the same pid.
for ((i = 0; i < 50; i++)); do [ "$(cat /proc/$esc/comm 2>/dev/null)" = sleep ] && break; sleep 0.1; done
t0=$SECONDS
kill -TERM $runner
wait $runner
rc=$?
[ $rc = 143 ] || fail "SIGTERM: netsim.sh exited $rc, expected 143"
[ $((SECONDS - t0)) -le 10 ] || fail "SIGTERM: the tear-down took $((SECONDS - t0)) s"
cmd=$(cat "$pidf")
[ -n "$cmd" ] && kill -0 "$cmd" 2>/dev/null && fail "SIGTERM: the command (pid $cmd) still runs"
# A killed orphan may stay a zombie until init reaps it: that counts as stopped.
st=$(awk '{print $3}' "/proc/$esc/stat" 2>/dev/null)
[ -n "$esc" ] && [ -n "$st" ] && [ "$st" != Z ] &&
  fail "SIGTERM: a process of the cluster outside the command's group (pid $esc, state $st) still runs"
rm -f "$pidf" "$pidf.esc"
leftovers ${tag}d

# 5. up, then down from another invocation (the switch outlives the first one).
"$netsim" up --hosts 2 --rate 100mbit --delay 5 --name ${tag}e >/dev/null || fail "up failed"
addrs=$(ip netns exec ${tag}e-h1 ip -o addr show eth0)
grep -q 198.18.0.1/24 <<<"$addrs" || fail "up: eth0 of ${tag}e-h1 has no 198.18.0.1/24: $addrs"
"$netsim" down --name ${tag}e
leftovers ${tag}e

[ $fails = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "PASS"
