#!/usr/bin/env bash
# Runs the GPU checks from a CUDA build on a machine with an NVIDIA GPU, within a time budget:
#   scripts/gpu-check.sh BUILD_DIR OUT_DIR [BUDGET_SECONDS]
# 1. PyTorch on the GPU, when python3 (GPU_CHECK_PYTHON) has torch with CUDA: the bagua package
#    built for that interpreter (scripts/build-py-ext.sh from BUILD_DIR/libbagua.a), the pytest
#    cases marked `gpu` (CUDA tensors through bagua.torch_api, and the elastic rebuild with
#    three ranks on the one GPU, which needs etcd on PATH), then bench/torch_gpu.sh
#    (with_bagua against torch DDP over NCCL), and with GPU_CHECK_UPSTREAM (a checkout of
#    upstream Bagua) upstream's mnist example unchanged (scripts/upstream-examples.sh --cuda);
# 2. every test labelled `gpu` (ctest -L gpu), one at a time, each under its own bound, so that
#    one hang costs its bound and not the rest;
# 3. the CUDA kernel benchmark (bagua-bench kernel NAME --device cuda) at 256 MiB;
# 4. PyTorch's NCCL allreduce over NCCL's own sockets and over Bagua-Net (bench/nccl_net_torch.py).
# Lent GPU time is short, so the order is what matters most first, and a step that would start
# after the budget is spent is reported as not run instead of started. Everything goes to
# OUT_DIR (logs, summary.txt); the summary is printed last.
set -u
BUILD=$(cd "${1:?usage: gpu-check.sh BUILD_DIR OUT_DIR [BUDGET_SECONDS]}" && pwd)
OUT=${2:?usage: gpu-check.sh BUILD_DIR OUT_DIR [BUDGET_SECONDS]}
BUDGET=${3:-480}
TEST_BOUND=${GPU_CHECK_TEST_BOUND:-75}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
START=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - START))); }
note() { echo "$*" | tee -a "$SUMMARY"; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$OUT/gpu.txt" 2>&1
note "gpu: $(cat "$OUT/gpu.txt")"

# 1. PyTorch on the GPU, first: it has never run on one. The interpreter holding torch is
#    usually not the one CMake found (a virtual environment's), so the package is built for it
#    here; each step is bounded by what is left of the budget.
TPY=${GPU_CHECK_PYTHON:-python3}
bound() { # MAX: the smaller of MAX and the budget left minus a margin for the later steps
  local b=$(($(left) - 60))
  [ "$b" -gt "$1" ] && b=$1
  echo "$b"
}
if "$TPY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  PYDIR=$OUT/pyext
  if "$ROOT/scripts/build-py-ext.sh" "$BUILD" "$TPY" "$PYDIR" >"$OUT/pyext.log" 2>&1; then
    note "built bagua._C for $("$TPY" -c 'import sys; print(sys.version.split()[0])'): $PYDIR"
    b=$(bound 240)
    if [ "$b" -gt 30 ]; then
      t0=$(date +%s)
      (cd "$ROOT/tests/python" && PYTHONPATH=$PYDIR BAGUA_BUILD_DIR=$BUILD timeout -k 5 "$b" \
        "$TPY" -m pytest -v -p no:cacheprovider -m gpu test_cuda_api.py test_elastic.py) \
        >"$OUT/torch_gpu_tests.log" 2>&1
      rc=$?
      grep -E "(PASSED|FAILED|SKIPPED|ERROR)" "$OUT/torch_gpu_tests.log" | sed 's/^/    /' |
        tee -a "$SUMMARY"
      note "$([ $rc = 0 ] && echo PASS || echo "FAIL (rc $rc)")  torch GPU tests" \
        "($(($(date +%s) - t0))s): $(tail -1 "$OUT/torch_gpu_tests.log")"
    else
      note "NOT RUN  torch GPU tests (budget spent)"
    fi
    b=$(bound 150)
    if [ "$b" -gt 60 ]; then
      timeout -k 5 $((b + 20)) "$ROOT/bench/torch_gpu.sh" --python "$TPY" --pythonpath "$PYDIR" \
        --budget "$b" --record-dir "$OUT/torch_gpu" >"$OUT/torch_gpu.txt" 2>&1
      note "torch_gpu bench (rc $?):"
      grep "^|" "$OUT/torch_gpu.txt" | tee -a "$SUMMARY"
    else
      note "NOT RUN  bench/torch_gpu.sh (budget spent)"
    fi
    # Upstream's mnist example unchanged on the GPU (every --algorithm), when a checkout of
    # upstream Bagua was carried and named.
    b=$(bound 150)
    if [ -n "${GPU_CHECK_UPSTREAM:-}" ] && [ "$b" -gt 60 ]; then
      BAGUA_PY_DIR=$PYDIR UPSTREAM_PYTHON=$TPY BAGUA_BUILD_DIR=$BUILD timeout -k 5 "$b" \
        "$ROOT/scripts/upstream-examples.sh" "$GPU_CHECK_UPSTREAM" --cuda --only mnist \
        >"$OUT/upstream_mnist_cuda.txt" 2>&1
      note "upstream mnist on the GPU (rc $?):"
      grep -E "^(PASS|FAIL)|passed" "$OUT/upstream_mnist_cuda.txt" | tee -a "$SUMMARY"
    else
      note "NOT RUN  upstream mnist on the GPU (GPU_CHECK_UPSTREAM unset or budget spent)"
    fi
  else
    note "FAIL     building bagua._C for $TPY: $(tail -1 "$OUT/pyext.log")"
  fi
else
  note "NOT RUN  torch GPU tests and bench ($TPY has no torch with CUDA)"
fi

# 2. The gpu-labelled tests, in the order: kernels, NCCL, data-parallel layer, example. They
#    passed on an H200 before the PyTorch path existed, so they come after it.
mapfile -t TESTS < <(cd "$BUILD" && ctest -N -L gpu 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: //p' |
                     awk '{ print (/^gpu_/ ? 0 : 1), $0 }' | sort -s -k1,1n | cut -d' ' -f2)
for t in "${TESTS[@]}"; do
  if [ "$(left)" -lt $((TEST_BOUND / 2)) ]; then
    note "NOT RUN  $t (budget spent)"
    continue
  fi
  t0=$(date +%s)
  (cd "$BUILD" && timeout -k 5 "$TEST_BOUND" ctest -R "^${t}\$" --output-on-failure \
     --timeout "$TEST_BOUND") >"$OUT/test_$t.log" 2>&1
  rc=$?
  dt=$(($(date +%s) - t0))
  if [ $rc -eq 0 ] && grep -q "Skipped\|Not Run" "$OUT/test_$t.log"; then
    note "SKIP     $t (${dt}s)"
  elif [ $rc -eq 0 ]; then
    note "PASS     $t (${dt}s)"
  else
    note "FAIL     $t (rc $rc, ${dt}s)"
  fi
done

# 3. Kernel throughput next to a device-to-device copy measured in the same run.
if [ "$(left)" -gt 30 ] && [ -x "$BUILD/bench/bagua-bench" ]; then
  for k in memcpy quantize dequantize dequantize_add reduce reduce_n axpy sgd adam; do
    timeout 30 "$BUILD/bench/bagua-bench" kernel "$k" --device cuda --bytes 256M --iters 20 \
      >>"$OUT/kernel_bench.txt" 2>&1 || echo "kernel $k: rc $?" >>"$OUT/kernel_bench.txt"
  done
  note "kernel bench: $OUT/kernel_bench.txt"
else
  note "NOT RUN  kernel bench"
fi

# 4. Bagua-Net under an unmodified torch program, against NCCL's sockets, side by side. Both
#    ranks share the one GPU, and without MPS the GPU time-slices between the two processes'
#    kernels, which bounds both transports alike (first run on an H200: 1.86 GB/s for both at
#    every size); so the pairs run once as they are and then under an MPS daemon of our own,
#    which lets the two ranks' kernels run at once. The daemon is stopped afterwards.
PLUGIN=$BUILD/net-plugin/libnccl-net-bagua.so
torch_pairs() { # LABEL_SUFFIX ROUNDS
  for round in $(seq 1 "$2"); do
    for cfg in socket bagua; do
      [ "$(left)" -gt 20 ] || return 0
      args=(--label "$cfg-$1$round" --json "$OUT/nccl_net_${cfg}_$1$round.json")
      [ $cfg = bagua ] && args+=(--plugin "$PLUGIN")
      env -u LD_LIBRARY_PATH timeout 90 python3 "$ROOT/bench/nccl_net_torch.py" "${args[@]}" \
        >>"$OUT/nccl_net_torch.txt" 2>&1 || echo "$cfg-$1$round: rc $?" >>"$OUT/nccl_net_torch.txt"
    done
  done
}
if [ "$(left)" -gt 60 ] && python3 -c 'import torch,sys; sys.exit(not torch.cuda.is_available())' \
     2>/dev/null; then
  torch_pairs "" "${GPU_CHECK_PLAIN_ROUNDS:-1}"
  if command -v nvidia-cuda-mps-control >/dev/null && [ "$(left)" -gt 40 ]; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/bagua-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/bagua-mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d; then
      torch_pairs "mps" "${GPU_CHECK_MPS_ROUNDS:-2}"
      echo quit | nvidia-cuda-mps-control
    else
      note "MPS daemon did not start"
    fi
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  else
    note "NOT RUN  torch bench under MPS (no nvidia-cuda-mps-control or budget spent)"
  fi
  grep -v "^transport" "$OUT/nccl_net_torch.txt" | grep -E "^(socket|bagua)|rc " | tee -a "$SUMMARY"
else
  note "NOT RUN  torch NCCL / Bagua-Net bench (budget spent or no torch with CUDA)"
fi
note "elapsed $(($(date +%s) - START)) s"
