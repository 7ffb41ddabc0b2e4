#!/usr/bin/env bash
# Plain TCP on netsim links, the ceiling a collective over them can reach: one TCP stream
# between two namespaces, one way, then one stream each way at once (a ring allreduce sends and
# receives on every link at the same time, so the acknowledgements of the incoming stream share
# the shaped egress with the outgoing data). Python sockets, 1 MiB writes, 3 times each; the
# two modes alternate (one way, both ways, one way, ...), so that a noisy moment hits both.
#
#   bench/netsim/tcp_ceiling.sh [--rates "100mbit 1gbit"] [--bytes "100mbit=16M 1gbit=64M"]
#                               [--delay MS] [--relay] [--record-dir DIR]
#
# Prints "rate mode repeat GB/s % of rate" lines (the whole transfer, from connect to the last
# byte). --delay MS (one way) and --relay pass to netsim.sh (links through netsim-delayswitch).
# One-way lines add what the whole-transfer figure hides on a long round trip: the receiver's
# rate after the first quarter of the bytes (TCP has ramped up by then), and the sender's
# TCP_INFO at the end: which share of its busy time the send buffer (sndbuf) or the receiver's
# window (rwnd) limited it, its largest send buffer, the smoothed RTT and retransmissions.
# Every transfer is also kept, with the load average at its end, in the record that
# bench/record.py describes (--record-dir DIR, or BENCH_RECORD_DIR, names its directory; under
# sudo it is handed to the user who ran sudo). Needs root and iproute2.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../record.sh"
record_argv "$0" "$@"
rates="100mbit 1gbit" bytes="100mbit=16M 1gbit=64M" links=()
while [ $# -gt 0 ]; do
  case $1 in
    --rates) rates=$2; shift 2 ;;
    --bytes) bytes=$2; shift 2 ;;
    --delay) links+=(--delay "$2"); shift 2 ;;
    --relay) links+=(--relay); shift ;;
    --record-dir) export BENCH_RECORD_DIR=$2; shift 2 ;;
    --inner) inner=1; shift ;;
    *) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done

if [ -z "${inner:-}" ]; then
  [ "$(id -u)" = 0 ] || { echo "tcp_ceiling: needs root (network namespaces)" >&2; exit 77; }
  record_open tcp_ceiling "" rate throughput:GB/s of_rate:% after_first_quarter:GB/s tcp_info
  trap 'record_close $?' EXIT
  for rate in $rates; do
    b=64M
    for s in $bytes; do [ "${s%%=*}" = "$rate" ] && b=${s#*=}; done
    b=$(numfmt --from=iec "$b") || exit 2
    BYTES=$b "$here/netsim.sh" run --hosts 2 --rate "$rate" ${links[@]+"${links[@]}"} --name tcpc \
      -- "$0" --inner || exit 1
  done
  exit 0
fi

record_attach
IFS=, read -ra H <<<"$NETSIM_HOSTS"
IFS=, read -ra A <<<"$NETSIM_ADDRS"
prog='
import socket, struct, sys, threading, time
mode, role, addr, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
buf = bytes(1 << 20)
steady = [0.0]
def send(s):
    left = n
    while left > 0:
        left -= s.send(buf[:min(left, len(buf))])
def recv(s):
    got, t_warm, warm = 0, None, 0
    while got < n:
        d = s.recv(1 << 20)
        if not d: break
        got += len(d)
        if t_warm is None and got >= n // 4:
            t_warm, warm = time.time(), got
    if t_warm is not None and got > warm:
        steady[0] = (got - warm) / (time.time() - t_warm) / 1e9
def info(s):
    # struct tcp_info (linux/tcp.h): tcpi_rtt at byte 68 (us), tcpi_total_retrans at 100,
    # tcpi_busy_time, tcpi_rwnd_limited, tcpi_sndbuf_limited at 168 (us, u64 each).
    i = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    if len(i) < 192: return "(no TCP_INFO)"
    rtt, = struct.unpack_from("I", i, 68); retr, = struct.unpack_from("I", i, 100)
    busy, rwnd, sndbuf = struct.unpack_from("QQQ", i, 168)
    pct = lambda x: 100.0 * x / busy if busy else 0.0
    return "limited by sndbuf %.0f %% rwnd %.0f %% of busy time, sndbuf %d KiB, rtt %.1f ms, retrans %d" % (
        pct(sndbuf), pct(rwnd), sndbuf_max[0] >> 10, rtt / 1e3, retr)
sndbuf_max = [0]
if role == "server":
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((addr, 5999)); l.listen(1); s, _ = l.accept()
    if mode == "both":
        t = threading.Thread(target=recv, args=(s,)); t.start(); send(s); t.join()
    else:
        recv(s)
        print("%.5f" % steady[0])
    s.close()
else:
    s = socket.create_connection((addr, 5999)); t0 = time.time()
    if mode == "both":
        t = threading.Thread(target=recv, args=(s,)); t.start(); send(s); t.join()
        print("%.5f" % (n / (time.time() - t0) / 1e9))
    else:
        # The send buffer is sampled while sending: autotuning grows it as the window does.
        left = n
        while left > 0:
            left -= s.send(buf[:min(left, len(buf))])
            sndbuf_max[0] = max(sndbuf_max[0], s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))
        s.shutdown(socket.SHUT_WR)
        s.recv(1)  # returns when the server has it all
        print("%.5f" % (n / (time.time() - t0) / 1e9)); print(info(s))
'
link=$(awk -v r="$NETSIM_RATE" 'BEGIN { n = r + 0; u = r; sub(/^[0-9.]+/, "", u)
  print n * (u == "gbit" ? 1e9 : u == "mbit" ? 1e6 : 1e3) / 8 / 1e9 }')
srv_out=$(mktemp)
for k in 1 2 3; do
  for mode in oneway both; do
    ip netns exec "${H[1]}" /usr/bin/python3 -c "$prog" $mode server "${A[1]}" "$BYTES" >"$srv_out" &
    sleep 1
    c=$(ip netns exec "${H[0]}" timeout 120 /usr/bin/python3 -c "$prog" $mode client "${A[1]}" "$BYTES")
    wait
    g=$(sed -n 1p <<<"$c")
    pct=$(awk -v g="$g" -v l="$link" 'BEGIN { printf "%.1f", 100 * g / l }')
    printf '%s %s %d %s GB/s %s %% of rate' "$NETSIM_RATE" $mode $k "$g" "$pct"
    steady=n/a info=n/a
    if [ $mode = oneway ]; then
      steady=$(head -1 "$srv_out") info=$(sed -n 2p <<<"$c")
      awk -v g="$steady" -v l="$link" -v i="$info" \
        'BEGIN { printf "; after the first quarter %.5f GB/s %.1f %%; %s", g, 100 * g / l, i }'
    fi
    echo
    record_row $mode $k "$NETSIM_RATE" "$g" "$pct" "$steady" "$info"
  done
done
rm -f "$srv_out"
