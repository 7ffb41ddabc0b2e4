#!/usr/bin/env bash
# Runs upstream Bagua's example scripts on this build, changed only from CUDA to CPU, the way a
# user porting from upstream would: examples/mnist (every --algorithm, with and without
# --fuse-optimizer), examples/elastic_training, examples/communication_primitives and
# examples/benchmark. Upstream's scripts are not part of this repository: give a checkout of
# upstream Bagua (a work tree, or a bare repository read at HEAD).
#
#   scripts/upstream-examples.sh UPSTREAM [--only mnist|elastic|primitives|benchmark]... [--cuda]
#
# With --cuda (a machine with a GPU) the scripts run exactly as upstream wrote them, CUDA and
# all, with the interpreter UPSTREAM_PYTHON (default python3) and the bagua package in
# BAGUA_PY_DIR (default BUILD/python; scripts/build-py-ext.sh makes one for another
# interpreter). Every rank runs through a small wrapper that gives it its own NCCL_HOSTID
# (ranks sharing one GPU must look like two hosts to NCCL) and, when a node has more ranks
# than GPUs, makes each rank a node of its own with local rank 0, so that upstream's
# torch.cuda.set_device(bagua.get_local_rank()) names a device that exists.
#
# The device edits (the only ones) are: ".cuda()" removed, "torch.cuda.set_device(...)" and
# "torch.cuda.manual_seed_all(...)" statements made "pass", and "device_ids=[...]" removed from
# torch.distributed.barrier (a Gloo barrier takes none); the benchmark, which has a --no-cuda
# flag, refuses to run without CUDA in one statement, which is made "pass". The data source is
# the one other difference: MNIST is not downloadable here, so the scripts' data directory
# holds Debian's Fashion-MNIST (the same file format) cut to UPSTREAM_EXAMPLES_SAMPLES training
# images (default 6000) so that a run takes seconds; UPSTREAM_EXAMPLES_ALGORITHMS narrows the
# mnist runs. Prints one "PASS"/"FAIL" line per run and a "N passed, N failed" summary; logs
# stay in the printed work directory.
#
# communication_primitives fails here as it stands: it checks each Bagua primitive against
# torch.distributed on the same tensors, and on Gloo (the CPU backend) torch.distributed has no
# reduce_scatter nor the list form of all_to_all, and its reduce overwrites the input on
# non-root ranks. With those three reference calls rewritten for Gloo (reduce on a clone,
# reduce_scatter as all_reduce plus a slice, all_to_all_single) it passes on 4 and 8 ranks.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
if [ $# -lt 1 ]; then
  echo "usage: $0 UPSTREAM_BAGUA_CHECKOUT [--only NAME]..." >&2
  exit 2
fi
upstream=$1
shift
only=()
cuda=0
while [ $# -gt 0 ]; do
  case $1 in
    --only) only+=("$2"); shift 2 ;;
    --cuda) cuda=1; shift ;;
    *) echo "$0: unknown argument $1; accepted: --only mnist|elastic|primitives|benchmark," \
         "--cuda" >&2
       exit 2 ;;
  esac
