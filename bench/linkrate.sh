#!/usr/bin/env bash
# Link-rate report (docs/linkrate.md): collective busbw across emulated hosts (bench/netsim/netsim.sh:
# one network namespace per host, every link shaped both ways with tbf) against the link rate,
# for bagua-bench (TCP transport), Gloo (bench/peer_gloo.py under torch.distributed) and Open MPI
# TCP (bench/peer_mpi.c), one rank per host, all in the same cluster, interleaved (bagua, gloo,
# mpi, bagua, ...) --repeat times. Prints a markdown table: busbw GB/s per implementation as
# "median [min-max]" over the repeats (with fewer than 3 repeats, the runs themselves), bagua's
# median busbw as a percentage of the link rate (bits/8), bagua/gloo, bagua/mpi.
#
#   bench/linkrate.sh [--build build] [--rates "100mbit 1gbit 10gbit"] [--hosts "2 4"]
#                     [--collectives allreduce] [--impls "bagua gloo mpi"] [--repeat 3]
#                     [--sizes "100mbit=4M:16M:3 1gbit=16M:64M:5 10gbit=16M:64M:5"]
#                     [--warmup 1] [--timeout 600] [--raw FILE] [--record-dir DIR]
#   bench/linkrate.sh --table FILE [--impls ...]   (the table again from a --raw FILE)
#
# Every run is also kept, one row per message size with the load average at its end, in the
# record that bench/record.py describes (--record-dir DIR, or BENCH_RECORD_DIR, names its
# directory; under sudo it is handed to the user who ran sudo).
#
# Collectives: bagua-bench's (allreduce reduce_scatter allgather alltoall broadcast reduce
# barrier sendrecv neighbors); the peers skip sendrecv and neighbors, the decentralized
# algorithms' patterns, and Gloo skips reduce_scatter.
#
# --sizes: per rate, MIN:MAX:ITERS (sizes double from MIN to MAX); a rate not listed gets
# 16M:64M:5. How ranks start: bagua-bench as one rank per namespace with RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT (env:// bootstrap) and BAGUA_NODE_ID=<namespace>; Gloo as one
# peer_gloo.py --worker per namespace (GLOO_SOCKET_IFNAME=eth0, one thread); Open MPI as
# mpirun inside the first namespace with bench/netsim/netns-agent.sh as plm_rsh_agent,
# --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include eth0. busbw: nccl-tests factors
# (allreduce 2(n-1)/n), as in bench/README-peers.md. Needs root, iproute2, python3-torch,
# openmpi-bin and libopenmpi-dev (mpicc builds peer_mpi into BUILD/bench-peers/). Latency is
# not emulated (netsim.sh says why).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/record.sh"
record_argv "$0" "$@"
build=$here/../build rates="100mbit 1gbit 10gbit" hosts="2 4" colls=allreduce impls="bagua gloo mpi"
repeat=3 sizes="100mbit=4M:16M:3 1gbit=16M:64M:5 10gbit=16M:64M:5" warmup=1 tmo=600 raw='' table='' inner=0
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --hosts) hosts=$2; shift 2 ;;
    --collectives) colls=$2; shift 2 ;;
    --impls) impls=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --timeout) tmo=$2; shift 2 ;;
    --raw) raw=$2; shift 2 ;;
    --table) table=$2; shift 2 ;;
    --record-dir) export BENCH_RECORD_DIR=$2; shift 2 ;;
    --inner) inner=1; shift ;;
    *) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
build=$(cd "$build" 2>/dev/null && pwd) || { echo "linkrate: no build directory" >&2; exit 2; }
bench=$build/bench/bagua-bench peer_mpi=$build/bench-peers/peer_mpi py=/usr/bin/python3
agent=$here/netsim/netns-agent.sh

# size_for RATE -> "MIN MAX ITERS"
size_for() {
  local s
  for s in $sizes; do [ "${s%%=*}" = "$1" ] && { echo "${s#*=}" | tr : ' '; return; }; done
  echo "16M 64M 5"
}

if [ -n "$table" ]; then
  raw=$table
