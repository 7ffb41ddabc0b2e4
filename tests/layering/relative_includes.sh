#!/usr/bin/env bash
# Include roots cannot stop `#include "../../comm/x.h"`: this check does. Every relative
# include in a library or tool folder must resolve inside the same top-level folder.
# usage: relative_includes.sh SOURCE_ROOT
set -euo pipefail
cd "$1"
bad=0 n=0
while IFS=: read -r file _ inc; do
  rel=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$inc")
  target=$(realpath -m "$(dirname "$file")/$rel")
  top=${file%%/*}
  n=$((n + 1))
  case "$target" in
    "$PWD/$top"/*) ;;
    *)
      echo "FAIL: $file includes $rel, outside $top/"
      bad=1
      ;;
  esac
done < <(grep -rnE '^#include "\.\./' common kernels comm ddp loader agent launcher || true)
echo "$n relative includes checked"
exit $bad
