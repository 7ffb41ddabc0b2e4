#!/usr/bin/env bash
# Bagua-Net over emulated links (docs/net-plugin.md): the plugin's point-to-point throughput between two
# network namespaces joined by shaped links (bench/netsim/netsim.sh), for several TCP streams
# per connection, against one stream (the plain-TCP baseline, same driver). Prints a markdown
# table: GB/s per message size and stream count as "median [min-max]" over the repeats (with
# fewer than 3, the runs themselves), the median's fraction of the link rate, and the best
# multi-stream gain over one stream (from the medians).
#
#   bench/netplugin_netns.sh [--build DIR] [--rates "1gbit 10gbit"] [--streams "1 2 4"]
#                            [--repeat 3] [--total-bytes 256M] [--max-bytes 64M] [--raw FILE]
#                            [--delay MS] [--record-dir DIR]
#
# Every run is also kept, one row per message size with the load average at its end, in the
# record that bench/record.py describes (--record-dir DIR, or BENCH_RECORD_DIR, names its
# directory; under sudo it is handed to the user who ran sudo).
#
# Needs root (network namespaces) and Debian's iproute2. Without --delay the links are tbf on
# veth pairs with sub-millisecond RTT (no netem on these kernels); --delay MS (one way, so the
# round trip is 2 x MS) runs them through DIR/bench/netsim-delayswitch instead.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/record.sh"
record_argv "$0" "$@"
build=$here/../build rates="1gbit 10gbit" streams="1 2 4" repeat=3 total=256M maxb=64M raw='' delay=0
inner=0
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
    --record-dir) export BENCH_RECORD_DIR=$2; shift 2 ;;
    --inner) inner=1; shift ;;
    *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
bench=$build/net-plugin/netplugin-bench plugin=$build/net-plugin/libnccl-net-bagua.so

# Inside the cluster of one rate (netsim.sh run ... -- this script --inner): the runs of every
# stream count are interleaved (1, 2, 4, 1, 2, 4, ...) so that a noisy moment hits all of them
# alike. Each size's result goes to stdout as "rate nstreams repeat bytes GB/s" and into the
# outer run's record as the run ends.
if [ "$inner" = 1 ]; then
  record_attach
  IFS=, read -r h0 h1 _ <<<"$NETSIM_HOSTS"
  for k in $(seq "$repeat"); do
    for n in $streams; do
      # "=eth0": that interface exactly (NCCL_SOCKET_IFNAME's syntax), not every name starting eth0.
      BAGUA_NET_IFNAME='=eth0' BAGUA_NET_NSTREAMS=$n "$bench" --plugin "$plugin" --mode throughput \
        --netns "$h0,$h1" --total-bytes "$total" --max-bytes "$maxb" |
        awk '$1 ~ /^[0-9]+$/ {print $1, $4}' | while read -r bytes gbs; do
          echo "$NETSIM_RATE $n $k $bytes $gbs"
          record_row "${n}_streams" "$k" "$NETSIM_RATE" "$bytes" "$gbs"
        done || exit 1
    done
  done
  exit 0
fi

[ -x "$bench" ] && [ -f "$plugin" ] || { echo "netplugin_netns: build $bench and $plugin first" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "netplugin_netns: needs root (network namespaces)" >&2; exit 77; }
record_open netplugin_netns "" rate bytes:B throughput:GB/s
trap 'record_close $?' EXIT
raw=${raw:-$(mktemp /tmp/netplugin-netns.XXXXXX)}
: >"$raw"

# One netsim cluster per rate.
for rate in $rates; do
  "$here/netsim/netsim.sh" run --hosts 2 --rate "$rate" --delay "$delay" \
    --switch "$build/bench/netsim-delayswitch" --name npn -- \
    "$0" --inner --build "$build" --streams "$streams" --repeat "$repeat" \
    --total-bytes "$total" --max-bytes "$maxb" >>"$raw" || {
    echo "netplugin_netns: the run at $rate failed" >&2; exit 1; }
done

# rate nstreams repeat bytes GB/s -> the table.
/usr/bin/python3 - "$raw" "$streams" "$delay" "$here" <<'PY'
import sys
sys.path.insert(0, sys.argv[4])
import record  # bench/record.py: "median [min-max]", and no median of fewer than 3 runs
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
streams = sys.argv[2].split()
delay = float(sys.argv[3])
path = f", one-way delay {sys.argv[3]} ms (RTT {2 * delay:g} ms)" if delay > 0 else ""
def gbs(rate):
    n = float(rate[:-4]); u = rate[-4:]
    return n * {'gbit': 1e9, 'mbit': 1e6, 'kbit': 1e3}[u] / 8 / 1e9
fewest = min([len([r for r in rows if r[0] == k[0] and r[1] == k[1] and r[3] == k[2]])
              for k in {(r[0], r[1], r[3]) for r in rows}] or [0])
if record.runs_note(fewest):
    print(record.runs_note(fewest))
for rate in dict.fromkeys(r[0] for r in rows):
    link = gbs(rate)
    print(f"\n{rate} link ({link:.3f} GB/s each way){path}, GB/s median [min-max] (median's % of link):\n")
    print("| bytes | " + " | ".join(f"{s} stream{'s' if s != '1' else ''}" for s in streams) + " | best / 1 stream |")
    print("| ---: |" + " ---: |" * (len(streams) + 1))
    for b in dict.fromkeys(r[3] for r in rows if r[0] == rate):
        runs = {s: [r[4] for r in rows if r[0] == rate and r[3] == b and r[1] == s] for s in streams}
        med = {s: record.median(runs[s]) for s in streams}
        best = max(v for s, v in med.items() if s != '1') if len(streams) > 1 else med[streams[0]]
        cells = " | ".join(f"{record.stat(runs[s], '.3f')} ({100 * med[s] / link:.0f} %)" for s in streams)
        size = int(b); label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        print(f"| {label} | {cells} | {best / med['1']:.2f}x |" if '1' in med else f"| {label} | {cells} | - |")
PY
echo "raw: $raw" >&2