elif [ "$inner" = 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "linkrate: needs root (network namespaces)" >&2; exit 77; }
  [ -x "$bench" ] || { echo "linkrate: build $bench first (cmake --build build --target bagua-bench)" >&2; exit 2; }
  case " $impls " in *" mpi "*)
    command -v mpicc >/dev/null && command -v mpirun >/dev/null ||
      { echo "linkrate: Open MPI missing: apt-get install openmpi-bin libopenmpi-dev" >&2; exit 2; }
    mkdir -p "$build/bench-peers" &&
      mpicc -std=c11 -O2 -Wall -Wextra -o "$peer_mpi" "$here/peer_mpi.c" ||
      { echo "linkrate: building peer_mpi.c failed" >&2; exit 2; } ;;
  esac
  case " $impls " in *" gloo "*)
    "$py" -c 'import torch.distributed' 2>/dev/null ||
      { echo "linkrate: torch missing: apt-get install python3-torch" >&2; exit 2; } ;;
  esac
  peers=
  case " $impls " in *" gloo "*) peers+=" torch" ;; esac
  case " $impls " in *" mpi "*) peers+=" ompi" ;; esac
  record_open linkrate "$peers" rate hosts collective bytes:B time_us:us wrong:elements
  trap 'record_close $?' EXIT
  raw=${raw:-$(mktemp /tmp/linkrate.XXXXXX)}
  : >"$raw"
  echo "# linkrate $(date -u +%FT%TZ) git $(git -C "$here" rev-parse --short HEAD 2>/dev/null)" \
    "nproc $(nproc) $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')" >>"$raw"
  for rate in $rates; do
    for n in $hosts; do
      echo "# load $rate $n before: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$raw"
      "$here/netsim/netsim.sh" run --hosts "$n" --rate "$rate" --name lrate -- \
        "$0" --inner --build "$build" --rates "$rate" --collectives "$colls" --impls "$impls" \
        --repeat "$repeat" --sizes "$sizes" --warmup "$warmup" --timeout "$tmo" >>"$raw"
      rc=$?
      echo "# load $rate $n after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$raw"
      [ $rc -eq 0 ] || { echo "linkrate: the run at $rate with $n hosts failed (rc $rc); raw: $raw" >&2; exit 1; }
    done
  done
fi
if [ "$inner" = 0 ]; then

  # "rate hosts collective impl repeat bytes time_us wrong" rows -> the table of medians.
  "$py" - "$raw" "$impls" "$here" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
import record  # bench/record.py: "median [min-max]", and no median of fewer than 3 runs
rows = [l.split() for l in open(sys.argv[1]) if l.strip() and not l.startswith('#')]
impls = sys.argv[2].split()
def link_gbs(rate):
    n = float(rate[:-4]); u = rate[-4:]
    return n * {'gbit': 1e9, 'mbit': 1e6, 'kbit': 1e3}[u] / 8 / 1e9
FACTOR = {'allreduce': lambda n: 2 * (n - 1) / n, 'reduce_scatter': lambda n: (n - 1) / n,
          'allgather': lambda n: (n - 1) / n, 'alltoall': lambda n: (n - 1) / n,
          'neighbors': lambda n: 0.5 if n == 2 else 1.0}  # 2 ranks: one peer, one half sent
def busbw(r):  # GB/s (1e9 B/s), nccl-tests factors, from bytes and the max-over-ranks time
    return int(r[5]) / (float(r[6]) * 1e-6) / 1e9 * FACTOR.get(r[2], lambda n: 1.0)(int(r[1]))
def med(sel):
    return record.median([busbw(r) for r in sel])
def fmt(v, f="{:.4f}"):
    return "n/a" if v is None else f.format(v)
fewest = min([len([r for r in rows if (r[0], r[1], r[2], r[5], r[3]) == k])
              for k in {(r[0], r[1], r[2], r[5], r[3]) for r in rows}] or [0])
if record.runs_note(fewest):
    print(record.runs_note(fewest) + "\n")
print("| rate | hosts | collective | size | " + " | ".join(f"{i} GB/s" for i in impls) +
      " | bagua % of rate | " + " | ".join(f"bagua/{i}" for i in impls if i != 'bagua') + " |")
print("| --- | ---: | --- | ---: |" + " ---: |" * len(impls) + " ---: |" + " ---: |" * (len(impls) - 1))
bad = 0
keys = list(dict.fromkeys((r[0], r[1], r[2], r[5]) for r in rows))
for rate, n, coll, b in keys:
    sel = [r for r in rows if (r[0], r[1], r[2], r[5]) == (rate, n, coll, b)]
    m = {i: med([r for r in sel if r[3] == i]) for i in impls}
    wrong = {i for r in sel for i in [r[3]] if r[7] not in ('0', '-1')}
    bad += len(wrong)
    cells = " | ".join(record.stat([busbw(r) for r in sel if r[3] == i], ".4f") +
                       ("!" if i in wrong else "") for i in impls)
    pct = fmt(100 * m['bagua'] / link_gbs(rate), "{:.1f} %") if m.get('bagua') is not None else "n/a"
    ratios = " | ".join(fmt(m['bagua'] / m[i] if m.get('bagua') and m[i] else None, "{:.2f}")
                        for i in impls if i != 'bagua')
    size = int(b); label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
    print(f"| {rate} | {n} | {coll} | {label} | {cells} | {pct} | {ratios} |")
