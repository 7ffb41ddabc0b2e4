#!/usr/bin/env bash
# The data-parallel core reaches its tuners (the advisor, autotuning) only through their table
# (ddp/tune.h): no file of ddp/ outside ddp/tune/ includes a tuner's header or calls a tuner's
# function by name. Prints what it found on failure.
set -euo pipefail
root=${1:?usage: ddp_core_no_tuner.sh REPO_ROOT}
cd "$root/ddp"
hits=$(grep -nE 'bagua__(autotune|ddp_advise|adv)_[a-z_]+\(|bagua__ddp_auto_pick\(|"(tune/)?(autotune|advise|advisor_model)\.h"' \
  --include='*.c' --include='*.h' -r . | grep -v '^\./tune/' || true)
if [ -n "$hits" ]; then
  echo "FAIL: the ddp core names a tuner (use the hooks of ddp/tune.h):"
  echo "$hits"
  exit 1
fi
echo "ddp core: tuners reached through ddp/tune.h only"
