#!/usr/bin/env bash
# The algorithm trade-off of bench/tradeoff.sh on a lent machine with many cores (16 or more),
# inside a hard time budget: build, emulate 4 hosts of 4 cores each, run the torch CNN under
# torch DDP and every Bagua algorithm, interleaved, at 100 Mbit/s and 1 Gbit/s, and write the
# raw rows and a summary. Written for a machine that is lent for a few minutes, without
# network, where it cannot be watched: the script keeps to its budget by itself.
#
#   1. Build (Release, -DBAGUA_WITH_CUDA=OFF: the trade-off runs on the CPUs) only what the
#      runs need (bagua-launch, bagua-agent, the torch front end bagua._C) into --build, with
#      as many jobs as there are CPUs.
#   2. Check that network namespaces and tc work (bench/netsim/netsim.sh brings up a 2-host
#      cluster and takes it down). If they do not (a gVisor or Firecracker sandbox, no
#      iproute2, no root), it says so and falls back to one host: the 4 ranks on this machine
#      over loopback, each pinned to its 4 cores, rows labelled rate "local". Those rows
#      measure compute and the CPU cost of each algorithm, not a link.
#   3. With namespaces: one emulated cluster per rate (netsim.sh up; tbf-shaped links), each
#      host's processes pinned to 4 cores of its own (taskset through the launcher's
#      --remote-cmd) when the machine has 16 CPUs or more (else unpinned, said in the
#      summary). The workload is examples/torch/train.py --model cnn, --steps steps of batch 64
#      per rank (the steady-state step time leaves out the first 2), test on 500 images.
#      Every repeat runs each rate once and, in it, each variant once (interleaved).
#   4. The budget (--budget, default 360 s) covers everything from the script's start: each
#      run gets a timeout of at most --run-timeout and never more than what is left less a
#      reserve for the summary; a run that would not fit (the longest run so far, or 30 s
#      before the first) is skipped and named in the summary with the reason. A watchdog stops
#      the script at the budget whatever it is doing; the summary is then still written.
#
# Output: in $OUT when it is set (the lent machine's folder that comes back), else in the
# record directory bench/record.py picks (docs/results/raw/<UTC date>-device-tradeoff-<commit>).
#   meta.txt, raw.csv   the record of bench/record.py (command, commit, CPU, load averages)
#   tradeoff.csv        tradeoff.sh's columns, which bench/tradeoff_table.py reads
#   summary.md          the mode, the pinning, the python, what was skipped, and the table
#   logs/               every job's output; build.log
#
# The python is $PYTHON, else the first of /opt/torch/.venv/bin/python3, python3 on PATH and
# /usr/bin/python3 that imports torch; bagua._C is built for it.
#
# usage: bench/device-tradeoff.sh [--budget 360] [--build build-device] [--rates "100mbit 1gbit"]
#          [--variants "ddp gradient_allreduce bytegrad decentralized low_precision_decentralized async"]
#          [--repeat 3] [--steps 30] [--run-timeout 60] [--threads 4] [--no-build] [--dry-run]
#          [--force-local]
# --dry-run does the checks (python, namespaces) and prints the plan without building or
# running; --force-local takes the one-host fallback even where namespaces work.
# Exit status: 0 when every planned run ran or was skipped for time, 1 when a run failed, 2 on
# a bad argument, 3 when the build failed or torch is missing.
set -uo pipefail
t_start=$(date +%s)
# The script's own stderr, for the summary: a trap that fires while a run is waited for runs
# with that run's redirections in force.
exec 3>&2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/record.sh"
record_argv "$0" "$@"
cd "$here/.." || exit 2
root=$PWD

budget=360 build=build-device rates="100mbit 1gbit" repeat=3 steps=30 run_timeout=60 threads=4
variants="ddp gradient_allreduce bytegrad decentralized low_precision_decentralized async"
do_build=1 dry=0 force_local=0
while [ $# -gt 0 ]; do
  case $1 in
    --budget) budget=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --run-timeout) run_timeout=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --dry-run) dry=1; shift ;;
    --force-local) force_local=1; shift ;;
    *) echo "device-tradeoff: unknown argument \"$1\"; see the header of $0" >&2; exit 2 ;;
  esac
