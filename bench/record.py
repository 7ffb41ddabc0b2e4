#!/usr/bin/python3
"""The record every benchmark script under bench/ keeps of a run.

A benchmark's printed table is a summary; this module keeps what is behind it, so that a
quiet run can be told from a loaded one and any figure can be recomputed. For one run of a
script it makes a record directory holding two files:

  meta.txt   "key: value" lines: script, command (the exact command line) and cwd (where it
             was typed), commit ("+dirty" and the number of changed paths when the checkout
             has changes; records under docs/results/raw do not count), cpu (the model name in
             /proc/cpuinfo), nproc, kernel, host, start (UTC) and load_start (the load
             average), settings (the variables in the environment that change what is
             measured: BAGUA_*, NCCL_*, GLOO_*, OMP_NUM_THREADS; "none" when none is set),
             torch and open_mpi (the versions of the peers, where the script runs them),
             what else the script adds (e.g. backend), columns and units (of raw.csv); and
             when the script ends: end, load_end, rows and status (its exit status). A
             record without "end:" is of a run that was killed.
  raw.csv    one row per individual run (per message size, where one run times several):
             seq (the order the runs happened in), time (UTC, when the run ended), variant,
             rep (the repetition index), the script's own value columns, units (each value
             column's unit, "name=unit;..."), and load1, load5, load15 (the load average when
             the run ended).

Where the record goes: the directory named by the environment variable BENCH_RECORD_DIR, or by
a script's --record-dir DIR option, which sets that variable (scripts whose arguments are
positional take the variable only); a relative one is taken from where the command was typed.
Without either it is docs/results/raw/<UTC date>-<script>-<short commit>/ in this checkout,
with "-2", "-3", ... appended when that directory exists already. A directory that already holds
a raw.csv is refused: two runs never share a record. A script that re-runs itself inside an
emulated cluster (the network-namespace benchmarks) adds its rows to the record the outer run
opened, which it finds through BENCH_RECORD_DIR. When the script runs under sudo, the record is
handed to the user who ran sudo, so that it can be committed without root.

Tables print a figure over repeated runs as "median [min-max]". A median of fewer than 3 runs
says little, so stat() does not print one: it lists the runs and says how many there were.

Shell scripts source bench/record.sh, which calls this file's command line:

  record.py open SCRIPT [--columns "name:unit ..."] [--peers "torch ompi"] [--python PY]
                 [--cwd DIR] -- ARGV...          prints the record directory
  record.py row DIR VARIANT REP VALUE...
  record.py close DIR STATUS
  record.py stat SPEC VALUE...                   "median [min-max]" or the runs themselves
  record.py median VALUE...                      the median (the mean of fewer than 3 runs)
  record.py runs-note N                          a warning line when N < 3, else nothing
  record.py default-dir SCRIPT                   where the record would go, without making it

Python scripts import it (the directory of this file on sys.path) and use open_record(),
Record.row(), Record.close(), stat() and median().
"""

import csv
import datetime
import os
import shlex
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RAW_ROOT = os.path.join("docs", "results", "raw")
# The fewest runs whose median a table prints.
MIN_RUNS = 3


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"


def _loadavg():
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[:3]
    except OSError:
        return ["?", "?", "?"]


