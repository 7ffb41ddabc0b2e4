#!/usr/bin/env bash
# The algorithm trade-off under network conditions: on an emulated cluster of 4 hosts
# (bench/netsim/netsim.sh, tbf-shaped links), every Bagua algorithm and torch DDP (Gloo) on
# the same workloads, at several link rates. One bagua-launch starts
# each job across the namespaces with --remote-cmd "ip netns exec {host}"; the DDP runs are the
# same torch script under the same launcher (it sets RANK, WORLD_SIZE, MASTER_ADDR).
#
# Workloads:
#   c-wide      examples/fashion_mnist (C), MLP 784-3072-3072-10 (11.9 M parameters)
#   torch-cnn   examples/torch/train.py --model cnn: one full epoch
#   torch-wide  examples/torch/train.py --model wide (11.8 M parameters)
#   torch-mlp   the communication-bound workload: examples/torch/train.py --model wide
#               --width 1024 (1.86 M parameters, 7.4 MB of gradients) at 8 samples per rank,
#               one epoch of the first 4096 training images (128 steps on 4 ranks). Its
#               compute is about 13 ms a step per rank, so torch DDP spends most of its step
#               communicating at 1 Gbit/s and below; every variant does the same epoch, so
#               the test accuracies compare the algorithms at equal work.
#
# Prints CSV rows (rate,workload,variant,repeat,samples_per_s,bytes_per_step,test_acc,wall_s,
# steady_samples_per_s) to stdout and to --csv FILE. samples_per_s is the script's own figure,
# which for the torch workloads counts evaluation and the first steps too; steady_samples_per_s
# (torch workloads only) is the global batch over the steady-state step time (the loop without
# its first 2 steps and without evaluation), the fairer figure for a few steps of a big model;
# bench/tradeoff_table.py turns them into the table of a results file (docs/results/,
# summarised in docs/benchmarks.md §9). The variants run interleaved (every repeat runs each
# variant once), and every run is also kept, with the load average at its end, in the record
# that bench/record.py describes (--record-dir DIR, or BENCH_RECORD_DIR, names its directory;
# its raw.csv has the same columns, so bench/tradeoff_table.py reads it too). Needs root
# (network namespaces); the record is handed to the user who ran sudo. Latency: none beyond a
# veth pair's by default; --delay MS adds MS each way through netsim's userspace delay switch
# (netsim.sh), and the rows' rate then reads e.g. "1gbit+25ms". The switch costs CPU (about
# half a vCPU at 1 Gbit/s), which the workers on this machine then lack.
#
# usage: bench/tradeoff.sh [--build build] [--rates "10gbit 1gbit 100mbit"]
#          [--workloads "c-wide torch-cnn torch-wide"] [--variants "ddp gradient_allreduce ..."]
#          [--steps 8] [--batch 64] [--repeat 1] [--delay MS] [--csv FILE] [--log-dir DIR]
#          [--record-dir DIR] [--lr LR] [--print-variants]
# --lr sets the learning rate of every torch variant (train.py's --lr; its default otherwise:
# 0.05, 4e-3 for qadam) and is written into the workload column ("torch-mlp/lr0.0125").
# --log-dir keeps every job's output as DIR/RATE-WORKLOAD-VARIANT-REPEAT.log (the per-step
# breakdown: fwd+bwd, waiting for communication, bytes).
# --batch sets the batch per rank of every workload (default 64, torch-mlp's 8); a batch other
# than the workload's default is written into the workload column ("torch-wide/b8"), so one CSV can hold runs of several batch sizes. A smaller
# batch shrinks the compute of a step and leaves its communication as it is, which is how the
# communication-bound regime of a GPU cluster is approached on 2 vCPUs.
# A variant may carry options, NAME:OPTION=VALUE[+OPTION=VALUE...], e.g.
# "decentralized:communication_interval=4", "async:warmup_steps=16+sync_interval_ms=100" or
# "gradient_allreduce:BAGUA_NET_NSTREAMS=1". An option is one of the algorithm's constructor
# arguments that have a BAGUA_* variable, or any BAGUA_* variable of libbagua's registry. Such a
# variant runs with those variables set, as a job configured by an INI file or the environment
# does: train.py without --algorithm builds the algorithm with from_env(). Unknown options and
# refused values stop the script before anything starts.
# "ddp" takes exactly one kind of option, torch DDP's own communication hooks (the compression
# a torch user has without Bagua): "ddp:hook=fp16" (fp16_compress_hook) and
# "ddp:hook=powersgd+rank=R[+start=K]" (powerSGD_hook, rank R >= 1, the first K >= 2 steps
# uncompressed, default 10; train.py's --ddp-hook). They run and are recorded like any other
# variant, the variant column holding the whole spec; bench/variants.sh parses every variant.
# They are not in the default list (each adds a DDP-length run per workload and rate).
# --print-variants prints what each variant runs (train.py's arguments, the variables) and
# exits, without root and without starting anything.
set -uo pipefail
. "$(dirname "$0")/record.sh"
. "$(dirname "$0")/variants.sh"
record_argv "$0" "$@"
cd "$(dirname "$0")/.." || exit 2
build=build rates="10gbit 1gbit 100mbit" workloads="c-wide torch-cnn torch-wide" steps=8
repeat=1 csv=/dev/null delay=0 batch=64 batch_set= logdir= lr=
variants="ddp gradient_allreduce bytegrad decentralized low_precision_decentralized qadam async"
inner=0 print_variants=0
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --workloads) workloads=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --batch) batch=$2 batch_set=1; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --csv) csv=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --log-dir) logdir=$2; shift 2 ;;
    --lr) lr=$2; shift 2 ;;
    --record-dir) export BENCH_RECORD_DIR=$2; shift 2 ;;
    --print-variants) print_variants=1; shift ;;
    --inner) inner=1; shift ;;
    *) echo "tradeoff: unknown argument \"$1\"; see the header of $0" >&2; exit 2 ;;
  esac
