#!/bin/bash
# Test accuracy after one epoch of torch-mlp over seeds 1-5, one host, 4 ranks,
# BAGUA_HIERARCHICAL=0 (each rank its own node: the 4-host arithmetic).
cd "$(git rev-parse --show-toplevel)" || exit 2
export PYTHONPATH=build/python OMP_NUM_THREADS=1
out=${1:?usage: $0 OUTPUT}
echo "seed variant interval test_acc" > "$out"
for seed in 1 2 3 4 5; do
  for v in ddp:1 bytegrad:1 low_precision_decentralized:1 low_precision_decentralized:2 low_precision_decentralized:3 decentralized:2 decentralized:4; do
    a=${v%:*} k=${v#*:}
    if [ "$a" = ddp ]; then set -- --ddp; envs=(); else set --; envs=(BAGUA_HIERARCHICAL=0 BAGUA_ALGORITHM=$a BAGUA_COMMUNICATION_INTERVAL=$k); fi
    log=$(env "${envs[@]}" timeout 900 build/launcher/bagua-launch --nproc-per-node 4 --max-restarts 0 -- \
      /usr/bin/python3 examples/torch/train.py "$@" --seed $seed --epochs 1 --test-limit 2000 --batch-size 8 \
      --model wide --width 1024 --train-limit 4096 2>&1 | grep -E '/0\]')
    acc=$(grep -oE 'test_acc=[0-9.]+' <<<"$log" | cut -d= -f2)
    echo "$seed $a $k ${acc:-fail}" | tee -a "$out"
  done
done