def _git(*args):
    """Runs git in this checkout. safe.directory lets root read a checkout another user owns
    (the network-namespace benchmarks run as root); without it git refuses and the record
    would say "unknown"."""
    try:
        return subprocess.run(["git", "-c", "safe.directory=*", "-C", ROOT, *args],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def commit():
    """(full hash, short hash, number of changed paths). The records themselves
    (docs/results/raw) do not count as changes: they are the output, not the code measured."""
    full = _git("rev-parse", "HEAD") or "unknown"
    short = _git("rev-parse", "--short", "HEAD") or "unknown"
    status = _git("status", "--porcelain", "--", ".", ":(exclude)" + RAW_ROOT)
    return full, short, len([line for line in status.splitlines() if line.strip()])


def default_dir(script):
    """The record directory a run of SCRIPT gets when the user names none."""
    day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    base = os.path.join(ROOT, RAW_ROOT, f"{day}-{script}-{commit()[1]}")
    path, k = base, 1
    while os.path.exists(path):
        k += 1
        path = f"{base}-{k}"
    return path


# Environment variables that change a measurement (a run with BAGUA_NET_NSTREAMS=1 is another
# experiment than one without, though its command line is the same).
SETTING_PREFIXES = ("BAGUA_", "NCCL_", "GLOO_")
SETTING_NAMES = ("OMP_NUM_THREADS",)
NOT_SETTINGS = ("BENCH_RECORD_DIR",)


def _settings():
    found = sorted(f"{k}={shlex.quote(v)}" for k, v in os.environ.items()
                   if (k.startswith(SETTING_PREFIXES) or k in SETTING_NAMES)
                   and k not in NOT_SETTINGS)
    return " ".join(found) or "none"


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def _nproc():
    out = shutil.which("nproc") and subprocess.run(["nproc"], capture_output=True, text=True).stdout
    return (out or str(os.cpu_count())).strip()


def _torch_version(python):
    try:
        r = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return "not found"
    return f"{r.stdout.strip()} ({python})" if r.returncode == 0 else f"not importable by {python}"


def _ompi_version():
    if not shutil.which("mpirun"):
        return "not installed"
    r = subprocess.run(["mpirun", "--allow-run-as-root", "--version"], capture_output=True,
                       text=True, timeout=60)
    first = (r.stdout or r.stderr).strip().splitlines()
    return first[0] if first else "unknown"


def _parse_columns(spec):
    """["name:unit", "name"] -> [(name, unit or "")]."""
    cols = []
    for c in spec:
        name, _, unit = c.partition(":")
        if not name or not name.replace("_", "").isalnum():
            raise ValueError(f"record: bad column name {c!r} (letters, digits and _ only)")
        cols.append((name, unit))
    return cols


FIXED_HEAD = ["seq", "time", "variant", "rep"]
FIXED_TAIL = ["units", "load1", "load5", "load15"]


class Record:
    """An open record: its directory and the value columns of its raw.csv."""

    def __init__(self, path, columns):
        self.dir = path
        self.columns = columns
        self.units = ";".join(f"{n}={u}" for n, u in columns if u)
        self._closed = False

    def row(self, variant, rep, *values):
        """Appends one run: its variant, repetition index and one value per column."""
        if len(values) != len(self.columns):
            raise ValueError(f"record: {len(values)} values for the {len(self.columns)} "
                             f"columns {[n for n, _ in self.columns]}")
        path = os.path.join(self.dir, "raw.csv")
        with open(path) as f:
            seq = sum(1 for _ in f) - 1
        with open(path, "a", newline="") as f:
            csv.writer(f, lineterminator="\n").writerow(
                [seq, _now(), variant, rep, *["" if v is None else v for v in values],
                 self.units, *_loadavg()])

    def close(self, status=0):
        """Writes the end of the run into meta.txt: its time, the load average, the status."""
        if self._closed:
            return
        self._closed = True
        with open(os.path.join(self.dir, "raw.csv")) as f:
            runs = sum(1 for _ in f) - 1
        with open(os.path.join(self.dir, "meta.txt"), "a") as f:
            f.write(f"end: {_now()}\nload_end: {' '.join(_loadavg())}\n"
                    f"rows: {runs}\nstatus: exit {status}\n")
        _give_to_sudo_user(self.dir)


def _give_to_sudo_user(path):
    """Hands a record made as root under sudo to the user who ran sudo."""
    uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
    if os.geteuid() != 0 or not uid or not uid.isdigit():
        return
    gid = int(gid) if gid and gid.isdigit() else -1
    for d, _, files in os.walk(path):
        for p in [d] + [os.path.join(d, f) for f in files]:
            try:
                os.chown(p, int(uid), gid)
            except OSError:
                pass


def open_record(script, argv, columns, peers=(), python="/usr/bin/python3", cwd=None,
                path=None, extra=None):
    """Makes the record directory of one run of SCRIPT (ARGV: its command line, the script
    first) and writes meta.txt and the header of raw.csv. COLUMNS: "name" or "name:unit" per
    value. PEERS: "torch" and/or "ompi", whose versions go into meta.txt, torch's as PYTHON
    imports it. PATH: the directory, when the script has a --record-dir option and it was
    given. EXTRA: more "key: value" lines for meta.txt (a dict)."""
    cols = _parse_columns(columns)
    full, short, changed = commit()
    path = path or os.environ.get("BENCH_RECORD_DIR") or default_dir(script)
    # A relative directory is taken from where the command was typed, also when the script
    # has changed directory since.
    path = os.path.abspath(os.path.join(cwd or os.getcwd(), path))
    if os.path.exists(os.path.join(path, "raw.csv")):
        raise FileExistsError(f"record: {path} already holds a record; name another directory")
    os.makedirs(path, exist_ok=True)
    lines = [
        ("script", script),
        ("command", shlex.join(argv)),
        ("cwd", cwd or os.getcwd()),
        ("commit", full + (f" +dirty ({changed} changed paths)" if changed else "")),
        ("short_commit", short + ("+dirty" if changed else "")),
        ("cpu", _cpu_model()),
        ("nproc", _nproc()),
        ("kernel", " ".join(os.uname()[i] for i in (0, 2))),
        ("host", os.uname()[1]),
        ("start", _now()),
        ("load_start", " ".join(_loadavg())),
        ("settings", _settings()),
    ]
    for p in peers:
        if p == "torch":
            lines.append(("torch", _torch_version(python)))
        elif p == "ompi":
            lines.append(("open_mpi", _ompi_version()))
        else:
            raise ValueError(f"record: unknown peer {p!r} (torch, ompi)")
    lines.extend((k, v) for k, v in (extra or {}).items())
    lines.append(("columns", " ".join(FIXED_HEAD + [n for n, _ in cols] + FIXED_TAIL)))
    lines.append(("units", ";".join(f"{n}={u}" for n, u in cols if u)))
    with open(os.path.join(path, "meta.txt"), "w") as f:
        f.writelines(f"{k}: {v}\n" for k, v in lines)
    with open(os.path.join(path, "raw.csv"), "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerow(FIXED_HEAD + [n for n, _ in cols] + FIXED_TAIL)
    return Record(path, cols)


def attach(path=None):
    """The record an outer run of the same script opened (BENCH_RECORD_DIR), to add rows to."""
    path = path or os.environ.get("BENCH_RECORD_DIR")
    meta = os.path.join(path or "", "meta.txt")
    if not path or not os.path.exists(meta):
        raise FileNotFoundError(f"record: no open record in {path!r}")
    fields = {}
    with open(meta) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition(": ")
            fields.setdefault(k, v)
    names = fields["columns"].split()[len(FIXED_HEAD):-len(FIXED_TAIL)]
    units = dict(u.split("=", 1) for u in fields.get("units", "").split(";") if "=" in u)
    return Record(path, [(n, units.get(n, "")) for n in names])


def numbers(values):
    """The values that are numbers; "n/a", "fail" and empty strings are left out."""
    out = []
    for v in values:
        try:
            out.append(float(v))
        except (TypeError, ValueError):
            pass
    return out


def median(values):
    """The median of the numeric values; with fewer than MIN_RUNS of them it is their mean,
    which is what a median of 1 or 2 values is anyway. None when there is none. Use it for
    figures derived from several variants (ratios, differences), and say with runs_note()
    when the runs were too few."""
    nums = numbers(values)
    return statistics.median(nums) if nums else None


def stat(values, spec=".3g"):
    """"median [min-max]" of the numeric values when there are at least MIN_RUNS of them;
    otherwise every value and how many runs there were, so that it cannot be read as a
    median. Values that are not numbers are counted as failed runs."""
    nums = numbers(values)
    failed = len([v for v in values if str(v) not in ("", "n/a")]) - len(nums)
    f = lambda x: format(x, spec)
    if len(nums) >= MIN_RUNS:
        out = f"{f(statistics.median(nums))} [{f(min(nums))}-{f(max(nums))}]"
    elif len(nums) == 2 and f(nums[0]) == f(nums[1]):
        out = f"{f(nums[0])} (2 equal runs)"
    elif nums:
        out = ", ".join(f(x) for x in nums) + f" ({len(nums)} run{'s' if len(nums) > 1 else ''})"
    else:
        out = "n/a"
    return out + (f" ({failed} failed)" if failed > 0 else "")


def runs_note(n):
    """A line for above a table whose cells come from N runs each, when N is too few."""
    n = int(n)
    if n >= MIN_RUNS:
        return ""
    return (f"note: {n} run{'s' if n != 1 else ''} per cell, fewer than {MIN_RUNS}: cells list "
            f"every run instead of a median, and derived columns use the mean of the runs")


def _cli(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "open":
        if "--" not in args:
            print("record.py open: the command line follows --", file=sys.stderr)
            return 2
        cut = args.index("--")
        opts, script_argv = args[:cut], args[cut + 1:]
        import argparse
        ap = argparse.ArgumentParser(prog="record.py open")
        ap.add_argument("script")
        ap.add_argument("--columns", default="")
        ap.add_argument("--peers", default="")
        ap.add_argument("--python", default="/usr/bin/python3")
        ap.add_argument("--cwd", default=None)
        o = ap.parse_args(opts)
        rec = open_record(o.script, script_argv, o.columns.split(), o.peers.split(),
                          o.python, o.cwd)
        print(rec.dir)
    elif cmd == "row":
        attach(args[0]).row(*args[1:])
    elif cmd == "close":
        attach(args[0]).close(args[1] if len(args) > 1 else 0)
    elif cmd == "stat":
        print(stat(args[1:], args[0]))
    elif cmd == "median":
        m = median(args)
        print("" if m is None else m)
    elif cmd == "runs-note":
        note = runs_note(args[0])
        if note:
            print(note)
    elif cmd == "default-dir":
        print(default_dir(args[0]))
    else:
        print(f"record.py: unknown command {cmd!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(_cli(sys.argv[1:]))
    except (ValueError, OSError) as e:
        print(e, file=sys.stderr)
        sys.exit(2)
