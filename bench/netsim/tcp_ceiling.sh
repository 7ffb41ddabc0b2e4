#!/usr/bin/env bash
# Plain TCP on netsim links, the ceiling a collective over them can reach: one TCP stream
# between two namespaces, one way, then one stream each way at once (a ring allreduce sends and
# receives on every link at the same time, so the acknowledgements of the incoming stream share
# the shaped egress with the outgoing data). Python sockets, 1 MiB writes, 3 times each.
#
#   bench/netsim/tcp_ceiling.sh [--rates "100mbit 1gbit"] [--bytes "100mbit=16M 1gbit=64M"]
#
# Prints "rate mode repeat GB/s % of rate" lines. Needs root and iproute2.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rates="100mbit 1gbit" bytes="100mbit=16M 1gbit=64M"
while [ $# -gt 0 ]; do
  case $1 in
    --rates) rates=$2; shift 2 ;;
    --bytes) bytes=$2; shift 2 ;;
    --inner) inner=1; shift ;;
    *) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done

if [ -z "${inner:-}" ]; then
  for rate in $rates; do
    b=64M
    for s in $bytes; do [ "${s%%=*}" = "$rate" ] && b=${s#*=}; done
    b=$(numfmt --from=iec "$b") || exit 2
    BYTES=$b "$here/netsim.sh" run --hosts 2 --rate "$rate" --name tcpc -- "$0" --inner || exit 1
  done
  exit 0
fi

IFS=, read -ra H <<<"$NETSIM_HOSTS"
IFS=, read -ra A <<<"$NETSIM_ADDRS"
prog='
import socket, sys, threading, time
mode, role, addr, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
buf = bytes(1 << 20)
def send(s):
    left = n
    while left > 0:
        left -= s.send(buf[:min(left, len(buf))])
def recv(s):
    got = 0
    while got < n:
        d = s.recv(1 << 20)
        if not d: break
        got += len(d)
if role == "server":
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((addr, 5999)); l.listen(1); s, _ = l.accept()
    if mode == "both":
        t = threading.Thread(target=recv, args=(s,)); t.start(); send(s); t.join()
    else:
        recv(s)
    s.close()
else:
    s = socket.create_connection((addr, 5999)); t0 = time.time()
    if mode == "both":
        t = threading.Thread(target=recv, args=(s,)); t.start(); send(s); t.join()
    else:
        send(s); s.shutdown(socket.SHUT_WR); s.recv(1)  # returns when the server has it all
    print("%.5f" % (n / (time.time() - t0) / 1e9))
'
link=$(awk -v r="$NETSIM_RATE" 'BEGIN { n = r + 0; u = r; sub(/^[0-9.]+/, "", u)
  print n * (u == "gbit" ? 1e9 : u == "mbit" ? 1e6 : 1e3) / 8 / 1e9 }')
for mode in oneway both; do
  for k in 1 2 3; do
    ip netns exec "${H[1]}" /usr/bin/python3 -c "$prog" $mode server "${A[1]}" "$BYTES" &
    sleep 1
    g=$(ip netns exec "${H[0]}" timeout 120 /usr/bin/python3 -c "$prog" $mode client "${A[1]}" "$BYTES")
    wait
    awk -v r="$NETSIM_RATE" -v m=$mode -v k=$k -v g="$g" -v l="$link" \
      'BEGIN { printf "%s %s %d %s GB/s %.1f %% of rate\n", r, m, k, g, 100 * g / l }'
  done
done
