#!/usr/bin/env bash
# Accuracy seed by seed: every variant trains the same workload once per seed, on one host
# (bagua-launch, 4 workers by default, no network shaping: the link rate changes how fast a
# variant runs, not what it learns, except for async, whose staleness depends on speed), and
# each variant's test accuracy is compared with the first variant's (the baseline, DDP by
# default) at the same seed. So a claim "within 1 point of DDP" rests on the differences of
# paired runs over several seeds (5 by default), not on one run each.
#
# Workload: torch-mlp, tradeoff.sh's communication-bound one (examples/torch/train.py --model
# wide --width 1024, 8 samples per rank, one epoch of the first 4096 training images, test on
# 2000), so its accuracies are the ones the throughput tables of tradeoff.sh stand beside.
# --seed S sets train.py's seed: the model's initialisation, the data order and the synthetic
# data (train.py --synthetic) or the shuffling of Fashion-MNIST.
#
# Variants as in tradeoff.sh (bench/variants.sh): ddp, ddp:hook=fp16,
# ddp:hook=powersgd+rank=R[+start=K], a Bagua algorithm, ALGORITHM:OPTION=VALUE[+...].
#
# Prints one CSV row per run (workload,variant,seed,test_acc,wall_s) to stdout and --csv FILE,
# keeps every run in the record bench/record.py describes (--record-dir DIR), and ends with a
# table: per variant the mean accuracy and the difference to the baseline in points, mean
# [min, max] over the seeds, and how many seeds it was within 1 point. The variants run
# interleaved (each seed runs every variant before the next seed starts).
#
# usage: bench/accuracy_seeds.sh [--build build] [--variants "ddp bytegrad ..."]
#          [--seeds "1 2 3 4 5"] [--nproc 4] [--lr LR] [--csv FILE] [--record-dir DIR]
#          [--log-dir DIR] [--print-variants]
set -uo pipefail
. "$(dirname "$0")/record.sh"
. "$(dirname "$0")/variants.sh"
record_argv "$0" "$@"
cd "$(dirname "$0")/.." || exit 2

build=build variants="ddp gradient_allreduce bytegrad" seeds="1 2 3 4 5" nproc=4 lr=
csv=/dev/null logdir= print_variants=0
usage() { sed -n '/^# usage:/,/^[^#]/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --nproc) nproc=$2; shift 2 ;;
    --lr) lr=$2; shift 2 ;;
    --csv) csv=$2; shift 2 ;;
    --record-dir) export BENCH_RECORD_DIR=$2; shift 2 ;;
    --log-dir) logdir=$2; shift 2 ;;
    --print-variants) print_variants=1; shift ;;
    -h | --help) usage ;;
    *) echo "accuracy_seeds: unknown argument \"$1\"" >&2; usage ;;
  esac
done
for s in $seeds; do
  [[ $s =~ ^[0-9]+$ ]] || { echo "accuracy_seeds: --seeds \"$seeds\": \"$s\" is not a seed; accepted: non-negative integers" >&2; exit 2; }
done
[ -n "$seeds" ] || { echo "accuracy_seeds: --seeds is empty; accepted: one or more integers" >&2; exit 2; }
[[ $nproc =~ ^[1-9][0-9]*$ ]] || { echo "accuracy_seeds: --nproc \"$nproc\"; accepted: an integer >= 1" >&2; exit 2; }
[ -n "$variants" ] || { echo "accuracy_seeds: --variants is empty" >&2; exit 2; }
build=$(cd "$build" 2>/dev/null && pwd) || { echo "accuracy_seeds: no build directory" >&2; exit 2; }
if [ -n "$logdir" ]; then
  mkdir -p "$logdir" && logdir=$(cd "$logdir" && pwd) ||
    { echo "accuracy_seeds: cannot create --log-dir \"$logdir\"" >&2; exit 2; }
fi
py=/usr/bin/python3

# Each variant's train.py arguments or variables, worked out (and checked) before any run.
declare -A venv_of ddp_args_of
for variant in $variants; do
  if variant_is_ddp "$variant"; then
    ddp_args_of[$variant]=$(ddp_variant_args "$variant" accuracy_seeds) || exit 2
  else
    venv_of[$variant]=$(variant_env "$build" "$variant" accuracy_seeds) || exit 2
  fi
