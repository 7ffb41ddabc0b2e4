#!/bin/sh
# Runs a tool for help2man (cmake/BaguaManPages.cmake): help2man-usage.sh TOOL ARGS...
#
# help2man takes the SYNOPSIS from a first line "Usage: PROG ..." and "  or: PROG ..." lines
# after it. The tools write "usage:" or "Usage:", wrap a long form over several indented lines
# and start each further form with the program's name, so --help's first paragraph is put
# into that shape here; everything else, and every other option, passes through unchanged.
set -eu
tool=${1:?usage: help2man-usage.sh TOOL ARGS...}
shift
if [ "${1:-}" != "--help" ]; then
  exec "$tool" "$@"
fi
out=$("$tool" "$@")
printf '%s\n' "$out" | awk '
  function flush(  i) {
    for (i = 1; i <= n; i++) print (i == 1 ? "Usage: " : "  or:  ") form[i]
    n = 0
  }
  NR == 1 && /^[Uu]sage: / {
    sub(/^[Uu]sage: +/, "")
    form[n = 1] = $0
    split($0, w, " ")
    prog = w[1]
    inusage = 1
    next
  }
  inusage && /^[ \t]*$/ { flush(); inusage = 0 }
  inusage {
    line = $0
    sub(/^[ \t]+/, "", line)
    if (index(line, prog " ") == 1 || line == prog) form[++n] = line
    else form[n] = form[n] " " line
    next
  }
  { print }
  END { if (inusage) flush() }
'
