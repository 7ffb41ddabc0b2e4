#!/usr/bin/env bash
# Lints the project's Python: pyflakes3, then pycodestyle with setup.cfg's settings (100
# columns; the ignores are explained there), over every .py file under python/, bench/,
# scripts/, tests/ and examples/. Exits non-zero if either reports anything. A tool that is not
# installed is skipped with a message, not failed (scripts/install-deps.sh installs both).
# scripts/test.sh runs this first; it takes seconds (docs/testing.md).
#
# pyflakes3 has no `# noqa` of its own, so its findings on a line marked `# noqa` (bare, or
# naming an F code, as flake8 reads it) are dropped here: the tree marks its re-exports that way.
set -uo pipefail
cd "$(dirname "$0")/.."
DIRS=(python bench scripts tests examples)
mapfile -t files < <(find "${DIRS[@]}" -name __pycache__ -prune -o -name '*.py' -print | sort)
status=0

if command -v pyflakes3 >/dev/null; then
  echo "=== lint: pyflakes3 (${#files[@]} files)"
  err=$(mktemp)
  # Dropping a finding reads its source line: "path:line:col: message" (or "path:line: ...").
  out=$(pyflakes3 "${files[@]}" 2>"$err" | python3 -c '
import re, sys
noqa = re.compile(r"#\s*noqa(?!\s*:)|#\s*noqa\s*:\s*(?:[A-Z]+[0-9]+[\s,]*)*F[0-9]*\b", re.I)
for finding in sys.stdin:
    m = re.match(r"(.+?):([0-9]+):", finding)
    if m:
        try:
            with open(m.group(1), encoding="utf-8") as src:
                line = src.read().splitlines()[int(m.group(2)) - 1]
        except (OSError, IndexError, UnicodeDecodeError):
            line = ""
        if noqa.search(line):
            continue
    sys.stdout.write(finding)
')
  if [ -n "$out" ] || [ -s "$err" ]; then
    [ -n "$out" ] && printf '%s\n' "$out"
    cat "$err"
    echo "=== lint: pyflakes3 reported $(printf '%s' "$out" | grep -c . ) finding(s)"
    status=1
  fi
  rm -f "$err"
else
  echo "=== lint: pyflakes3 is not installed (Debian package pyflakes3): skipped"
fi

if command -v pycodestyle >/dev/null; then
  echo "=== lint: pycodestyle (${#files[@]} files, setup.cfg)"
  if ! out=$(pycodestyle "${files[@]}" 2>&1); then
    printf '%s\n' "$out"
    echo "=== lint: pycodestyle reported $(printf '%s' "$out" | grep -c .) finding(s)"
    status=1
  fi
else
  echo "=== lint: pycodestyle is not installed (Debian package pycodestyle): skipped"
fi
exit $status
