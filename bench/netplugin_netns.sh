#!/usr/bin/env bash
# Bagua-Net over emulated links (docs/net-plugin.md): the plugin's point-to-point throughput between two
# network namespaces joined by shaped links (bench/netsim/netsim.sh), for several TCP streams
# per connection, against one stream (the plain-TCP baseline, same driver). Prints a markdown
# table: median GB/s per message size and stream count, the fraction of the link rate, and the
# best multi-stream gain over one stream.
#
#   bench/netplugin_netns.sh [--build DIR] [--rates "1gbit 10gbit"] [--streams "1 2 4"]
#                            [--repeat 3] [--total-bytes 256M] [--max-bytes 64M] [--raw FILE]
#                            [--delay MS]
#
# Needs root (network namespaces) and Debian's iproute2. Without --delay the links are tbf on
# veth pairs with sub-millisecond RTT (no netem on these kernels); --delay MS (one way, so the
# round trip is 2 x MS) runs them through DIR/bench/netsim-delayswitch instead.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$here/../build rates="1gbit 10gbit" streams="1 2 4" repeat=3 total=256M maxb=64M raw= delay=0
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --streams) streams=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --total-bytes) total=$2; shift 2 ;;
    --max-bytes) maxb=$2; shift 2 ;;
    --raw) raw=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    *) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
bench=$build/net-plugin/netplugin-bench plugin=$build/net-plugin/libnccl-net-bagua.so
[ -x "$bench" ] && [ -f "$plugin" ] || { echo "netplugin_netns: build $bench and $plugin first" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "netplugin_netns: needs root (network namespaces)" >&2; exit 77; }
raw=${raw:-$(mktemp /tmp/netplugin-netns.XXXXXX)}
: >"$raw"

# One netsim cluster per rate; inside it, the runs of every stream count are interleaved
# (1, 2, 4, 1, 2, 4, ...) so that a noisy moment hits all of them alike.
for rate in $rates; do
  inner="set -u; IFS=, read -r h0 h1 _ <<<\"\$NETSIM_HOSTS\"
    for k in \$(seq $repeat); do for n in $streams; do
      BAGUA_NET_IFNAME==eth0 BAGUA_NET_NSTREAMS=\$n '$bench' --plugin '$plugin' --mode throughput \
        --netns \"\$h0,\$h1\" --total-bytes $total --max-bytes $maxb |
        awk -v r=$rate -v n=\$n -v k=\$k '\$1 ~ /^[0-9]+\$/ {print r, n, k, \$1, \$4}' || exit 1
    done; done"
  "$here/netsim/netsim.sh" run --hosts 2 --rate "$rate" --delay "$delay" \
    --switch "$build/bench/netsim-delayswitch" --name npn -- bash -c "$inner" >>"$raw" || {
    echo "netplugin_netns: the run at $rate failed" >&2; exit 1; }
done

# rate nstreams repeat bytes GB/s -> the table.
/usr/bin/python3 - "$raw" "$streams" "$delay" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
streams = sys.argv[2].split()
delay = float(sys.argv[3])
path = f", one-way delay {sys.argv[3]} ms (RTT {2 * delay:g} ms)" if delay > 0 else ""
def gbs(rate):
    n = float(rate[:-4]); u = rate[-4:]
    return n * {'gbit': 1e9, 'mbit': 1e6, 'kbit': 1e3}[u] / 8 / 1e9
for rate in dict.fromkeys(r[0] for r in rows):
    link = gbs(rate)
    print(f"\n{rate} link ({link:.3f} GB/s each way){path}, median GB/s (% of link):\n")
    print("| bytes | " + " | ".join(f"{s} stream{'s' if s != '1' else ''}" for s in streams) + " | best / 1 stream |")
    print("| ---: |" + " ---: |" * (len(streams) + 1))
    for b in dict.fromkeys(r[3] for r in rows if r[0] == rate):
        med = {s: statistics.median(float(r[4]) for r in rows if r[0] == rate and r[3] == b and r[1] == s) for s in streams}
        best = max(v for s, v in med.items() if s != '1') if len(streams) > 1 else med[streams[0]]
        cells = " | ".join(f"{med[s]:.3f} ({100 * med[s] / link:.0f} %)" for s in streams)
        size = int(b); label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        print(f"| {label} | {cells} | {best / med['1']:.2f}x |" if '1' in med else f"| {label} | {cells} | - |")
PY
echo "raw: $raw" >&2
