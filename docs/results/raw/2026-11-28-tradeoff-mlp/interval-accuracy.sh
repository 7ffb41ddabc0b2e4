#!/bin/bash
# Accuracy of the relaxations with a communication interval, at equal work, one host, 4 ranks,
# BAGUA_HIERARCHICAL=0 (each rank its own node: the 4-host arithmetic).
cd "$(git rev-parse --show-toplevel)" || exit 2
export PYTHONPATH=build/python OMP_NUM_THREADS=1
out=${1:?usage: $0 OUTPUT}
echo "epochs variant interval bytes_per_step test_acc" > "$out"
for e in 1 3; do
  for v in ddp:1 gradient_allreduce:1 bytegrad:1 decentralized:1 decentralized:2 decentralized:4 decentralized:8 low_precision_decentralized:1 low_precision_decentralized:2 low_precision_decentralized:3 low_precision_decentralized:4; do
    a=${v%:*} k=${v#*:}
    if [ "$a" = ddp ]; then set -- --ddp; envs=(); else set --; envs=(BAGUA_HIERARCHICAL=0 BAGUA_ALGORITHM=$a BAGUA_COMMUNICATION_INTERVAL=$k); fi
    log=$(env "${envs[@]}" timeout 900 build/launcher/bagua-launch --nproc-per-node 4 --max-restarts 0 -- \
      /usr/bin/python3 examples/torch/train.py "$@" --epochs $e --test-limit 2000 --batch-size 8 \
      --model wide --width 1024 --train-limit 4096 2>&1 | grep -E '/0\]')
    b=$(grep -oE '[0-9]+ bytes/step' <<<"$log" | grep -oE '[0-9]+'); acc=$(grep -oE 'test_acc=[0-9.]+' <<<"$log" | cut -d= -f2)
    echo "$e $a $k ${b:-n/a} ${acc:-fail}" | tee -a "$out"
  done
done
