#!/usr/bin/env bash
# Builds the Python package (bagua._C and the pure-Python files) for another interpreter than
# the one CMake found, from an existing build's static library:
#
#   scripts/build-py-ext.sh BUILD_DIR PYTHON OUT_DIR
#
# OUT_DIR/bagua is then importable with PYTHONPATH=OUT_DIR. This is what a machine needs whose
# torch lives in its own interpreter (a virtual environment's Python 3.12, say) while the
# library was built elsewhere, as on a lent GPU machine that has the CUDA toolkit and torch but
# not the development packages of libcurl and cJSON that a full CMake configure requires: the
# carried BUILD_DIR/libbagua.a is linked with the interpreter's own headers, and the shared
# libraries it needs are found the way the loader finds them (LD_LIBRARY_PATH may name a
# directory of carried ones). Prints the path of the built module; exits non-zero with the
# reason when the interpreter has no headers or the link fails.
set -euo pipefail
BUILD=$(cd "${1:?usage: build-py-ext.sh BUILD_DIR PYTHON OUT_DIR}" && pwd)
PY=${2:?usage: build-py-ext.sh BUILD_DIR PYTHON OUT_DIR}
OUT=${3:?usage: build-py-ext.sh BUILD_DIR PYTHON OUT_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CC=${CC:-cc}

inc=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
suffix=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
if [ ! -f "$inc/Python.h" ]; then
  echo "build-py-ext.sh: $PY has no Python.h under $inc (install its development headers)" >&2
  exit 2
fi
if [ ! -f "$BUILD/libbagua.a" ]; then
  echo "build-py-ext.sh: $BUILD/libbagua.a is missing: build the library first" >&2
  exit 2
fi

# The libraries libbagua.a needs: CUDA and NCCL when it was built with them (its NCCL
# objects refer to nccl* symbols), and always libcurl and cJSON. Each is linked by name when
# the linker finds a development link, else by the full path of the runtime library the
# loader would use (a machine without the -dev packages has only those). A pip-installed
# torch brings its own CUDA runtime and NCCL under site-packages/nvidia/*/lib, which neither
# the linker nor the loader searches: those folders are searched too and recorded as the
# module's run path, so that importing bagua does not depend on importing torch first.
pydirs=$("$PY" -c 'import glob, site
dirs = []
for d in site.getsitepackages():
    dirs += glob.glob(d + "/nvidia/*/lib")
print(" ".join(dirs))' 2>/dev/null || true)
rpath=()
lib() { # NAME SONAME_PATTERN
  if "$CC" -shared -o /dev/null -x c /dev/null "-l$1" 2>/dev/null; then
    echo "-l$1"
    return
  fi
  local p
  p=$( (ldconfig -p 2>/dev/null | awk -v pat="$2" '$1 ~ pat {print $NF; exit}'); true)
  local llp=${LD_LIBRARY_PATH:-}
  for d in ${llp//:/ } $pydirs /usr/local/cuda/lib64 /usr/local/cuda/lib; do
    [ -n "$p" ] && break
    p=$(ls "$d"/$2* 2>/dev/null | head -1 || true)
  done
  if [ -z "$p" ]; then
    echo "build-py-ext.sh: no lib$1 to link (pattern $2)" >&2
    exit 2
  fi
  echo "$p"
}
libs=()
need=(curl:libcurl.so cjson:libcjson.so)
if nm "$BUILD/libbagua.a" 2>/dev/null | grep ' U ncclCommInitRankConfig' >/dev/null; then
  need=(cudart:libcudart.so nccl:libnccl.so "${need[@]}")
fi
for n in "${need[@]}"; do
  l=$(lib "${n%%:*}" "${n#*:}") || exit 2 # lib() said which one is missing
  libs+=("$l")
  case $l in /*) rpath+=("-Wl,-rpath,$(dirname "$l")") ;; esac
done

rm -rf "$OUT/bagua"
mkdir -p "$OUT"
cp -r "$ROOT/python/bagua" "$OUT/bagua"
"$CC" -O2 -shared -fPIC -std=gnu11 -I"$inc" -I"$ROOT/include" -I"$BUILD/include" \
  "$ROOT"/python/src/*.c -o "$OUT/bagua/_C$suffix" \
  "$BUILD/libbagua.a" "${libs[@]}" "${rpath[@]}" \
  -lpthread -lrt -lm
echo "$OUT/bagua/_C$suffix"