done
[ -z "$lr" ] || [[ $lr =~ ^[0-9]*\.?[0-9]+([eE]-?[0-9]+)?$ ]] ||
  { echo "tradeoff: --lr \"$lr\" is not a positive number" >&2; exit 2; }
for n in "steps=$steps" "batch=$batch" "repeat=$repeat"; do
  [[ ${n#*=} =~ ^[1-9][0-9]*$ ]] ||
    { echo "tradeoff: --${n%%=*} \"${n#*=}\" is not a positive integer" >&2; exit 2; }
done
build=$(cd "$build" && pwd) || { echo "tradeoff: no build directory" >&2; exit 2; }
if [ -n "$logdir" ]; then
  mkdir -p "$logdir" && logdir=$(cd "$logdir" && pwd) ||
    { echo "tradeoff: cannot create --log-dir \"$logdir\"" >&2; exit 2; }
fi
py=/usr/bin/python3

# Each variant's train.py arguments (ddp and its hooks) or variables (a Bagua algorithm with
# options), worked out once before anything starts (a Python start with torch takes seconds),
# which also refuses a bad option (bench/variants.sh).
declare -A venv_of ddp_args_of
for variant in $variants; do
  if variant_is_ddp "$variant"; then
    ddp_args_of[$variant]=$(ddp_variant_args "$variant" tradeoff) || exit 2
  else
    venv_of[$variant]=$(variant_env "$build" "$variant" tradeoff) || exit 2
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

if [ "$inner" = 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "tradeoff: needs root (network namespaces)" >&2; exit 77; }
  record_open tradeoff torch rate workload samples_per_s:samples/s bytes_per_step:bytes \
    test_acc:fraction wall_s:s steady_samples_per_s:samples/s
  trap 'record_close $?' EXIT
  echo "rate,workload,variant,repeat,samples_per_s,bytes_per_step,test_acc,wall_s,steady_samples_per_s" |
    tee "$csv"
  for rate in $rates; do
    bench/netsim/netsim.sh run --hosts 4 --rate "$rate" --delay "$delay" --name trade -- \
      "$0" --inner --build "$build" --rates "$rate" --workloads "$workloads" \
      --variants "$variants" --steps "$steps" ${batch_set:+--batch "$batch"} ${lr:+--lr "$lr"} --repeat "$repeat" ${logdir:+--log-dir "$logdir"} | tee -a "$csv" ||
      exit 1
  done
  exit 0
fi

# Inside the cluster: NETSIM_HOSTS names the 4 namespaces; the rows go into the outer run's
# record as each run ends, so that each carries the load average of its own moment.
record_attach
IFS=, read -ra H <<<"$NETSIM_HOSTS"
hostspec=$(printf '%s:1,' "${H[@]}")
hostspec=${hostspec%,}
export PYTHONPATH=$build/python OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# job PROGRAM... -> runs it on the 4 hosts with the variables in venv; output in $out
job() {
  ip netns exec "${H[0]}" env "${venv[@]}" timeout 900 "$build/launcher/bagua-launch" \
    --hosts "$hostspec" \
    --remote-cmd "ip netns exec {host}" --rdzv-host 198.18.0.1 --max-restarts 0 \
    --job-id "trade-$$-$RANDOM" -- "$@" >"$out" 2>&1
}

# first REGEX -> the first number in the first match in the output of rank 0
first() { grep -E '\[[^]/]+/0\]' "$out" | grep -oE "$1" | head -1 | grep -oE '[0-9.]+' | head -1; }

for workload in $workloads; do
  for ((i = 0; i < repeat; i++)); do
    for variant in $variants; do
      is_ddp=0
      variant_is_ddp "$variant" && is_ddp=1
      [ "$workload" = c-wide ] && [ $is_ddp = 1 ] && continue # DDP runs torch scripts
      venv=()
      [ -n "${venv_of[$variant]:-}" ] && mapfile -t venv <<<"${venv_of[$variant]}"
      algo=${variant%%:*}
      b0=64 # the workload's own batch per rank
      [ "$workload" = torch-mlp ] && b0=8
      b=${batch_set:+$batch}
      b=${b:-$b0}
      t0=$(date +%s.%N)
      case $workload in
        c-wide)
          job "$build/examples/fashion_mnist" --hidden 3072,3072 --epochs 1 \
            --limit-train $((steps * b * 4)) --limit-test 1000 --batch-size "$b" \
            --algorithm "$algo"
          sps=$(first 'samples/s [0-9.]+') bytes=$(first 'bytes/step [0-9]+') steady=n/a ;;
        torch-cnn | torch-wide | torch-mlp)
          model=${workload#torch-}
          args=(--epochs 1 --test-limit 2000 --batch-size "$b")
          case $model in
            wide) args+=(--model wide --max-steps "$steps") ;;
            mlp) args+=(--model wide --width 1024 --train-limit 4096) ;;
            *) args+=(--model "$model") ;;
          esac
          [ -n "$lr" ] && args+=(--lr "$lr")
          # With options, the variables choose the algorithm (from_env), not --algorithm.
          if [ $is_ddp = 1 ]; then
            mapfile -t -O ${#args[@]} args <<<"${ddp_args_of[$variant]}"
          elif [ ${#venv[@]} = 0 ]; then
            args+=(--algorithm "$variant")
          fi
          job $py "$PWD/examples/torch/train.py" "${args[@]}"
          sps=$(first '[0-9]+ samples/s, fwd') bytes=$(first '[0-9]+ bytes/step')
          steady=$(first 'steady [0-9.]+')
          steady=$(awk -v t="$steady" -v b="$b" 'BEGIN {if (t > 0) printf "%.1f", b * 4 * 1000 / t; else print "n/a"}') ;;
        *) echo "tradeoff: unknown workload \"$workload\"" >&2; exit 2 ;;
      esac
      rc=$?
      acc=$(first 'test_acc=[0-9.]+')
      wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
      if [ -z "$sps" ] || [ -z "$acc" ]; then
        echo "tradeoff: $workload $variant at $NETSIM_RATE failed (rc $rc):" >&2
        tail -20 "$out" >&2
        sps=fail acc=fail
      fi
      [ $is_ddp = 1 ] && bytes=n/a
      label=$NETSIM_RATE
      [ "${NETSIM_DELAY_MS:-0}" != 0 ] && label="$NETSIM_RATE+${NETSIM_DELAY_MS}ms"
      name=$workload
      [ "$b" != "$b0" ] && name="$workload/b$b"
      [ -n "$lr" ] && [ "$workload" != c-wide ] && name="$name/lr$lr"
      [ -n "$logdir" ] && cp "$out" "$logdir/$label-${name//\//-}-$variant-$i.log"
      echo "$label,$name,$variant,$i,$sps,${bytes:-n/a},$acc,$wall,${steady:-n/a}"
      record_row "$variant" "$i" "$label" "$name" "$sps" "${bytes:-n/a}" "$acc" "$wall" \
        "${steady:-n/a}"
    done
  done
done
