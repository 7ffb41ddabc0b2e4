#!/usr/bin/env bash
# peers.sh - compare bagua-bench with Open MPI and Gloo, measured in one run.
#
# For each rank count it runs bagua-bench (one run per --transports entry),
# Open MPI (vader shared memory and TCP over loopback, via bench/peer_mpi.c)
# and Gloo (torch.distributed, via bench/peer_gloo.py) over the same doubling
# sizes with the same warmup/iters methodology, repeats everything --repeat
# times *interleaved* (ours, mpi, gloo, ours, ...) so that noise from other
# tenants hits every implementation alike, and prints "median [min-max]" per
# (implementation, size) as a table ready for a results file under docs/results/
# (with fewer than 3 repeats a cell lists the runs instead of a median).
#
# Every run is also kept, one row per size with the load average at its end,
# in the record that bench/record.py describes (--record-dir DIR, or
# BENCH_RECORD_DIR, names its directory).
#
# Every implementation checks its results; a nonzero `wrong` count is marked
# with '!' in the table and makes the script exit 3.
#
# See bench/README-peers.md for the column definitions.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$script_dir/.." && pwd)
. "$script_dir/record.sh"
record_argv "$0" "$@"

usage() {
    cat <<EOF
usage: bench/peers.sh [options]
  --bagua PATH          bagua-bench binary (default: build/bench/bagua-bench;
                        'none' runs only the peers)
  --collective NAME     allreduce reduce_scatter allgather alltoall broadcast
                        reduce barrier (default: allreduce)
  --nranks "2 4"        rank counts (default: "2 4")
  --min-bytes 16M       smallest size (default: 16M)
  --max-bytes 256M      largest size (default: 256M)
  --iters 10            timed iterations per size (default: 10)
  --warmup 3            untimed iterations per size (default: 3)
  --repeat 3            interleaved repetitions; "median [min-max]" is reported
                        (default: 3)
  --transports "shm tcp"  bagua-bench transports (default: "shm tcp")
  --peers "ompi_shm ompi_tcp gloo"  peers to run (default: all three; 'none'
                        runs only bagua-bench)
  --metric busbw|algbw|time  value in the table (default: busbw; time for barrier)
  --markdown            print a Markdown table and a fenced command block
  --raw-dir DIR         keep every raw output in DIR (default: a temp dir, removed)
  --record-dir DIR      the record of this run (default: \$BENCH_RECORD_DIR, else
                        docs/results/raw/<date>-peers-<commit>/; see bench/record.py)
  --timeout SEC         kill a single run after SEC seconds (default: 900)
  --python PATH         python3 with torch (default: first of \$PYTHON, python3,
                        /usr/bin/python3 that can import torch)
  -h, --help            this help
Environment: BUILD_DIR (peer_mpi is built in \$BUILD_DIR/bench-peers if set).
EOF
}

die() {
    echo "peers.sh: error: $*" >&2
    exit 2
}

# ---------------------------------------------------------------- options ---
bagua="$repo_root/build/bench/bagua-bench"
collective=allreduce
nranks_list="2 4"
min_bytes=16M
max_bytes=256M
iters=10
warmup=3
repeat=3
transports="shm tcp"
peers="ompi_shm ompi_tcp gloo"
metric=""
markdown=0
raw_dir=""
run_timeout=900
python=""

need_val() { [[ $# -ge 2 && -n "$2" ]] || die "option $1 needs a value"; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --bagua) need_val "$@"; bagua=$2; shift 2 ;;
        --collective) need_val "$@"; collective=$2; shift 2 ;;
        --nranks) need_val "$@"; nranks_list=$2; shift 2 ;;
        --min-bytes) need_val "$@"; min_bytes=$2; shift 2 ;;
        --max-bytes) need_val "$@"; max_bytes=$2; shift 2 ;;
        --iters) need_val "$@"; iters=$2; shift 2 ;;
        --warmup) need_val "$@"; warmup=$2; shift 2 ;;
        --repeat) need_val "$@"; repeat=$2; shift 2 ;;
        --transports) need_val "$@"; transports=$2; shift 2 ;;
        --peers) need_val "$@"; peers=$2; shift 2 ;;
        --metric) need_val "$@"; metric=$2; shift 2 ;;
        --markdown) markdown=1; shift ;;
        --raw-dir) need_val "$@"; raw_dir=$2; shift 2 ;;
        --record-dir) need_val "$@"; export BENCH_RECORD_DIR=$2; shift 2 ;;
        --timeout) need_val "$@"; run_timeout=$2; shift 2 ;;
        --python) need_val "$@"; python=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown option '$1'" ;;
    esac