done
wanted() { [ ${#only[@]} -eq 0 ] || [[ " ${only[*]} " == *" $1 "* ]]; }

build=${BAGUA_BUILD_DIR:-$root/build}
launch=$build/launcher/bagua-launch
python=/usr/bin/python3
[ $cuda = 1 ] && python=${UPSTREAM_PYTHON:-python3}
export PYTHONPATH=${BAGUA_PY_DIR:-$build/python}${PYTHONPATH:+:$PYTHONPATH}
export OMP_NUM_THREADS=1
if [ ! -x "$launch" ]; then
  echo "$0: $launch is missing: build first (cmake --build build)" >&2
  exit 2
fi

work=$(mktemp -d /tmp/bagua-upstream-examples.XXXXXX)
echo "work directory: $work"
if [ $cuda = 1 ]; then
  # The interpreter every rank runs (bagua-launch --python): see the header.
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [ "${gpus:-0}" -ge 1 ] || { echo "$0: --cuda: nvidia-smi lists no GPU" >&2; exit 2; }
  cat >"$work/python-gpu" <<WRAP
#!/bin/sh
export NCCL_HOSTID="bagua-\$\$" NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
if [ "\${LOCAL_WORLD_SIZE:-1}" -gt $gpus ]; then
  export BAGUA_NODE_ID="gpu-node-\${RANK:-0}" LOCAL_RANK=0 LOCAL_WORLD_SIZE=1
fi
exec "$python" "\$@"
WRAP
  chmod +x "$work/python-gpu"
  python=$work/python-gpu
fi

# show PATH: a file of upstream's tree, from a work tree or a (bare) repository's HEAD.
show() {
  if [ -f "$upstream/$1" ]; then cat "$upstream/$1"; else git -C "$upstream" show "HEAD:$1"; fi
}

# port SRC DST: upstream's script with the device edits above (none with --cuda).
port() {
  if [ $cuda = 1 ]; then
    show "$1" >"$2"
    return
  fi
  show "$1" | sed -E -e 's/\.cuda\(\)//g' \
    -e 's/^( *)torch\.cuda\.(set_device|manual_seed_all)\(.*\)$/\1pass/' \
    -e 's/torch\.distributed\.barrier\(device_ids=\[[^]]*\]\)/torch.distributed.barrier()/' \
    >"$2"
}

# MNIST's raw files in DIR/MNIST/raw, from Fashion-MNIST, the training set cut to N images;
# where Debian's dataset is absent (a GPU machine), generated images in the same format.
make_data() {
  "$python" - "$1" "${UPSTREAM_EXAMPLES_SAMPLES:-6000}" <<'EOF'
import gzip, os, random, struct, sys
out, n = os.path.join(sys.argv[1], "MNIST", "raw"), int(sys.argv[2])
os.makedirs(out, exist_ok=True)
src = "/usr/share/datasets/fashion-mnist"


def generated(name):
    count = 60000 if name.startswith("train") else 10000
    rnd = random.Random(name)
    if "labels" in name:
        return struct.pack(">II", 2049, count) + bytes(rnd.randrange(10) for _ in range(count))
    return struct.pack(">IIII", 2051, count, 28, 28) + rnd.randbytes(count * 28 * 28)


for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte"):
    path = os.path.join(src, name + ".gz")
    data = gzip.open(path).read() if os.path.exists(path) else generated(name)
    magic, count = struct.unpack(">II", data[:8])
    keep = n if name.startswith("train") else min(count, max(n // 6, 1000))
    head = 16 if "images" in name else 8
    item = 28 * 28 if "images" in name else 1
    with open(os.path.join(out, name), "wb") as f:
        f.write(data[:4] + struct.pack(">I", keep) + data[8:head] + data[head:head + keep * item])
EOF
}

passed=0
failed=0
# run NAME TIMEOUT CMD...: one run; its output goes to $work/NAME.log.
run() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  if (cd "$work" && timeout -k 10 "$limit" "$@") >"$work/$name.log" 2>&1; then
    echo "PASS $name ($((SECONDS - t0)) s)"
    passed=$((passed + 1))
  else
    echo "FAIL $name ($((SECONDS - t0)) s): see $work/$name.log"
    tail -5 "$work/$name.log" | sed 's/^/    /'
    failed=$((failed + 1))
  fi
}

if wanted mnist || wanted elastic; then
  make_data "$work/data"
fi
if wanted mnist; then
  port examples/mnist/main.py "$work/mnist.py"
  mkdir -p "$work/mnist"
  all="gradient_allreduce bytegrad decentralized low_precision_decentralized qadam async"
  for algo in ${UPSTREAM_EXAMPLES_ALGORITHMS:-$all}; do
    for fuse in "" --fuse-optimizer; do
      # low_precision_decentralized refuses a fused optimizer and async a module that is not
      # flattened (--fuse-optimizer passes do_flatten=False), as upstream's do.
      case $algo in low_precision_decentralized | async) [ -n "$fuse" ] && continue ;; esac
      lr=1.0
      [ "$algo" = qadam ] && lr=0.001
      # The script reads ../data: run it from a directory beside the data.
      run "mnist-$algo${fuse:+-fused}" 600 env -C "$work/mnist" "$launch" --nproc-per-node 2 \
        --python "$python" "$work/mnist.py" --algorithm "$algo" $fuse --epochs 2 \
        --batch-size 128 --lr "$lr" --async-sync-interval 50
    done
  done
fi
if wanted elastic; then
  port examples/elastic_training/main.py "$work/elastic.py"
  # Upstream's command, with this machine's endpoint; bagua.distributed.run starts the agents.
  run elastic 600 "$python" -m bagua.distributed.run --nnodes=1:2 --nproc_per_node=2 \
    --rdzv_id=upstream-example "$work/elastic.py" --epochs 1 --data_dir "$work/data"
fi
if wanted primitives; then
  port examples/communication_primitives/main.py "$work/primitives.py"
  run primitives 300 "$launch" --nproc-per-node 4 --python "$python" "$work/primitives.py"
fi
if wanted benchmark; then
  port examples/benchmark/synthetic_benchmark.py "$work/benchmark.py"
  [ $cuda = 1 ] || sed -i -E \
    's/^( *)raise RuntimeError\("bagua currently not supporting non-GPU mode"\)$/\1pass/' \
    "$work/benchmark.py"
  for algo in gradient_allreduce bytegrad decentralized low_precision_decentralized qadam async
  do
    for fuse in "" --fuse-optimizer; do
      case $algo in low_precision_decentralized | async) [ -n "$fuse" ] && continue ;; esac
      run "benchmark-$algo${fuse:+-fused}" 600 "$launch" --nproc-per-node 2 --python "$python" \
        "$work/benchmark.py" $([ $cuda = 1 ] || echo --no-cuda) --model resnet18 --batch-size 8 \
        --num-warmup-batches 1 \
        --num-batches-per-iter 2 --num-iters 2 --algorithm "$algo" $fuse
    done
  done
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