done
if [ "$print_variants" = 1 ]; then
  for variant in $variants; do
    if variant_is_ddp "$variant"; then
      echo "$variant: train.py $(echo ${ddp_args_of[$variant]})"
    elif [ -n "${venv_of[$variant]}" ]; then
      echo "$variant: $(echo ${venv_of[$variant]}) train.py"
    else
      echo "$variant: train.py --algorithm $variant"
    fi
  done
  exit 0
fi

record_open accuracy_seeds torch workload seed test_acc:fraction wall_s:s
trap 'rm -f "$out"; record_close $?' EXIT
out=$(mktemp)
export PYTHONPATH=$build/python OMP_NUM_THREADS=1
echo "workload,variant,seed,test_acc,wall_s" | tee "$csv"
rows=()
for seed in $seeds; do
  for variant in $variants; do
    venv=()
    [ -n "${venv_of[$variant]:-}" ] && mapfile -t venv <<<"${venv_of[$variant]}"
    args=(--epochs 1 --test-limit 2000 --batch-size 8 --model wide --width 1024
          --train-limit 4096 --seed "$seed")
    [ -n "$lr" ] && args+=(--lr "$lr")
    if variant_is_ddp "$variant"; then
      mapfile -t -O ${#args[@]} args <<<"${ddp_args_of[$variant]}"
    elif [ ${#venv[@]} = 0 ]; then
      args+=(--algorithm "$variant")
    fi
    t0=$(date +%s.%N)
    env "${venv[@]}" timeout 900 "$build/launcher/bagua-launch" --nproc-per-node "$nproc" \
      --max-restarts 0 -- "$py" "$PWD/examples/torch/train.py" "${args[@]}" >"$out" 2>&1
    rc=$?
    wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
    acc=$(grep -E '\[[^]/]+/0\]' "$out" | grep -oE 'test_acc=[0-9.]+' | head -1 | cut -d= -f2)
    if [ $rc != 0 ] || [ -z "$acc" ]; then
      echo "accuracy_seeds: $variant at seed $seed failed (rc $rc):" >&2
      tail -20 "$out" >&2
      acc=fail
    fi
    [ -n "$logdir" ] && cp "$out" "$logdir/torch-mlp-$variant-seed$seed.log"
    echo "torch-mlp,$variant,$seed,$acc,$wall" | tee -a "$csv"
    record_row "$variant" "$seed" torch-mlp "$seed" "$acc" "$wall"
    rows+=("$variant,$seed,$acc")
  done
done

# The table: each variant against the first at the same seed.
printf '%s\n' "${rows[@]}" | "$py" -c '
import sys
rows = [l.strip().split(",") for l in sys.stdin if l.strip()]
order = []
acc = {}
for v, s, a in rows:
    if v not in order:
        order.append(v)
    acc[(v, s)] = None if a == "fail" else float(a)
base = order[0]
seeds = sorted({s for _, s, _ in rows}, key=int)
print()
vs = "vs " + base + " (points), mean [min, max]"
print("%-40s %9s %44s %12s" % ("variant", "mean acc", vs, "within 1 pt"))
for v in order:
    mine = [acc[(v, s)] for s in seeds if acc.get((v, s)) is not None]
    mean = sum(mine) / len(mine) if mine else float("nan")
    d = [100 * (acc[(v, s)] - acc[(base, s)]) for s in seeds
         if acc.get((v, s)) is not None and acc.get((base, s)) is not None]
    if v == base or not d:
        cell = "=" if v == base else "n/a"
        near = ""
    else:
        cell = f"{sum(d) / len(d):+.1f} [{min(d):+.1f}, {max(d):+.1f}]"
        near = f"{sum(1 for x in d if abs(x) <= 1.0)}/{len(d)}"
    fails = len(seeds) - len(mine)
    print(f"{v:<40} {mean:>9.4f} {cell:>44} {near:>12}" + (f"  ({fails} failed)" if fails else ""))
'
