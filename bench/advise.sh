#!/usr/bin/env bash
# The advisor's prediction error (docs/advisor.md): on the emulated 4-host cluster of
# bench/netsim/netsim.sh, at each link rate, the C example (examples/fashion_mnist, MLP
# 784-3072-3072-10, 11.9 M parameters, batch 64 per rank) runs once per algorithm under
# bagua-launch --advise. Every run's rank 0 prints the advisor's table after one warm-up step
# and --steps measured steps; the table of the gradient_allreduce run gives the predictions
# (what `algorithm = auto` would decide on), and each algorithm's own run gives its measured
# step time (the median of the same measured steps, slowest rank: the table's "running:
# measured" note).
#
# Prints CSV rows (rate,algorithm,predicted_s,measured_s,error_pct) to stdout and to --csv
# FILE, then per rate the predicted and the measured ranking and whether they agree.
# qadam is left out by default: the advisor predicts its compressed stage, which starts after
# a warm-up of 100 steps (20 % of training in the example), too long to reach here; with
# --algos "... qadam" it runs with BAGUA_WARMUP_STEPS=1, whose barely warmed-up variance makes
# the optimizer's own step slow (see docs/advisor.md). async keeps its 500 ms interval.
# Needs root (network namespaces). Every prediction and every measured step time is also kept,
# with the load average at the end of the run it came from, in the record that
# bench/record.py describes (--record-dir DIR, or BENCH_RECORD_DIR, names its directory; under
# sudo it is handed to the user who ran sudo). Each algorithm runs once per rate: the figures
# are single runs, not medians.
#
# usage: bench/advise.sh [--build build] [--rates "100mbit 1gbit"] [--steps 3] [--csv FILE]
#          [--algos "gradient_allreduce bytegrad ..."] [--delay MS] [--hidden 3072,3072]
#          [--record-dir DIR]
# --delay adds MS each way through netsim's delay switch (the rate column then reads
# "1gbit+5ms"); --hidden sets the MLP's hidden layers (a small model, e.g. 64, makes the
# steps latency-bound).
set -uo pipefail
. "$(dirname "$0")/record.sh"
record_argv "$0" "$@"
cd "$(dirname "$0")/.." || exit 2
build=build rates="100mbit 1gbit" steps=3 csv=/dev/null inner=0 delay=0 hidden=3072,3072
algos="gradient_allreduce bytegrad decentralized low_precision_decentralized async"
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --csv) csv=$2; shift 2 ;;
    --algos) algos=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --hidden) hidden=$2; shift 2 ;;
    --record-dir) export BENCH_RECORD_DIR=$2; shift 2 ;;
    --inner) inner=1; shift ;;
    *) echo "advise: unknown argument \"$1\"; see the header of $0" >&2; exit 2 ;;
  esac
