#!/usr/bin/env bash
# How stable the allreduce ring threshold that a TCP communicator calibrates at creation is,
# and what it costs where it picks wrong: on an emulated cluster (bench/netsim/netsim.sh: one
# network namespace per host, identical shaped links), --runs times in a row, one bagua-bench
# allreduce job per variant, interleaved:
#
#   calibrated      the threshold the communicator measured (BAGUA_NET_RING_MIN_BYTES unset)
#   rd              recursive doubling at every size (BAGUA_NET_RING_MIN_BYTES=1073741824)
#   ring            the ring at every size (BAGUA_NET_RING_MIN_BYTES=0)
#
# and, with --bench-b PATH, the calibrated variant of a second bagua-bench binary ("b", e.g.
# the previous commit's) in the same rotation.
#
#   sudo bench/calibration.sh [--build build] [--bench-b PATH] [--rates "100mbit 1gbit"]
#                             [--hosts 4] [--runs 10] [--sizes 8K:512K] [--iters 20]
#                             [--raw FILE]
#
# Prints, per rate and calibrated binary, the thresholds of the runs (rank 0's log line; every
# rank agrees on it) and, per message size, the calibrated time over the faster of rd and ring
# measured in the same run, as median [min-max] over the runs: 1.00 means it picked the faster
# algorithm. Raw rows (rate variant run bytes time_us threshold) go to --raw FILE. Needs root
# and iproute2 (netsim.sh).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$here/../build bench_b='' rates="100mbit 1gbit" hosts=4 runs=10 sizes=8K:512K iters=20 raw=''
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --bench-b) bench_b=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --hosts) hosts=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --raw) raw=$2; shift 2 ;;
    --inner) shift; break ;;
    -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "calibration: unknown option $1; see --help" >&2; exit 2 ;;
  esac
done
bench=$build/bench/bagua-bench
[ -x "$bench" ] || { echo "calibration: build $bench first" >&2; exit 2; }
[ -z "$bench_b" ] || [ -x "$bench_b" ] || { echo "calibration: --bench-b $bench_b is not executable" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "calibration: needs root (network namespaces)" >&2; exit 2; }
[ -n "$raw" ] || raw=$(mktemp /tmp/calibration.XXXXXX.tsv)
minb=${sizes%%:*} maxb=${sizes##*:}

# One job of `hosts` ranks, one per namespace: prints "bytes time_us" rows and, on the last
# line, "threshold T" (-1 when the log has none: a forced variant).
one_job() { # bin ring_min_or_empty port
  local bin=$1 rmin=$2 port=$3 i pids=() dir
  dir=$(mktemp -d /tmp/calibration.job.XXXXXX)
  IFS=, read -ra H <<<"$NETSIM_HOSTS"
  IFS=, read -ra A <<<"$NETSIM_ADDRS"
  for ((i = 0; i < hosts; i++)); do
    ip netns exec "${H[$i]}" env RANK=$i WORLD_SIZE=$hosts MASTER_ADDR="${A[0]}" \
      MASTER_PORT="$port" BAGUA_NODE_ID="${H[$i]}" BAGUA_DEBUG=INFO BAGUA_DEBUG_SUBSYS=COMM \
      ${rmin:+BAGUA_NET_RING_MIN_BYTES=$rmin} timeout 300 "$bin" allreduce --nranks "$hosts" \
      --transport tcp --min-bytes "$minb" --max-bytes "$maxb" --iters "$iters" --warmup 3 \
      >"$dir/out.$i" 2>"$dir/err.$i" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || echo "calibration: a rank failed ($dir)" >&2; done
  awk '$1 ~ /^[0-9]+$/ && NF >= 5 { print $1, $5 }' "$dir/out.0"
  t=$(sed -n 's/.*ring from \([0-9]*\) bytes.*/\1/p' "$dir/err.0" | head -1)
  echo "threshold ${t:--1}"
  rm -rf "$dir"
}

if [ "${1:-}" != inner ]; then
  : >"$raw"
  for rate in $rates; do
    "$here/netsim/netsim.sh" run --hosts "$hosts" --rate "$rate" -- \
      "$0" --build "$build" ${bench_b:+--bench-b "$bench_b"} --hosts "$hosts" --runs "$runs" \
      --sizes "$sizes" --iters "$iters" --raw "$raw" --inner inner "$rate" || exit $?
  done
  python3 - "$raw" <<'EOF'
import statistics, sys
from collections import defaultdict
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
t = defaultdict(dict)   # (rate, run) -> {(variant, bytes): time}
thr = defaultdict(list)
for rate, var, run, b, us, th in rows:
    t[(rate, run)][(var, int(b))] = float(us)
    if int(b) == min(int(r[3]) for r in rows if r[0] == rate) and var not in ("rd", "ring"):
        thr[(rate, var)].append(int(th))
def med(v):
    v = sorted(v)
    return f"{statistics.median(v):.2f} [{v[0]:.2f}-{v[-1]:.2f}]"
for rate in sorted({r[0] for r in rows}):
    for var in sorted({r[1] for r in rows if r[0] == rate} - {"rd", "ring"}):
        ths = thr[(rate, var)]
        print(f"\n{rate} {var}: thresholds {ths} (distinct: {len(set(ths))})")
        print("| bytes | calibrated / faster of rd, ring | rd us | ring us |\n| ---: | ---: | ---: | ---: |")
        sizes = sorted({int(r[3]) for r in rows if r[0] == rate})
        for b in sizes:
            ratio, rd, ring = [], [], []
            for (rt, run), d in t.items():
                if rt != rate or (var, b) not in d:
                    continue
                best = min(d[("rd", b)], d[("ring", b)])
                ratio.append(d[(var, b)] / best)
                rd.append(d[("rd", b)]); ring.append(d[("ring", b)])
            if ratio:
                print(f"| {b} | {med(ratio)} | {statistics.median(rd):.0f} | {statistics.median(ring):.0f} |")
EOF
  echo "raw: $raw"
  exit 0
fi

rate=$2 port=$((20000 + RANDOM % 20000))
for ((run = 0; run < runs; run++)); do
  variants="calibrated rd ring"
  [ -z "$bench_b" ] || variants="calibrated b rd ring"
  for var in $variants; do
    port=$((port + 1))
    case $var in
      calibrated) out=$(one_job "$bench" "" "$port") ;;
      b) out=$(one_job "$bench_b" "" "$port") ;;
      rd) out=$(one_job "$bench" 1073741824 "$port") ;;
      ring) out=$(one_job "$bench" 0 "$port") ;;
    esac
    th=$(echo "$out" | sed -n 's/^threshold //p')
    echo "$out" | grep -v '^threshold' | while read -r b us; do
      echo "$rate $var $run $b $us $th" >>"$raw"
    done
    echo "calibration: $rate run $run $var threshold $th" >&2
  done
done