done

case "$collective" in
    allreduce|reduce_scatter|allgather|alltoall|broadcast|reduce|barrier) ;;
    *) die "unknown collective '$collective'" ;;
esac
for v in iters warmup repeat run_timeout; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "--${v//_/-} must be a non-negative integer"
done
[[ $iters -ge 1 && $repeat -ge 1 ]] || die "--iters and --repeat must be >= 1"
for n in $nranks_list; do
    [[ $n =~ ^[0-9]+$ && $n -ge 1 ]] || die "bad rank count '$n' in --nranks"
done
[[ $peers == none ]] && peers=""
for p in $peers; do
    case "$p" in ompi_shm|ompi_tcp|gloo) ;; *) die "unknown peer '$p'" ;; esac
done
if [[ -z "$metric" ]]; then
    # Barrier moves no data, so only its latency means anything.
    if [[ $collective == barrier ]]; then metric="time"; else metric="busbw"; fi
fi
case "$metric" in
    busbw) metric_col=7; metric_unit=GB/s ;;   # column numbers in the row format
    algbw) metric_col=6; metric_unit=GB/s ;;
    time) metric_col=5; metric_unit=us ;;
    *) die "--metric must be busbw, algbw or time" ;;
esac

# Sizes: same parser semantics as bagua-bench (binary K/M/G).
to_bytes() {
    local s=${1%[Bb]} mult=1
    case "$s" in
        *[kK]) mult=1024; s=${s%?} ;;
        *[mM]) mult=$((1024 * 1024)); s=${s%?} ;;
        *[gG]) mult=$((1024 * 1024 * 1024)); s=${s%?} ;;
    esac
    [[ $s =~ ^[0-9]+$ ]] || die "bad size '$1'"
    echo $((s * mult))
}
min_b=$(to_bytes "$min_bytes")
max_b=$(to_bytes "$max_bytes")
[[ $min_b -ge 1 && $max_b -ge $min_b ]] || die "need 1 <= --min-bytes <= --max-bytes"

# ---------------------------------------------------- dependency checks ---
# Fail before any run, naming the Debian package, so a half-filled table
# never gets pasted into the docs.
has_peer() { [[ " $peers " == *" $1 "* ]]; }
has_ompi=0
{ has_peer ompi_shm || has_peer ompi_tcp; } && has_ompi=1

for tool in awk sort timeout; do
    command -v "$tool" >/dev/null || die "'$tool' not found (Debian: coreutils/mawk)"
done
if [[ $has_ompi == 1 ]]; then
    command -v mpicc >/dev/null ||
        die "Open MPI compiler 'mpicc' not found: apt-get install libopenmpi-dev"
    command -v mpirun >/dev/null ||
        die "Open MPI launcher 'mpirun' not found: apt-get install openmpi-bin"
fi
if has_peer gloo; then
    torch_ok() { "$1" -c 'import torch.distributed as d; assert d.is_gloo_available()' \
        >/dev/null 2>&1; }
    if [[ -n "$python" ]]; then
        torch_ok "$python" ||
            die "'$python' cannot import torch with Gloo: apt-get install python3-torch"
    else
        # pyenv and venvs often shadow the Debian interpreter that has torch.
        for cand in "${PYTHON:-}" python3 /usr/bin/python3; do
            if [[ -z "$cand" ]] || ! command -v "$cand" >/dev/null; then continue; fi
            if torch_ok "$cand"; then python=$(command -v "$cand"); break; fi
        done
        [[ -n "$python" ]] ||
            die "no python3 with torch (Gloo) found: apt-get install python3-torch (or pass --python)"
    fi
fi
if [[ $bagua != none ]]; then
    [[ -x $bagua ]] ||
        die "bagua-bench not found or not executable at '$bagua' (build it: cmake --build build, or pass --bagua PATH, or --bagua none)"
fi
[[ $bagua == none && -z "$peers" ]] && die "nothing to run"

# ---------------------------------------------------------------- record ---
record_peers=""
has_peer gloo && record_peers+=" torch"
[[ $has_ompi == 1 ]] && record_peers+=" ompi"
export RECORD_TORCH_PYTHON=${python:-/usr/bin/python3}
record_open peers "$record_peers" nranks bytes:B "$metric:$metric_unit" wrong:elements

# --------------------------------------------------------------- workdir ---
work=$(mktemp -d "${TMPDIR:-/tmp}/bagua-peers.XXXXXX")
cleanup() { local rc=$?; rm -rf "$work"; record_close $rc; }
trap cleanup EXIT
if [[ -n "$raw_dir" ]]; then
    mkdir -p "$raw_dir"
    raw_dir=$(cd "$raw_dir" && pwd)
