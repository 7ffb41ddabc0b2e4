#!/usr/bin/env bash
# comm_scale.sh - a communicator at size: creation and 8-byte allreduce latency at N ranks,
# ours against Open MPI and Gloo, measured in one run.
#
# Every rank is a process on this host and, for us, a node of its own (--node-per-rank: TCP
# between all of them, as one rank per host would be); Open MPI runs its TCP BTL over
# loopback (mpirun --oversubscribe), Gloo its TCP transport. Each (N, repetition) runs the
# three interleaved, so that noise from other tenants hits them alike. Per run it keeps:
#   wall_s     the whole command, start to exit (processes started, world formed, the
#              allreduces, torn down): what a user waits for
#   created_s  the world's creation inside the program, the maximum over ranks
#              (bagua_comm_create; MPI_Init; init_process_group)
#   us         the 8-byte allreduce, mean per call, maximum over ranks
#   ok         1 when the program checked its results and exited 0
# and prints "median [min-max]" per cell. Gloo runs only where its processes fit in memory
# (each imports torch, about 300 MB).
#
# Usage: bench/comm_scale.sh [--repeat 3] [--iters 50] [--record-dir DIR] [--timeout S] N...
# Debian packages: openmpi-bin libopenmpi-dev (Open MPI), python3-torch (Gloo).
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$script_dir/.." && pwd)
. "$script_dir/record.sh"
record_argv "$0" "$@"

repeat=3 iters=50 timeout=900 sizes=()
bagua=${BUILD_DIR:-$repo_root/build}/bench/bagua-bench
die() {
  echo "comm_scale.sh: error: $*" >&2
  exit 2
}
while [[ $# -gt 0 ]]; do
  case $1 in
    --repeat) repeat=${2:?}; shift 2 ;;
    --iters) iters=${2:?}; shift 2 ;;
    --timeout) timeout=${2:?}; shift 2 ;;
    --record-dir) export BENCH_RECORD_DIR=${2:?}; shift 2 ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) die "unknown option $1 (accepted: --repeat, --iters, --timeout, --record-dir)" ;;
    *) [[ $1 =~ ^[0-9]+$ && $1 -ge 2 ]] || die "size $1: accepted: an integer >= 2"
       sizes+=("$1"); shift ;;
  esac
done
[[ ${#sizes[@]} -gt 0 ]] || die "no sizes (e.g. bench/comm_scale.sh 8 64 128 256)"
[[ $repeat =~ ^[1-9][0-9]*$ ]] || die "--repeat $repeat: accepted: a positive integer"
[[ -x $bagua ]] || die "no bagua-bench at $bagua (build first, or set BUILD_DIR)"
command -v mpirun >/dev/null || die "mpirun not found: apt-get install openmpi-bin"
command -v mpicc >/dev/null || die "mpicc not found: apt-get install libopenmpi-dev"

tmp=$(mktemp -d /tmp/bagua-comm-scale.XXXXXX)
peer_mpi=$tmp/peer_mpi
mpicc -std=c11 -O2 -o "$peer_mpi" "$script_dir/peer_mpi.c"
record_open comm_scale "ompi torch" nranks wall_s:s created_s:s us:us ok
trap 'record_close $?; rm -rf "$tmp"' EXIT

mem_kb() { awk '/MemAvailable/ {print $2}' /proc/meminfo; }

# run VARIANT N REP CMD...: times CMD, reads its "# created in" line and the 8-byte row.
run() {
  local variant=$1 n=$2 rep=$3
  shift 3
  local out=$tmp/$variant.$n.$rep t0 t1 rc=0
  t0=$(date +%s.%N)
  timeout "$timeout" "$@" >"$out" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  local wall created us wrong ok=0
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
  created=$(sed -n 's/^# created in \([0-9.]*\) s.*/\1/p' "$out" | head -n 1)
  us=$(awk '$1 == 8 && $2 == 2 {print $5; exit}' "$out")
  wrong=$(awk '$1 == 8 && $2 == 2 {print $8; exit}' "$out")
  [[ $rc -eq 0 && -n $us && ${wrong:-1} == 0 ]] && ok=1
  record_row "$variant" "$rep" "$n" "$wall" "${created:-}" "${us:-}" "$ok"
  printf '  %-6s n=%-5s rep=%s wall %7ss created %7ss allreduce %9sus ok=%s\n' "$variant" \
    "$n" "$rep" "$wall" "${created:--}" "${us:--}" "$ok"
  [[ $ok == 1 ]] || { echo "  (output: $out)"; tail -n 5 "$out" | sed 's/^/    /'; }
}

common=(allreduce --min-bytes 8 --max-bytes 8 --iters "$iters" --warmup 5 --check)
for rep in $(seq 1 "$repeat"); do
  for n in "${sizes[@]}"; do
    run bagua "$n" "$rep" "$bagua" "${common[@]}" --nranks "$n" --transport tcp --node-per-rank
    run ompi "$n" "$rep" mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$n" \
      --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo "$peer_mpi" \
      "${common[@]}" --nranks "$n"
    if ((n * 300 * 1024 < $(mem_kb))); then
      GLOO_SOCKET_IFNAME=lo run gloo "$n" "$rep" /usr/bin/python3 "$script_dir/peer_gloo.py" \
        "${common[@]}" --nranks "$n"
    else
      echo "  gloo   n=$n: skipped, $n processes of torch do not fit in memory"
    fi
  done
done

# The table: median [min-max] per variant and size, from the record.
echo
echo "record: $RECORD_DIR"
/usr/bin/python3 - "$RECORD_DIR/raw.csv" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def cell(vals):
    v = sorted(float(x) for x in vals if x not in ("", None))
    if not v:
        return "-"
    if len(v) < 3:
        return " ".join(f"{x:g}" for x in v) + f" ({len(v)} run(s))"
    return f"{statistics.median(v):g} [{v[0]:g}-{v[-1]:g}]"
sizes = sorted({int(r["nranks"]) for r in rows})
print(f"{'variant':8} {'ranks':>6} {'wall (s)':>24} {'created (s)':>24} {'8 B allreduce (us)':>28} ok")
for n in sizes:
    for var in ("bagua", "ompi", "gloo"):
        rs = [r for r in rows if r["variant"] == var and int(r["nranks"]) == n]
        if not rs:
            continue
        print(f"{var:8} {n:>6} {cell(r['wall_s'] for r in rs):>24} "
              f"{cell(r['created_s'] for r in rs):>24} {cell(r['us'] for r in rs):>28} "
              f"{sum(int(r['ok']) for r in rs)}/{len(rs)}")
EOF