print("\nrepeats per cell:", ", ".join(sorted({str(len([r for r in rows if (r[0], r[1], r[2], r[5], r[3]) == k]))
                                          for k in {(r[0], r[1], r[2], r[5], r[3]) for r in rows}})))
if bad: print("\n'!': a run with wrong elements")
PY
  echo "raw: $raw" >&2
  exit 0
fi

# Inside one cluster (netsim.sh run): NETSIM_HOSTS / NETSIM_ADDRS name the namespaces. Rows
# go into the outer run's record as each run ends, with the load average of that moment.
record_attach
IFS=, read -ra H <<<"$NETSIM_HOSTS"
IFS=, read -ra A <<<"$NETSIM_ADDRS"
n=${#H[@]} rate=$NETSIM_RATE
read -r minb maxb iters <<<"$(size_for "$rate")"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
log=$(mktemp -d /tmp/linkrate-log.XXXXXX)
pids=()
# On Ctrl-C / SIGTERM: stop the ranks this script started, then let netsim.sh tear down.
stop() { [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null; wait; rm -rf "$log" /tmp/ompi-netns; }
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
port=$((20000 + RANDOM % 20000))

# waitall -> 0 when every started rank exited 0
waitall() {
  local p rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  pids=()
  return $rc
}

run_one() { # impl coll repeat -> rows on stdout
  local impl=$1 coll=$2 k=$3 out=$log/$1.$2.$3.out i rc
  local common=(--min-bytes "$minb" --max-bytes "$maxb" --iters "$iters" --warmup "$warmup")
  port=$((port + 1))
  : >"$out"
  case $impl in
    bagua)
      for ((i = 0; i < n; i++)); do
        ip netns exec "${H[$i]}" env RANK=$i WORLD_SIZE=$n MASTER_ADDR="${A[0]}" MASTER_PORT=$port \
          BAGUA_NODE_ID="${H[$i]}" timeout "$tmo" "$bench" "$coll" --nranks "$n" --transport tcp \
          --dtype f32 "${common[@]}" --check >>"$out" 2>>"$out.err" &
        pids+=($!)
      done
      waitall; rc=$? ;;
    gloo)
      case $coll in # not in torch 1.13's Gloo (README-peers.md), or bagua-bench's own patterns
        reduce_scatter | sendrecv | neighbors) return 0 ;;
      esac
      for ((i = 0; i < n; i++)); do
        ip netns exec "${H[$i]}" env GLOO_SOCKET_IFNAME=eth0 timeout "$tmo" "$py" \
          "$here/peer_gloo.py" "$coll" --nranks "$n" --worker $i --port $port \
          --master-addr "${A[0]}" "${common[@]}" --check >>"$out" 2>>"$out.err" &
        pids+=($!)
      done
      waitall; rc=$? ;;
    mpi)
      case $coll in sendrecv | neighbors) return 0 ;; esac # bagua-bench's own patterns
      ip netns exec "${H[0]}" timeout "$tmo" mpirun --allow-run-as-root -H "$NETSIM_HOSTS" -np "$n" \
        --map-by node --bind-to none --mca plm_rsh_agent "$agent" --mca oob_tcp_if_include eth0 \
        --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include eth0 \
        "$peer_mpi" "$coll" "${common[@]}" --check >>"$out" 2>>"$out.err" &
      pids+=($!)
      waitall; rc=$? ;;
  esac
  if [ $rc -ne 0 ]; then
    echo "linkrate: $impl $coll at $rate, $n hosts, repeat $k failed; last lines of $out.err:" >&2
    tail -5 "$out.err" >&2
    return 1
  fi
  # time_us ($5) rather than the printed busbw: bagua-bench prints 3 decimals (0.011 GB/s at
  # 100 Mbit/s would be +-5 %); the table recomputes busbw from bytes and time_us.
  local bytes time_us wrong
  awk '$1 ~ /^[0-9]+$/ {print $1, $5, $8}' "$out" | while read -r bytes time_us wrong; do
    echo "$rate $n $coll $impl $k $bytes $time_us $wrong"
    record_row "$impl" "$k" "$rate" "$n" "$coll" "$bytes" "$time_us" "$wrong"
  done
}

for ((k = 1; k <= repeat; k++)); do
  for coll in $colls; do
    for impl in $impls; do
      run_one "$impl" "$coll" "$k" || exit 1
    done
  done
done
rm -rf "$log" /tmp/ompi-netns