else
    raw_dir="$work/raw"
    mkdir -p "$raw_dir"
fi
records="$work/records"   # impl nranks bytes value wrong
: >"$records"
cmds="$work/commands"     # every distinct command line, in run order
: >"$cmds"

if [[ $has_ompi == 1 ]]; then
    bdir="${BUILD_DIR:+$BUILD_DIR/bench-peers}"
    bdir="${bdir:-$work/build}"
    mkdir -p "$bdir"
    peer_mpi="$bdir/peer_mpi"
    mpicc_cmd=(mpicc -std=c11 -O2 -Wall -Wextra -o "$peer_mpi" "$script_dir/peer_mpi.c")
    mpicc_line="${mpicc_cmd[*]}"
    "${mpicc_cmd[@]}" || die "building peer_mpi.c with mpicc failed: $mpicc_line"
fi

# ---------------------------------------------------------------- runs ---
impls=()
if [[ $bagua != none ]]; then
    for t in $transports; do impls+=("bagua_$t"); done
fi
for p in ompi_shm ompi_tcp gloo; do has_peer "$p" && impls+=("$p"); done

# Gloo kills its own ranks a little before the outer timeout, so a hang is
# reported with Gloo's message rather than as a bare SIGTERM.
gloo_timeout=$((run_timeout > 60 ? run_timeout - 20 : run_timeout))

reduction=0
case "$collective" in allreduce|reduce_scatter|reduce) reduction=1 ;; esac

# Prints the command for one implementation, one word per line (so paths with
# spaces survive) — common size/iteration flags are identical for all.
command_for() {
    local impl=$1 n=$2
    local common=(--min-bytes "$min_bytes" --max-bytes "$max_bytes"
                  --iters "$iters" --warmup "$warmup" --check)
    # --bind-to none: neither bagua-bench nor Gloo pins, and pinning N>cores
    # ranks would be refused anyway. ob1 is forced because a UCX pml would
    # silently ignore the btl choice and the shm/tcp split would be a lie.
    local mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none
               -np "$n" --mca pml ob1)
    case "$impl" in
        bagua_*)
            local extra=(--dtype f32)
            [[ $reduction == 1 ]] && extra+=(--op sum)
            printf '%s\n' "$bagua" "$collective" --nranks "$n" \
                --transport "${impl#bagua_}" "${extra[@]}" "${common[@]}" ;;
        ompi_shm)
            printf '%s\n' "${mpi[@]}" --mca btl self,vader \
                "$peer_mpi" "$collective" --nranks "$n" "${common[@]}" ;;
        ompi_tcp)
            printf '%s\n' "${mpi[@]}" --mca btl self,tcp \
                --mca btl_tcp_if_include lo \
                "$peer_mpi" "$collective" --nranks "$n" "${common[@]}" ;;
        gloo)
            printf '%s\n' env GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 \
                "$python" "$script_dir/peer_gloo.py" "$collective" \
                --nranks "$n" "${common[@]}" --timeout "$gloo_timeout" ;;
    esac
}

run_one() {
    local impl=$1 n=$2 rep=$3
    local out="$raw_dir/$impl.n$n.r$rep.txt" err="$raw_dir/$impl.n$n.r$rep.err"
    local -a cmd
    mapfile -t cmd < <(command_for "$impl" "$n")
    local line="${cmd[*]}"
    grep -qxF -- "$line" "$cmds" || echo "$line" >>"$cmds"
    local rc=0
    timeout --kill-after=10 "$run_timeout" "${cmd[@]}" >"$out" 2>"$err" || rc=$?
    if [[ $rc != 0 ]]; then
        echo "peers.sh: error: $impl (nranks=$n, repeat $rep) failed with exit $rc" >&2
        [[ $rc == 124 ]] && echo "peers.sh: (killed after --timeout $run_timeout s)" >&2
        echo "peers.sh: command: $line" >&2
        echo "--- last lines of stderr ($err) ---" >&2
        tail -n 20 "$err" >&2 || true
        echo "--- last lines of stdout ($out) ---" >&2
        tail -n 5 "$out" >&2 || true
        # Keep the evidence if the caller asked for it; the temp dir goes.
        exit 1
    fi
    # Data rows: 8+ fields, numeric first field; '#' lines are comments.
    local bytes value wrong
    awk -v col="$metric_col" '!/^#/ && NF >= 8 && $1 ~ /^[0-9]+$/ { print $1, $col, $8 }' \
        "$out" | while read -r bytes value wrong; do
        echo "$impl $n $bytes $value $wrong" >>"$records"
        record_row "$impl" "$rep" "$n" "$bytes" "$value" "$wrong"
    done
}

