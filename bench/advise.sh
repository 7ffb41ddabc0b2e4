#!/usr/bin/env bash
# The advisor's prediction error (docs/advisor.md): on the emulated 4-host cluster of
# bench/netsim/netsim.sh, at each link rate, the C example (examples/fashion_mnist, MLP
# 784-3072-3072-10, 11.9 M parameters, batch 64 per rank) runs once per algorithm under
# bagua-launch --advise. In every run the advisor holds communication for one warm-up step and
# --steps probe steps, measures the compute time, predicts and prints its table (rank 0), then
# lets communication resume, skips one step and times --steps more: its "advise: check:" line
# compares the running algorithm's prediction with those steps (median, slowest rank).
#
# Per run it keeps: the check's predicted and measured step time (kinds "predicted" and
# "measured"), the compute figure of the table's header ("compute"), and, from the
# gradient_allreduce run's table, every algorithm's prediction ("predicted_ga": what
# `algorithm = auto` would decide on). --repeat N repeats the whole set N times, interleaved
# (every repeat runs each rate once and, inside it, each algorithm once), each repeat on a
# fresh emulated cluster.
#
# Prints CSV rows (rate,algorithm,rep,predicted_s,measured_s,error_pct,predicted_ga_s,
# error_ga_pct,compute_s) to stdout and to --csv FILE, per run the predicted and the measured
# ranking, and at the end a table per rate and algorithm: "median [min-max]" over the repeats
# (record.py's rules: fewer than 3 runs are listed, not summarised).
# qadam is left out by default: the advisor predicts its compressed stage, which starts after
# a warm-up of 100 steps (20 % of training in the example), too long to reach here; with
# --algos "... qadam" it runs with BAGUA_WARMUP_STEPS=1, whose barely warmed-up variance makes
# the optimizer's own step slow (see docs/advisor.md). async keeps its 500 ms interval.
# Needs root (network namespaces). Every figure is also kept, with the load average at the end
# of the run it came from, in the record that bench/record.py describes: meta.txt (command,
# commit, CPU model, load average at the start and the end) and raw.csv (--record-dir DIR, or
# BENCH_RECORD_DIR, names its directory; by default docs/results/raw/; under sudo it is handed
# to the user who ran sudo).
#
# usage: bench/advise.sh [--build build] [--rates "100mbit 1gbit"] [--steps 3] [--repeat 1]
#          [--csv FILE] [--algos "gradient_allreduce bytegrad ..."] [--delay MS]
#          [--hidden 3072,3072] [--record-dir DIR]
# --delay adds MS each way through netsim's delay switch (the rate column then reads
# "1gbit+5ms"); --hidden sets the MLP's hidden layers (a small model, e.g. 64, makes the
# steps latency-bound).
set -uo pipefail
. "$(dirname "$0")/record.sh"
record_argv "$0" "$@"
cd "$(dirname "$0")/.." || exit 2
build=build rates="100mbit 1gbit" steps=3 csv=/dev/null inner=0 delay=0 hidden=3072,3072
repeat=1 rep=0
algos="gradient_allreduce bytegrad decentralized low_precision_decentralized async"
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --rep) rep=$2; shift 2 ;;
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
[[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "advise: --repeat \"$repeat\" is not a positive integer" >&2; exit 2; }
[[ $delay =~ ^[0-9]+$ ]] || { echo "advise: --delay \"$delay\" is not a whole number of ms" >&2; exit 2; }
[[ $hidden =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
  { echo "advise: --hidden \"$hidden\" is not a comma-separated list of layer widths" >&2; exit 2; }
build=$(cd "$build" && pwd) || { echo "advise: no build directory" >&2; exit 2; }

if [ "$inner" = 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "advise: needs root (network namespaces)" >&2; exit 77; }
  record_open advise "" rate kind step_s:s
  all=$(mktemp)
  trap 'rm -f "$all"; record_close $?' EXIT
  echo "rate,algorithm,rep,predicted_s,measured_s,error_pct,predicted_ga_s,error_ga_pct,compute_s" |
    tee "$csv"
  for ((r = 0; r < repeat; r++)); do
    for rate in $rates; do
      bench/netsim/netsim.sh run --hosts 4 --rate "$rate" --delay "$delay" --name adv -- \
        "$0" --inner --build "$build" --steps "$steps" --algos "$algos" --hidden "$hidden" \
        --rep "$r" | tee -a "$csv" "$all" || exit 1
    done
  done
  # The summary: per rate and algorithm, "median [min-max]" over the repeats.
  echo
  [ "$repeat" -lt 3 ] && record_runs_note "$repeat"
  printf '%-12s %-28s %-28s %-28s %-24s %-24s %-24s\n' rate algorithm "predicted s/step" \
    "measured s/step" "error %" "error vs ga table %" "compute s"
  for rate in $(cut -d, -f1 "$all" | awk '!seen[$0]++'); do
    for algo in $algos; do
      col() { awk -F, -v r="$rate" -v a="$algo" -v c="$1" '$1 == r && $2 == a {print $c}' "$all"; }
      # shellcheck disable=SC2046 # one word per run
      printf '%-12s %-28s %-28s %-28s %-24s %-24s %-24s\n' "$rate" "$algo" \
        "$(record_stat .4f $(col 4))" "$(record_stat .4f $(col 5))" "$(record_stat +.1f $(col 6))" \
        "$(record_stat +.1f $(col 8))" "$(record_stat .4f $(col 9))"
    done
  done
  exit 0
fi

# Inside the cluster: NETSIM_HOSTS names the 4 namespaces. Rows go into the outer run's record
# as each run ends.
record_attach
label=$NETSIM_RATE
[ "${NETSIM_DELAY_MS:-0}" != 0 ] && label="$NETSIM_RATE+${NETSIM_DELAY_MS}ms"
IFS=, read -ra H <<<"$NETSIM_HOSTS"
hostspec=$(printf '%s:1,' "${H[@]}")
hostspec=${hostspec%,}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# A warm-up step, the probe's steps, one settling step and the check's steps, and one more
# step so that the last check step is not the run's last.
limit=$(((2 * steps + 3) * 64 * 4))
num() { [[ ${1:-} =~ ^[0-9.]+$ ]] && echo "$1" || echo fail; }

declare -A pred meas ga comp
for algo in $algos; do
  extra=()
  [ "$algo" = qadam ] && extra=(-x BAGUA_WARMUP_STEPS=1)
  ip netns exec "${H[0]}" timeout 900 "$build/launcher/bagua-launch" --hosts "$hostspec" \
    --remote-cmd "ip netns exec {host}" --rdzv-host 198.18.0.1 --max-restarts 0 \
    --job-id "adv-$$-$RANDOM" --advise -x "BAGUA_ADVISE_STEPS=$steps" "${extra[@]}" -- \
    "$build/examples/fashion_mnist" --hidden "$hidden" --epochs 1 --limit-train "$limit" \
    --limit-test 100 --algorithm "$algo" >"$out" 2>&1
  rc=$?
  # Rank 0's lines: the table ("advise: RANK NAME HIER PRED ..."), its header ("measured
  # compute X s/step") and the check ("advise: check: NAME predicted X s/step, measured Y").
  lines=$(grep -E '\[[^]/]+/0\].*advise: ' "$out" | sed 's/.*advise: //')
  chk=$(grep -E '^check: ' <<<"$lines")
  p=$(awk '{for (i = 1; i <= NF; i++) if ($i == "predicted") {print $(i + 1); exit}}' <<<"$chk")
  m=$(awk '{for (i = 1; i <= NF; i++) if ($i == "measured") {print $(i + 1); exit}}' <<<"$chk")
  c=$(grep -oE 'measured compute [0-9.]+' <<<"$lines" | grep -oE '[0-9.]+$')
  pred[$algo]=$(num "$p") meas[$algo]=$(num "$m") comp[$algo]=$(num "$c")
  record_row "$algo" "$rep" "$label" predicted "${pred[$algo]}"
  record_row "$algo" "$rep" "$label" measured "${meas[$algo]}"
  record_row "$algo" "$rep" "$label" compute "${comp[$algo]}"
  if [ $rc -ne 0 ] || [ "${meas[$algo]}" = fail ]; then
    echo "advise: $algo at $label failed (rc $rc):" >&2
    tail -20 "$out" >&2
    continue
  fi
  # Every run's table and check go to stderr.
  sed "s/^/  $algo: /" <<<"$lines" >&2
  if [ "$algo" = gradient_allreduce ]; then
    while read -r _ name _ pg _; do
      # The header lines match the row pattern too ("4 ranks on 4 nodes ..."); only the
      # algorithms' rows are predictions.
      case $name in
        gradient_allreduce | bytegrad | decentralized | low_precision_decentralized | qadam | async)
          ga[$name]=$pg
          record_row "$name" "$rep" "$label" predicted_ga "$pg" ;;
      esac
    done <<<"$(grep -E '^[1-6] ' <<<"$lines")"
  fi
done

err() { awk -v p="$1" -v m="$2" 'BEGIN {if (p + 0 > 0 && m + 0 > 0) printf "%.1f", 100 * (p - m) / m; else print "n/a"}'; }
for algo in $algos; do
  p=${pred[$algo]:-fail} m=${meas[$algo]:-fail} g=${ga[$algo]:-n/a}
  echo "$label,$algo,$rep,$p,$m,$(err "$p" "$m"),$g,$(err "$g" "$m"),${comp[$algo]:-fail}"
done

# The rankings: fastest first, by the gradient_allreduce run's predictions and by measurement.
pr=$(for a in $algos; do echo "${ga[$a]:-inf} $a"; done | sort -g | awk '{printf "%s ", $2}')
mr=$(for a in $algos; do m=${meas[$a]:-inf}; [ "$m" = fail ] && m=inf; echo "$m $a"; done |
  sort -g | awk '{printf "%s ", $2}')
echo "advise: $label rep $rep predicted ranking: $pr" >&2
echo "advise: $label rep $rep measured ranking:  $mr" >&2
[ "$pr" = "$mr" ] && echo "advise: $label rep $rep rankings agree" >&2 ||
  echo "advise: $label rep $rep rankings differ" >&2
exit 0
