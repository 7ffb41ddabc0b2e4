# shellcheck shell=bash
# bench/record.sh: the record of a benchmark run, for the shell scripts under bench/.
#
# Sourced, not run. The work is done by bench/record.py, whose header describes the record: a
# directory with meta.txt (command line, commit, machine, load average at the start and at the
# end, the peers' versions) and raw.csv (one row per individual run, with the load average at
# that moment). The directory is $BENCH_RECORD_DIR, which a script's --record-dir DIR sets,
# and otherwise docs/results/raw/<UTC date>-<script>-<short commit>/.
#
# In a script:
#   . "$(dirname "${BASH_SOURCE[0]}")/record.sh"
#   record_argv "$0" "$@"            first: keeps the command line before the options are read
#   ...  --record-dir) export BENCH_RECORD_DIR=$2 ...
#   record_open NAME "PEERS" COLUMN...   PEERS: "" or "torch" "ompi" "torch ompi"; a COLUMN is
#                                        "name" or "name:unit"; sets RECORD_DIR. The torch
#                                        version is that of $RECORD_TORCH_PYTHON (default
#                                        /usr/bin/python3)
#   trap 'record_close $?' EXIT      (or call record_close from the script's own EXIT trap)
#   record_row VARIANT REP VALUE...  one row per run, one VALUE per COLUMN
#   record_stat SPEC VALUE...        "median [min-max]" (SPEC: a Python format spec, e.g. .2f);
#                                    with fewer than 3 values, the values and their count
#   record_median VALUE...           for ratios and differences between variants
#   record_runs_note N               a warning line for above a table of N runs per cell
# A script that re-runs itself inside an emulated cluster calls record_attach there instead
# of record_open: it adds rows to the record of the outer run (BENCH_RECORD_DIR is exported).

RECORD_PYTHON=/usr/bin/python3
RECORD_PY=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/record.py
RECORD_DIR=
RECORD_ARGV=()
RECORD_CWD=$PWD

record_argv() {
  RECORD_ARGV=("$@")
  RECORD_CWD=$PWD
}

# A record that cannot be made stops the script before it measures anything: a run without
# its record is what this helper exists to prevent.
record_open() {
  local name=$1 peers=$2
  shift 2
  RECORD_DIR=$("$RECORD_PYTHON" "$RECORD_PY" open "$name" --columns "$*" --peers "$peers" \
    --python "${RECORD_TORCH_PYTHON:-$RECORD_PYTHON}" --cwd "$RECORD_CWD" \
    -- "${RECORD_ARGV[@]}") || {
    echo "$name: cannot make the record of this run (above); nothing was measured" >&2
    exit 2
  }
  export BENCH_RECORD_DIR=$RECORD_DIR
  echo "$name: record in $RECORD_DIR" >&2
}

record_attach() {
  RECORD_DIR=${BENCH_RECORD_DIR:?record_attach: no BENCH_RECORD_DIR from the outer run}
  [ -f "$RECORD_DIR/meta.txt" ] || { echo "record_attach: no record in $RECORD_DIR" >&2; exit 2; }
}

record_row() {
  "$RECORD_PYTHON" "$RECORD_PY" row "$RECORD_DIR" "$@"
}

# Idempotent, so that both an explicit call and an EXIT trap may run it; it returns the status
# it was given, so that `trap 'record_close $?' EXIT` keeps the script's own.
record_close() {
  local rc=${1:-0}
  if [ -n "$RECORD_DIR" ] && [ -z "${RECORD_CLOSED:-}" ]; then
    RECORD_CLOSED=1
    "$RECORD_PYTHON" "$RECORD_PY" close "$RECORD_DIR" "$rc" &&
      echo "record: $RECORD_DIR" >&2
  fi
  return "$rc"
}

record_stat() { "$RECORD_PYTHON" "$RECORD_PY" stat "$@"; }
record_median() { "$RECORD_PYTHON" "$RECORD_PY" median "$@"; }
record_runs_note() { "$RECORD_PYTHON" "$RECORD_PY" runs-note "$@"; }
