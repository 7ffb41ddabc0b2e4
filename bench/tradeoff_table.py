#!/usr/bin/python3
"""Turns bench/tradeoff.sh's CSV into a markdown table for a results file and a PNG plot.

For every link rate and workload: the samples/s of each variant over its repeats, the ratio of
its median to torch DDP's on the same workload and rate (to gradient_allreduce's for the C
workload, which has no DDP twin), bytes per step, test accuracy, and which variant wins (by
median). Where every row of a cell has a steady_samples_per_s figure (newer CSVs, torch
workloads), the cell uses it and says so ("steady"); older CSVs and the C workload use
samples_per_s. A measured cell reads "median [min-max]"; a cell of fewer than 3 runs lists the
runs instead, and the ratio is then that of their means.

CSV is either the file of tradeoff.sh --csv or the raw.csv of a tradeoff.sh record
(bench/record.py); from a record it also prints the range of the load average over the runs.

usage: bench/tradeoff_table.py CSV [--png docs/results/<date>-tradeoff.png]
"""

import argparse
import csv
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import record  # noqa: E402  (bench/record.py, next to this file)

RATE_ORDER = {"10gbit": 0, "1gbit": 1, "100mbit": 2}


def rate_order(rate):
    """10 Gbit/s first, then 1 Gbit/s, 100 Mbit/s, then the same rates with added latency."""
    base, _, delay = rate.partition("+")
    return (1 if delay else 0, RATE_ORDER.get(base, 9), delay)


def load(path):
    rows = defaultdict(list)  # (rate, workload, variant) -> [row]
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows[(r["rate"], r["workload"], r["variant"])].append(r)
    return rows


def median(values):
    return record.median(list(values))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--png", help="write a bar plot of samples/s relative to the baseline")
    args = ap.parse_args()
    rows = load(args.csv)
    cells = sorted({(rate, wl) for rate, wl, _ in rows},
                   key=lambda k: (k[1], rate_order(k[0])))
    fewest = min(len(rs) for rs in rows.values()) if rows else 0
    if record.runs_note(fewest):
        print(record.runs_note(fewest) + "\n")
    print("| rate | workload | variant | samples/s | vs baseline | bytes/step | test_acc | runs |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    plot = defaultdict(dict)  # workload -> {rate: {variant: ratio}}
    accs = defaultdict(dict)  # workload -> {rate: {variant: median test accuracy}}
    for rate, wl in cells:
        variants = [v for (r, w, v) in rows if (r, w) == (rate, wl)]
        key = "samples_per_s"
        if all(median([r.get("steady_samples_per_s") or "n/a"]) is not None
               for v in variants for r in rows[(rate, wl, v)]):
            key = "steady_samples_per_s"
        base_name = "ddp" if (rate, wl, "ddp") in rows else "gradient_allreduce"
        base = median(r[key] for r in rows.get((rate, wl, base_name), []))
        best = max(variants, key=lambda v: median(r[key] for r in rows[(rate, wl, v)]) or 0)
        for v in variants:
            rs = rows[(rate, wl, v)]
            sps = median(r[key] for r in rs)
            ratio = sps / base if sps and base else None
            name = f"**{v}**" if v == best else v
            acc = record.stat([r["test_acc"] for r in rs], ".4f")
            print(f"| {rate} | {wl} | {name} | {record.stat([r[key] for r in rs], '.0f')}"
                  f"{' (steady)' if key != 'samples_per_s' else ''} | "
                  f"{'%.2f' % ratio if ratio else 'n/a'} ({base_name}) | "
                  f"{record.stat([r['bytes_per_step'] for r in rs], '.0f')} | "
                  f"{acc if acc != 'n/a' else 'fail'} | {len(rs)} |"
                  if sps else f"| {rate} | {wl} | {v} | fail | | | | {len(rs)} |")
            if ratio:
                plot[wl].setdefault(rate, {})[v] = ratio
                acc_m = median(r["test_acc"] for r in rs)
                if acc_m is not None:
                    accs[wl].setdefault(rate, {})[v] = acc_m
    loads = record.numbers(r.get("load1") for rs in rows.values() for r in rs)
    if loads:
        print(f"\nload average (1 min) at the end of each run: {min(loads):.2f}-{max(loads):.2f}")
    if args.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        wls = sorted(plot)
        # One colour per variant across every panel, so the panels read alike.
        every = sorted({v for wl in plot for r in plot[wl] for v in plot[wl][r]})
        colour = {v: f"C{i}" for i, v in enumerate(every)}
        # Top row: speed over the baseline (a log scale once a variant is 8x or more, so the
        # others stay readable); bottom row: the runs' median test accuracy, the other side of
        # the trade-off.
        fig, axes = plt.subplots(2, len(wls), figsize=(6 * len(wls), 7), squeeze=False)
        for col, wl in enumerate(wls):
            rates = sorted(plot[wl], key=rate_order)
            names = [v for v in every if any(v in plot[wl][r] for r in rates)]
            width = 0.8 / max(len(names), 1)
            for row, (data, label) in enumerate(((plot[wl], "samples/s relative to the baseline"),
                                                 (accs[wl], "test accuracy"))):
                ax = axes[row][col]
                for i, v in enumerate(names):
                    xs = [j + i * width for j in range(len(rates))]
                    ax.bar(xs, [data.get(r, {}).get(v, 0) for r in rates], width, label=v,
                           color=colour[v])
                ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rates))], rates)
                ax.set_ylabel(label)
                if row == 0:
                    ax.axhline(1.0, color="black", linewidth=0.8)
                    if max(max(d.values()) for d in data.values()) >= 8:
                        ax.set_yscale("log")
                    ax.set_title(wl)
                    ax.legend(fontsize=7)
                else:
                    ax.set_ylim(0, 1)
        fig.tight_layout()
        fig.savefig(args.png, dpi=100)
        print(f"\n(plot: {args.png})", file=sys.stderr)


if __name__ == "__main__":
    main()
