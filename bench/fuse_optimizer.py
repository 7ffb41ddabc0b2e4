#!/usr/bin/python3
"""Benchmark: bagua.contrib.fuse_optimizer on a model with many small tensors.

Times optimizer.step() against optimizer.fuse_step() for SGD with momentum, Adam, AdamW,
RMSprop and Adagrad: --repeat runs of --steps steps each, the two interleaved (step(),
fuse_step(), step(), ...) so that load from elsewhere falls on both alike. The table gives
each as "median [min-max]" ms per step (with fewer than 3 repeats, the runs themselves) and
the speed-up as the ratio of the medians. Every run is kept, with the load average at its
end, in the record that bench/record.py describes (--record-dir DIR, or BENCH_RECORD_DIR,
names its directory).
usage: PYTHONPATH=build/python bench/fuse_optimizer.py [--layers 200] [--width 32]
         [--steps 20] [--repeat 5] [--record-dir DIR]
"""

import argparse
import os
import sys
import time

import torch
import torch.nn as nn

import bagua.torch_api as bagua

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import record  # noqa: E402  (bench/record.py, next to this file)

OPTS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=1e-3),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=1e-2),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=200)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--record-dir", default=None,
                    help="the record of this run (default: BENCH_RECORD_DIR, else "
                         "docs/results/raw/<date>-fuse_optimizer-<commit>/)")
    a = ap.parse_args()
    if a.steps < 1 or a.repeat < 1:
        ap.error("--steps and --repeat must be at least 1")
    rec = record.open_record("fuse_optimizer", sys.argv, ["optimizer", "ms:ms/step"],
                             peers=["torch"], python=sys.executable, path=a.record_dir)
    status = 1
    try:
        run(a, rec)
        status = 0
    finally:
        rec.close(status)
        print(f"record: {rec.dir}", file=sys.stderr)


def run(a, rec):
    torch.set_num_threads(1)
    print(f"model: {a.layers} Linear({a.width},{a.width}) layers = {2 * a.layers} tensors, "
          f"torch {torch.__version__}, 1 thread; median [min-max] of {a.repeat} x {a.steps} "
          f"steps, interleaved")
    if record.runs_note(a.repeat):
        print(record.runs_note(a.repeat))
    print("| optimizer | step() ms | fuse_step() ms | speed-up |")
    print("| --- | ---: | ---: | ---: |")
    for name, make in OPTS.items():
        nets = [nn.Sequential(*[nn.Linear(a.width, a.width) for _ in range(a.layers)])
                for _ in range(2)]
        plain, fused = make(nets[0].parameters()), make(nets[1].parameters())
        fused = bagua.contrib.fuse_optimizer(fused)
        for net in nets:
            net(torch.randn(2, a.width)).sum().backward()
        plain.step()
        fused.fuse_step()
        tp, tf = [], []
        for i in range(a.repeat):
            t0 = time.perf_counter()
            for _ in range(a.steps):
                plain.step()
            tp.append((time.perf_counter() - t0) / a.steps * 1e3)
            rec.row("step", i, name, f"{tp[-1]:.4f}")
            t0 = time.perf_counter()
            for _ in range(a.steps):
                fused.fuse_step()
            tf.append((time.perf_counter() - t0) / a.steps * 1e3)
            rec.row("fuse_step", i, name, f"{tf[-1]:.4f}")
        p, f = record.median(tp), record.median(tf)
        print(f"| {name} | {record.stat(tp, '.2f')} | {record.stat(tf, '.2f')} | {p / f:.1f}x |")


if __name__ == "__main__":
    main()