done
for n in "budget=$budget" "repeat=$repeat" "steps=$steps" "run-timeout=$run_timeout" \
  "threads=$threads"; do
  [[ ${n#*=} =~ ^[1-9][0-9]*$ ]] ||
    { echo "device-tradeoff: --${n%%=*} \"${n#*=}\" is not a positive integer" >&2; exit 2; }
done
t_end=$((t_start + budget))
# Kept back from every run's timeout for the summary and the clusters' removal.
reserve=15
left() { echo $((t_end - $(date +%s))); }
log() { echo "device-tradeoff: [$(($(date +%s) - t_start)) s] $*" >&2; }

# ---- the python: $PYTHON, else the first that imports torch -------------------------------
if [ -z "${PYTHON:-}" ]; then
  for p in /opt/torch/.venv/bin/python3 "$(command -v python3 2>/dev/null)" /usr/bin/python3; do
    [ -n "$p" ] && [ -x "$p" ] && "$p" -c 'import torch' 2>/dev/null && { PYTHON=$p; break; }
  done
fi
if [ -z "${PYTHON:-}" ] || ! "$PYTHON" -c 'import torch' 2>/dev/null; then
  echo "device-tradeoff: no python3 that imports torch (tried \$PYTHON," \
    "/opt/torch/.venv/bin/python3, python3 on PATH, /usr/bin/python3); set PYTHON" >&2
  exit 3
fi
torch_version=$("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null)

# ---- where the output goes -----------------------------------------------------------------
# record.py runs under the same python (any python3 does), so that a machine without Debian's
# interpreter still keeps the record.
# shellcheck disable=SC2034 # read by record.sh's functions
RECORD_PYTHON=$PYTHON RECORD_TORCH_PYTHON=$PYTHON
if [ -n "${OUT:-}" ]; then
  outdir=$OUT
elif [ "$dry" = 1 ]; then
  outdir=$(mktemp -d) # a dry run leaves no record behind
else
  outdir=$("$PYTHON" "$RECORD_PY" default-dir device-tradeoff) || exit 2
fi
if ! mkdir -p "$outdir/logs" || ! outdir=$(cd "$outdir" && pwd); then
  echo "device-tradeoff: cannot create $outdir" >&2
  exit 2
fi
export BENCH_RECORD_DIR=$outdir
csv=$outdir/tradeoff.csv summary=$outdir/summary.md skipped=$outdir/skipped.txt
: >"$skipped"

# ---- the checks: cores, namespaces ---------------------------------------------------------
ncpu=$(nproc)
pin=0
[ "$ncpu" -ge 16 ] && command -v taskset >/dev/null && pin=1
mode=netns why_local=
if [ "$force_local" = 1 ]; then
  mode=local why_local="--force-local"
elif [ "$(id -u)" != 0 ]; then
  mode=local why_local="not root: network namespaces need root"
elif ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  mode=local why_local="ip or tc (iproute2) is missing"
elif ! ip netns add "dtcheck$$" 2>/dev/null; then
  mode=local why_local="\`ip netns add\` fails here: network namespaces are not allowed (a sandbox such as gVisor or Firecracker)"
else
  ip netns del "dtcheck$$" 2>/dev/null
  # The whole emulation: a bridge, veth pairs, tbf. A kernel may allow namespaces but not one
  # of these.
  if ! timeout 30 bench/netsim/netsim.sh run --hosts 2 --rate 1gbit --name dtchk -- \
    true >"$outdir/logs/netsim-check.log" 2>&1; then
    mode=local why_local="netsim.sh cannot build its links here (logs/netsim-check.log)"
  fi
fi
if [ "$force_local" = 1 ]; then
  log "one host, as asked (--force-local): 4 ranks over loopback, rate \"local\"."
  run_rates=local
elif [ "$mode" = local ]; then
  log "NETWORK NAMESPACES ARE NOT USABLE: $why_local."
  log "Falling back to one host: 4 ranks over loopback, rate \"local\" (no link emulation)."
  run_rates=local
else
  run_rates=$rates
fi

# The runs in order: every repeat runs each rate, and in it each variant, once.
plan=()
for ((r = 0; r < repeat; r++)); do
  for rate in $run_rates; do
    for v in $variants; do plan+=("$r $rate $v"); done
  done
done
log "python $PYTHON (torch $torch_version), $ncpu CPUs, pinning $([ $pin = 1 ] && echo "4 cores per host" || echo off)," \
  "mode $mode, ${#plan[@]} runs planned, budget ${budget} s"
if [ "$dry" = 1 ]; then
  for p in "${plan[@]}"; do echo "plan: rep ${p%% *} ${p#* }"; done
  {
    echo "# device-tradeoff: dry run"
    echo
    echo "python $PYTHON (torch $torch_version); $ncpu CPUs; mode $mode${why_local:+ ($why_local)}; ${#plan[@]} runs planned; nothing built or run."
  } >"$summary"
  exit 0
fi

record_open device-tradeoff torch rate workload samples_per_s:samples/s bytes_per_step:bytes \
  test_acc:fraction wall_s:s steady_samples_per_s:samples/s
echo "rate,workload,variant,repeat,samples_per_s,bytes_per_step,test_acc,wall_s,steady_samples_per_s" >"$csv"

# ---- clean-up and the summary, whatever ends the script ------------------------------------
clusters=()
wd_pid='' child=''
failed=0
# Runs a command in the background and waits for it, so that the watchdog's TERM is handled
# at once (bash runs a trap only after a foreground command ends) and reaches the command.
runbg() {
  "$@" 3>&- &
  child=$!
  wait "$child"
  local rc=$?
  child=
  return $rc
}
finish() {
  local rc=$1
  trap - EXIT INT TERM USR1
  exec 2>&3
  [ -n "$wd_pid" ] && kill "$wd_pid" 2>/dev/null
  # timeout(1) passes the TERM on to its command and exits once it has.
  if [ -n "$child" ]; then
    kill -TERM "$child" 2>/dev/null
    wait "$child" 2>/dev/null
  fi
  local c
  for c in "${clusters[@]}"; do bench/netsim/netsim.sh down --name "$c" >/dev/null 2>&1; done
  {
    echo "# device-tradeoff: bagua algorithms against torch DDP"
    echo
    echo "- command: \`$0 ${RECORD_ARGV[*]:1}\`"
    echo "- python: $PYTHON (torch $torch_version); $ncpu CPUs ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'))"
    echo "- mode: $mode${why_local:+ ($why_local)}; pinning: $([ "$pin" = 1 ] && echo "4 cores per host (taskset)" || echo "off (fewer than 16 CPUs or no taskset)")"
    echo "- workload: examples/torch/train.py --model cnn, $steps steps of batch 64 per rank, 4 ranks, OMP_NUM_THREADS=$threads$([ -n "${synthetic:-}" ] && echo ", synthetic data ($synthetic images: no Fashion-MNIST here)")"
    echo "- budget ${budget} s, used $(($(date +%s) - t_start)) s; runs planned ${#plan[@]}, rows $(($(wc -l <"$csv") - 1)); exit status $rc"
    echo "- load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    if [ -s "$skipped" ]; then
      echo "Skipped or cut off:"
      echo
      sed 's/^/- /' "$skipped"
      echo
    fi
    if [ "$(wc -l <"$csv")" -gt 1 ]; then
      "$PYTHON" bench/tradeoff_table.py "$csv" 2>&1
    else
      echo "No run completed."
    fi
  } >"$summary"
  record_close "$rc" >/dev/null 2>&1
  cat "$summary" >&2
  log "output in $outdir"
  exit "$rc"
}
trap 'finish $?' EXIT
trap 'echo "budget of ${budget} s reached: stopped (the run in progress was cut off)" >>"$skipped"; exit 124' USR1
trap 'echo "stopped by SIGTERM" >>"$skipped"; exit 143' TERM
trap 'echo "stopped by SIGINT" >>"$skipped"; exit 130' INT
# The watchdog: whatever is running when the budget is spent gets stopped, and the summary
# is written (the EXIT trap). Its signal is USR1, so that the summary can tell it from a TERM
# sent from outside.
(
  sleep "$budget" &
  s=$!
  trap 'kill "$s" 2>/dev/null; exit 0' TERM
  wait "$s" && kill -USR1 $$ 2>/dev/null
) &
wd_pid=$!

# ---- 1. the build --------------------------------------------------------------------------
if [ "$do_build" = 1 ]; then
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  t=$(($(left) - reserve - 60))
  [ "$t" -gt 240 ] && t=240
  if [ "$t" -lt 20 ]; then
    echo "the build: no time left for it (budget ${budget} s)" >>"$skipped"
    exit 3
  fi
  log "building into $build (timeout ${t} s)"
  # -DPython3_EXECUTABLE: bagua._C is built for the python that runs the jobs (CMake would
  # otherwise prefer Debian's interpreter).
  if ! runbg timeout "$t" bash -c '
      cmake -S . -B "$1" "${@:4}" -DCMAKE_BUILD_TYPE=Release -DBAGUA_WITH_CUDA=OFF \
        -DPython3_EXECUTABLE="$2" &&
      cmake --build "$1" -j "$3" --target bagua-launch bagua-agent &&
      { cmake --build "$1" -j "$3" --target bagua_py ||
        echo "device-tradeoff: bagua_py (bagua._C, the torch front end) did not build"; }' _ \
    "$build" "$PYTHON" "$ncpu" "${gen[@]}" >"$outdir/logs/build.log" 2>&1; then
    log "the build failed or timed out; its log: $outdir/logs/build.log"
    tail -20 "$outdir/logs/build.log" >&2
    echo "the build failed or ran out of time (logs/build.log): nothing ran" >>"$skipped"
    exit 3
  fi
fi
build=$(cd "$build" && pwd) || { echo "device-tradeoff: no build directory $build" >&2; exit 3; }
if ! PYTHONPATH=$build/python "$PYTHON" -c 'import bagua._C' 2>/dev/null; then
  echo "bagua._C does not import under $PYTHON from $build/python (Python headers missing?" \
    "see logs/build.log): nothing ran" >>"$skipped"
  exit 3
fi

# ---- 2. the clusters, the pinning ----------------------------------------------------------
wrap=$outdir/logs/wrap
mkdir -p "$wrap"
# Host i of a cluster (namespace NAME-hI) runs on cores 4(i-1) .. 4i-1.
cat >"$wrap/host.sh" <<EOF
#!/bin/sh
# --remote-cmd of bagua-launch: starts an agent inside host \$1's namespace$([ $pin = 1 ] && echo ", on its 4 cores").
h=\$1
shift
i=\${h##*-h}
if [ $pin = 1 ]; then
  exec ip netns exec "\$h" taskset -c \$((4 * (i - 1)))-\$((4 * i - 1)) "\$@"
fi
exec ip netns exec "\$h" "\$@"
EOF
# One host: rank LOCAL_RANK runs on cores 4 LOCAL_RANK .. 4 LOCAL_RANK + 3.
cat >"$wrap/rank.sh" <<EOF
#!/bin/sh
# The program's wrapper on one host: each rank on 4 cores of its own$([ $pin = 1 ] || echo " (pinning off here)").
r=\${LOCAL_RANK:-0}
if [ $pin = 1 ]; then
  exec taskset -c \$((4 * r))-\$((4 * r + 3)) "\$@"
fi
exec "\$@"
EOF
chmod +x "$wrap/host.sh" "$wrap/rank.sh"

declare -A cname
if [ "$mode" = netns ]; then
  i=0
  for rate in $run_rates; do
    i=$((i + 1))
    c=dt$i
    if ! bench/netsim/netsim.sh up --hosts 4 --rate "$rate" --name "$c" >"$outdir/logs/netsim-$c.log" 2>&1; then
      log "cannot bring up the $rate cluster (logs/netsim-$c.log)"
      echo "all runs at $rate: the emulated cluster did not come up (logs/netsim-$c.log)" >>"$skipped"
      bench/netsim/netsim.sh down --name "$c" >/dev/null 2>&1
      continue
    fi
    clusters+=("$c")
    cname[$rate]=$c
  done
fi

# ---- 3. the runs ---------------------------------------------------------------------------
data_args=()
synthetic=
if [ ! -d /usr/share/datasets/fashion-mnist ]; then
  synthetic=20000
  data_args=(--synthetic "$synthetic")
fi
export PYTHONPATH=$build/python OMP_NUM_THREADS=$threads
# What a run is expected to take at most: 30 s before the first has run, then the longest so
# far and 5 s.
longest=30 ran=0
out=$outdir/logs/current.log
first() { grep -E '\[[^]/]+/0\]' "$out" | grep -oE "$1" | head -1 | grep -oE '[0-9.]+' | head -1; }
seq=0
for p in "${plan[@]}"; do
  read -r rep rate variant <<<"$p"
  seq=$((seq + 1))
  if [ "$mode" = netns ] && [ -z "${cname[$rate]:-}" ]; then continue; fi
  avail=$(($(left) - reserve))
  if [ "$avail" -lt "$longest" ]; then
    echo "rep $rep $rate $variant: not run, ${avail} s left and runs take up to ${longest} s" >>"$skipped"
    continue
  fi
  t=$run_timeout
  [ "$t" -gt "$avail" ] && t=$avail
  args=(--model cnn --epochs 1 --max-steps "$steps" --test-limit 500 --batch-size 64 "${data_args[@]}")
  if [ "$variant" = ddp ]; then args+=(--ddp); else args+=(--algorithm "$variant"); fi
  job_id="dt-$$-$seq"
  t0=$(date +%s.%N)
  if [ "$mode" = netns ]; then
    c=${cname[$rate]}
    hostspec="$c-h1:1,$c-h2:1,$c-h3:1,$c-h4:1"
    GLOO_SOCKET_IFNAME=eth0 runbg timeout -k 5 "$t" "$wrap/host.sh" "$c-h1" \
      "$build/launcher/bagua-launch" --hosts "$hostspec" --remote-cmd "$wrap/host.sh {host}" \
      --rdzv-host 198.18.0.1 --max-restarts 0 --job-id "$job_id" -- \
      "$PYTHON" "$root/examples/torch/train.py" "${args[@]}" >"$out" 2>&1
  else
    GLOO_SOCKET_IFNAME=lo runbg timeout -k 5 "$t" "$build/launcher/bagua-launch" --hosts localhost:4 \
      --max-restarts 0 --job-id "$job_id" -- \
      "$wrap/rank.sh" "$PYTHON" "$root/examples/torch/train.py" "${args[@]}" >"$out" 2>&1
  fi
  rc=$?
  wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  w=${wall%.*}
  if [ "$ran" = 0 ] || [ "$((w + 5))" -gt "$longest" ]; then longest=$((w + 5)); fi
  ran=1
  cp "$out" "$outdir/logs/$rate-$variant-$rep.log"
  sps=$(first '[0-9]+ samples/s, fwd') bytes=$(first '[0-9]+ bytes/step')
  acc=$(first 'test_acc=[0-9.]+') steady=$(first 'steady [0-9.]+')
  steady=$(awk -v t="$steady" 'BEGIN {if (t > 0) printf "%.1f", 64 * 4 * 1000 / t; else print "n/a"}')
  if [ $rc -ne 0 ] || [ -z "$sps" ] || [ -z "$acc" ]; then
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      echo "rep $rep $rate $variant: cut off by its timeout of ${t} s" >>"$skipped"
    else
      failed=1
      echo "rep $rep $rate $variant: failed (exit $rc; logs/$rate-$variant-$rep.log)" >>"$skipped"
    fi
    log "$rate $variant rep $rep: failed or cut off (exit $rc)"
    sps=fail acc=fail
    # What a killed job left inside the cluster would hold its ports for the next run.
    if [ "$mode" = netns ]; then
      for h in 1 2 3 4; do ip netns pids "${cname[$rate]}-h$h" 2>/dev/null; done | xargs -r kill -KILL 2>/dev/null
    fi
  else
    log "$rate $variant rep $rep: steady $steady samples/s (${wall} s)"
  fi
  [ "$variant" = ddp ] && bytes=n/a
  echo "$rate,torch-cnn,$variant,$rep,$sps,${bytes:-n/a},$acc,$wall,$steady" >>"$csv"
  record_row "$variant" "$rep" "$rate" torch-cnn "$sps" "${bytes:-n/a}" "$acc" "$wall" "$steady"
done
exit "$failed"
