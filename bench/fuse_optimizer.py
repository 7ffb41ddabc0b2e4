#!/usr/bin/python3
"""Benchmark: bagua.contrib.fuse_optimizer on a model with many small tensors.

Times optimizer.step() against optimizer.fuse_step() (median of --repeat runs of --steps
steps each, interleaved) for SGD with momentum, Adam, AdamW, RMSprop and Adagrad.
usage: PYTHONPATH=build/python bench/fuse_optimizer.py [--layers 200] [--width 32]
"""

import argparse
import statistics
import time

import torch
import torch.nn as nn

import bagua.torch_api as bagua

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
    a = ap.parse_args()
    torch.set_num_threads(1)
    print(f"model: {a.layers} Linear({a.width},{a.width}) layers = {2 * a.layers} tensors, "
          f"torch {torch.__version__}, 1 thread; median of {a.repeat} x {a.steps} steps")
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
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            for _ in range(a.steps):
                plain.step()
            tp.append((time.perf_counter() - t0) / a.steps * 1e3)
            t0 = time.perf_counter()
            for _ in range(a.steps):
                fused.fuse_step()
            tf.append((time.perf_counter() - t0) / a.steps * 1e3)
        p, f = statistics.median(tp), statistics.median(tf)
        print(f"| {name} | {p:.2f} | {f:.2f} | {p / f:.1f}x |")


if __name__ == "__main__":
    main()