done
[[ $steps =~ ^[1-9][0-9]*$ ]] || { echo "advise: --steps \"$steps\" is not a positive integer" >&2; exit 2; }
[[ $delay =~ ^[0-9]+$ ]] || { echo "advise: --delay \"$delay\" is not a whole number of ms" >&2; exit 2; }
[[ $hidden =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
  { echo "advise: --hidden \"$hidden\" is not a comma-separated list of layer widths" >&2; exit 2; }
build=$(cd "$build" && pwd) || { echo "advise: no build directory" >&2; exit 2; }

if [ "$inner" = 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "advise: needs root (network namespaces)" >&2; exit 77; }
  record_open advise "" rate kind step_s:s
  trap 'record_close $?' EXIT
  echo "rate,algorithm,predicted_s,measured_s,error_pct" | tee "$csv"
  for rate in $rates; do
    bench/netsim/netsim.sh run --hosts 4 --rate "$rate" --delay "$delay" --name adv -- \
      "$0" --inner --build "$build" --steps "$steps" --algos "$algos" --hidden "$hidden" |
      tee -a "$csv" || exit 1
  done
  exit 0
fi

# Inside the cluster: NETSIM_HOSTS names the 4 namespaces. Rows go into the outer run's record
# as each run ends: kind "measured" for the run's own step time, kind "predicted" for each
# algorithm's prediction in the gradient_allreduce run's table.
record_attach
label=$NETSIM_RATE
[ "${NETSIM_DELAY_MS:-0}" != 0 ] && label="$NETSIM_RATE+${NETSIM_DELAY_MS}ms"
IFS=, read -ra H <<<"$NETSIM_HOSTS"
hostspec=$(printf '%s:1,' "${H[@]}")
hostspec=${hostspec%,}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
limit=$(((steps + 2) * 64 * 4))

declare -A pred meas
for algo in $algos; do
  extra=()
  [ "$algo" = qadam ] && extra=(-x BAGUA_WARMUP_STEPS=1)
  ip netns exec "${H[0]}" timeout 900 "$build/launcher/bagua-launch" --hosts "$hostspec" \
    --remote-cmd "ip netns exec {host}" --rdzv-host 198.18.0.1 --max-restarts 0 \
    --job-id "adv-$$-$RANDOM" --advise -x "BAGUA_ADVISE_STEPS=$steps" "${extra[@]}" -- \
    "$build/examples/fashion_mnist" --hidden "$hidden" --epochs 1 --limit-train "$limit" \
    --limit-test 100 --algorithm "$algo" >"$out" 2>&1
  rc=$?
  # Rank 0's table rows: "advise: RANK NAME HIER PRED VS COMM EXPOSED MB NOTE".
  rows=$(grep -E '\[[^]/]+/0\].*advise: [1-6] ' "$out" | sed 's/.*advise: //')
  m=$(awk '/running: measured/ { for (i = 1; i <= NF; i++) if ($i == "measured") print $(i + 1) }' \
    <<<"$rows")
  if [ $rc -ne 0 ] || [ -z "$m" ]; then
    echo "advise: $algo at $NETSIM_RATE failed (rc $rc):" >&2
    tail -20 "$out" >&2
    record_row "$algo" 0 "$label" measured fail
    continue
  fi
  meas[$algo]=$m
  record_row "$algo" 0 "$label" measured "$m"
  # Every run's table goes to stderr: its header shows the compute measured under it.
  grep -E '\[[^]/]+/0\].*advise: ' "$out" | sed "s/^/  $algo: /" >&2
  if [ "$algo" = gradient_allreduce ]; then
    while read -r _ name _ p _; do
      pred[$name]=$p
      # The summary line above the table matches the row pattern too ("4 ranks on 4
      # nodes ..."); only the algorithms' rows are predictions.
      case $name in
        gradient_allreduce | bytegrad | decentralized | low_precision_decentralized | qadam | async)
          record_row "$name" 0 "$label" predicted "$p" ;;
      esac
    done <<<"$rows"
  fi
done

NETSIM_RATE=$label
for algo in $algos; do
  p=${pred[$algo]:-} m=${meas[$algo]:-}
  err=""
  [ -n "$p" ] && [ -n "$m" ] && err=$(awk -v p="$p" -v m="$m" 'BEGIN {printf "%.1f", 100 * (p - m) / m}')
  echo "$NETSIM_RATE,$algo,$p,$m,$err"
done

# The rankings: fastest first, by prediction and by measurement.
pr=$(for a in $algos; do echo "${pred[$a]:-inf} $a"; done | sort -g | awk '{printf "%s ", $2}')
mr=$(for a in $algos; do echo "${meas[$a]:-inf} $a"; done | sort -g | awk '{printf "%s ", $2}')
echo "advise: $NETSIM_RATE predicted ranking: $pr" >&2
echo "advise: $NETSIM_RATE measured ranking:  $mr" >&2
[ "$pr" = "$mr" ] && echo "advise: $NETSIM_RATE rankings agree" >&2 ||
  echo "advise: $NETSIM_RATE rankings differ" >&2
exit 0
