#!/usr/bin/python3
"""Checks the record a benchmark script under bench/ kept of one run (bench/record.py): that
meta.txt has every field with a plausible value, that raw.csv has the expected number of rows
with the load average in each, and that the variants ran interleaved (every repetition runs
each variant once, in the same order: A B A B ..., never A A B B).

usage: check_record.py DIR ROWS "VARIANT ..." [--status N] [--group COLUMN]
  ROWS: the number of rows raw.csv must hold; VARIANT ...: the variants of one repetition in
  the order the script runs them; --group: a column whose values each have repetitions of
  their own (a script that interleaves the variants of one optimizer, then of the next).
  Exits 0 when the record passes, 1 with the reasons when not.
Used by tests/bench/record.sh and tests/python/test_bench_scripts.py.
"""

import csv
import os
import re
import sys

META_KEYS = ["script", "command", "cwd", "commit", "short_commit", "cpu", "nproc", "kernel",
             "start", "load_start", "settings", "columns", "units", "end", "load_end", "rows",
             "status"]
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
LOAD = re.compile(r"^\d+\.\d+ \d+\.\d+ \d+\.\d+$")


def read_meta(path):
    meta = {}
    with open(os.path.join(path, "meta.txt")) as f:
        for line in f:
            k, sep, v = line.rstrip("\n").partition(": ")
            if sep:
                meta.setdefault(k, v)
    return meta


def problems(path, rows, variants, status=0, group=None):
    """The list of what is wrong with the record in PATH (empty when nothing is)."""
    bad = []
    if not os.path.isfile(os.path.join(path, "meta.txt")):
        return [f"{path}: no meta.txt"]
    meta = read_meta(path)
    bad += [f"meta.txt: no {k}:" for k in META_KEYS if k not in meta]
    if bad:
        return bad
    if not re.match(r"^([0-9a-f]{40}|unknown)( \+dirty \(\d+ changed paths\))?$", meta["commit"]):
        bad.append(f"meta.txt: commit {meta['commit']!r}")
    if not meta["nproc"].isdigit():
        bad.append(f"meta.txt: nproc {meta['nproc']!r}")
    for k in ("start", "end"):
        if not TIME.match(meta[k]):
            bad.append(f"meta.txt: {k} {meta[k]!r} is not a UTC time")
    for k in ("load_start", "load_end"):
        if not LOAD.match(meta[k]):
            bad.append(f"meta.txt: {k} {meta[k]!r} is not a load average")
    if not meta["command"] or not meta["cpu"] or not meta["kernel"].startswith("Linux"):
        bad.append("meta.txt: empty command or cpu, or a kernel that is not Linux")
    if meta["status"] != f"exit {status}":
        bad.append(f"meta.txt: status {meta['status']!r}, expected 'exit {status}'")
    if meta["rows"] != str(rows):
        bad.append(f"meta.txt: rows {meta['rows']}, expected {rows}")

    with open(os.path.join(path, "raw.csv"), newline="") as f:
        table = list(csv.DictReader(f))
        f.seek(0)
        head = next(csv.reader(f))
    if head[:4] != ["seq", "time", "variant", "rep"] or \
            head[-4:] != ["units", "load1", "load5", "load15"]:
        bad.append(f"raw.csv: header {head}")
    if " ".join(head) != meta["columns"]:
        bad.append("raw.csv: header differs from meta.txt's columns")
    if len(table) != rows:
        bad.append(f"raw.csv: {len(table)} rows, expected {rows}")
    for i, r in enumerate(table):
        if r["seq"] != str(i) or not TIME.match(r["time"]) or \
                not LOAD.match(" ".join([r["load1"], r["load5"], r["load15"]])):
            bad.append(f"raw.csv: row {i} has a bad seq, time or load average: {r}")
            break

    if group and table and group not in table[0]:
        return bad + [f"raw.csv: no column {group!r}"]
    for g in dict.fromkeys(r[group] for r in table) if group else [None]:
        bad += interleaving([r for r in table if not group or r[group] == g], variants)
    return bad


def interleaving(table, variants):
    """What is wrong with the order of the runs in TABLE: each repetition must run every
    variant once, in the order VARIANTS."""
    # Rows of one run come together (a run may give several rows, one per message size), so
    # consecutive rows of the same variant and repetition are one run.
    runs = []
    for r in table:
        if not runs or runs[-1] != (r["rep"], r["variant"]):
            runs.append((r["rep"], r["variant"]))
    reps = list(dict.fromkeys(rep for rep, _ in runs))
    want = [(rep, v) for rep in reps for v in variants]
    if runs == want:
        return []
    return ["raw.csv: the runs are not interleaved as expected:\n  got  "
            + " ".join(f"{v}/{rep}" for rep, v in runs) + "\n  want "
            + " ".join(f"{v}/{rep}" for rep, v in want)]


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    opts = {"--status": "0", "--group": None}
    for k in opts:
        if k in argv:
            i = argv.index(k)
            opts[k] = argv[i + 1]
            argv = argv[:i] + argv[i + 2:]
    bad = problems(argv[0], int(argv[1]), argv[2].split(), int(opts["--status"]),
                   opts["--group"])
    for b in bad:
        print(f"check_record: {b}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