total_runs=0
for n in $nranks_list; do total_runs=$((total_runs + repeat * ${#impls[@]})); done
k=0
for n in $nranks_list; do
    for ((rep = 1; rep <= repeat; rep++)); do
        for impl in "${impls[@]}"; do
            k=$((k + 1))
            echo "peers.sh: [$k/$total_runs] $impl nranks=$n repeat=$rep" >&2
            run_one "$impl" "$n" "$rep"
        done
    done
done

# ---------------------------------------------------------------- report ---
cpu_model=$(lscpu 2>/dev/null | awk -F: '/^Model name/ { sub(/^[ \t]+/, "", $2); print $2; exit }')
mem_gib=$(awk '/^MemTotal/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo 2>/dev/null || true)
ompi_ver=""
[[ $has_ompi == 1 ]] && ompi_ver=$(mpirun --allow-run-as-root --version 2>/dev/null | head -n 1 || true)
torch_ver=""
has_peer gloo && torch_ver=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
gloo_desc="Gloo not run"
[[ -n $torch_ver ]] && gloo_desc="torch $torch_ver (Gloo, $python)"
git_rev=$(git -C "$repo_root" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$repo_root" diff --quiet HEAD 2>/dev/null || git_rev="$git_rev+dirty"

metric_desc="busbw in GB/s (1e9 B/s)"
[[ $metric == algbw ]] && metric_desc="algbw in GB/s (1e9 B/s)"
[[ $metric == time ]] && metric_desc="time per iteration in us (lower is better)"

header_lines() {
    echo "collective: $collective   value: median [min-max] $metric_desc over $repeat interleaved repeats"
    record_runs_note "$repeat"
    echo "sizes: $min_bytes..$max_bytes doubling   iters: $iters   warmup: $warmup   f32 sum"
    echo "machine: ${cpu_model:-unknown CPU}, nproc $(nproc), ${mem_gib:-?} GiB RAM, Linux $(uname -r)"
    echo "peers: ${ompi_ver:-Open MPI not run}; ${gloo_desc}"
    echo "bagua: $bagua (git $git_rev)   date: $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "ratio_vs_best_peer = best bagua / best peer; ratio_tcp_vs_gloo = bagua_tcp / gloo"
    echo "(ratios > 1 mean bagua is better; '!' marks a run with wrong results; n/a = not run or unsupported)"
}

if [[ $markdown == 1 ]]; then
    header_lines | sed 's/^/> /; s/$/  /'
    echo
else
    header_lines | sed 's/^/# /'
fi

# Sizes as requested (nominal). Rows whose byte count was rounded down to a
# multiple of nranks (reduce_scatter/allgather/alltoall) map to the smallest
# nominal size that holds them, so all implementations share a row.
sizes=""
for ((s = min_b; s <= max_b; s *= 2)); do sizes+="$s "; done
[[ $collective == barrier ]] && sizes="0"   # barrier prints one 0-byte row

rc=0
awk -v impls="${impls[*]}" -v nranks="$nranks_list" -v sizes="$sizes" \
    -v md="$markdown" -v metric="$metric" -v statcmd="$RECORD_PYTHON $RECORD_PY stat" '
function median(key,    m, i, j, v, a) {
    m = cnt[key]
    for (i = 1; i <= m; i++) a[i] = vals[key, i]
    for (i = 2; i <= m; i++) {           # insertion sort: mawk has no asort
        v = a[i]; j = i - 1
        while (j >= 1 && a[j] > v) { a[j + 1] = a[j]; j-- }
        a[j + 1] = v
    }
    if (m % 2) return a[(m + 1) / 2]
    return (a[m / 2] + a[m / 2 + 1]) / 2
}
# "median [min-max]" of a cell, or its runs when there are fewer than 3: bench/record.py
# decides, so that every benchmark table follows the same rule.
function stat(key,    m, i, cmd, out) {
    cmd = statcmd " " (metric == "time" ? ".1f" : ".3f")
    m = cnt[key]
    for (i = 1; i <= m; i++) cmd = cmd " " vals[key, i]
    cmd | getline out
    close(cmd)
    return out
}
# "better" ratio: bigger is better for bandwidth, smaller for time.
function ratio(ours, peer) {
    if (ours == "" || peer == "" || ours + 0 <= 0 || peer + 0 <= 0) return "n/a"
    return sprintf("%.2f", metric == "time" ? peer / ours : ours / peer)
}
function better(a, b) {
    if (a == "") return b
    if (b == "") return a
    return (metric == "time") ? (a < b ? a : b) : (a > b ? a : b)
}
# Rows are kept until the end, so that the text table can size each column to its widest
# cell.
function row(f, nf,    i) {
    nrows++
    for (i = 1; i <= nf; i++) {
        T[nrows, i] = f[i]
        if (length(f[i]) > W[i]) W[i] = length(f[i])
    }
    ncols = nf
}
function print_rows(    r, i, s) {
    for (r = 1; r <= nrows; r++) {
        s = md ? "|" : ""
        for (i = 1; i <= ncols; i++) {
            if (md) s = s " " T[r, i] " |"
            else s = s sprintf(i <= 2 ? "%-" W[i] "s  " : "%" W[i] "s  ", T[r, i])
        }
        sub(/ +$/, "", s)
        print s
    }
}
BEGIN {
    nimpl = split(impls, I, " ")
    nsz = split(sizes, S, " ")
    nn = split(nranks, N, " ")
    nrows = 0
    for (i = 1; i <= 64; i++) W[i] = 9
}
{
    # records: impl nranks bytes value wrong
    b = $3 + 0; nom = b
    for (i = 1; i <= nsz; i++) if (S[i] + 0 >= b) { nom = S[i]; break }
    key = $1 SUBSEP $2 SUBSEP nom
    cnt[key]++
    vals[key, cnt[key]] = $4 + 0
    if ($5 + 0 > 0) bad[key] = 1
    seen[$2 SUBSEP nom] = 1
}
END {
    hasTcp = 0; hasGloo = 0
    for (i = 1; i <= nimpl; i++) {
        if (I[i] == "bagua_tcp") hasTcp = 1
        if (I[i] == "gloo") hasGloo = 1
    }
    nf = 0
    H[++nf] = "nranks"; H[++nf] = "bytes"
    for (i = 1; i <= nimpl; i++) H[++nf] = I[i]
    H[++nf] = "ratio_vs_best_peer"; H[++nf] = "ratio_tcp_vs_gloo"
    row(H, nf)
    if (md) {
        for (i = 1; i <= nf; i++) D[i] = "---:"
        row(D, nf)
    }
    anybad = 0
    for (a = 1; a <= nn; a++) for (z = 1; z <= nsz; z++) {
        n = N[a]; s = S[z]
        if (!((n SUBSEP s) in seen)) continue
        delete F; nf = 0
        F[++nf] = n; F[++nf] = s
        ours = ""; peer = ""; tcp = ""; gloo = ""
        for (i = 1; i <= nimpl; i++) {
            key = I[i] SUBSEP n SUBSEP s
            if (!(key in cnt)) { F[++nf] = "n/a"; continue }
            v = median(key)
            F[++nf] = stat(key) (key in bad ? "!" : "")
            if (key in bad) anybad = 1
            if (I[i] ~ /^bagua_/) ours = better(ours, v)
            else peer = better(peer, v)
            if (I[i] == "bagua_tcp") tcp = v
            if (I[i] == "gloo") gloo = v
        }
        F[++nf] = ratio(ours, peer)
        F[++nf] = (hasTcp && hasGloo) ? ratio(tcp, gloo) : "n/a"
        row(F, nf)
    }
    print_rows()
    exit anybad ? 3 : 0
}' "$records" || rc=$?

echo
if [[ $markdown == 1 ]]; then
    echo "Commands (each run $repeat times, interleaved in this order per rank count):"
    echo
    echo '```sh'
    cat "$cmds"
    echo '```'
    if [[ $has_ompi == 1 ]]; then
        printf '\npeer_mpi was built with: %s\n' "\`$mpicc_line\`"
    fi
else
    echo "# commands (each run $repeat times, interleaved in this order per rank count):"
    sed 's/^/#   /' "$cmds"
    if [[ $has_ompi == 1 ]]; then
        echo "# peer_mpi was built with: $mpicc_line"
    fi
fi
# Notes from the peers (e.g. Gloo's unsupported collectives) go to the report.
if grep -hq '^# .*not supported' "$raw_dir"/*.txt 2>/dev/null; then
    echo
    grep -h '^# .*not supported' "$raw_dir"/*.txt | sort -u |
        if [[ $markdown == 1 ]]; then sed 's/^# /> /'; else cat; fi
fi

if [[ $rc == 3 ]]; then
    echo "peers.sh: error: some runs reported wrong results (marked '!'); raw output in $raw_dir" >&2
    [[ $raw_dir == "$work/raw" ]] && echo "peers.sh: rerun with --raw-dir DIR to keep it" >&2
    exit 3
elif [[ $rc != 0 ]]; then
    die "report failed (awk exit $rc)"
fi
