#!/usr/bin/env bash
# Builds the Debian packages of Bagua-C and checks them from their installed files alone
# (docs/packaging.md, "What package-test.sh checks"):
#
#   1. installs what the build and the checks need from Debian packages when it is missing
#      (the debian/control Build-Depends through apt-get build-dep, etcd-server, python3-torch);
#   2. builds the five packages with dpkg-buildpackage -us -uc -b, from a copy of this tree
#      (tracked files and untracked ones git does not ignore) in a temporary directory, so the
#      work tree gets no build output;
#   3. checks each package's files and dependencies, then unpacks every .deb with dpkg-deb -x
#      into a fresh directory ROOT, which stands for /: nothing is installed on the system and
#      the dpkg database is not touched;
#   4. runs, with PATH, LD_LIBRARY_PATH and PYTHONPATH pointing into ROOT only:
#      bagua-launch --version and the man pages; /usr/bin/python3 -c 'import bagua.torch_api';
#      a program built with `pkg-config --cflags --libs bagua`, and one linked with libbagua.a
#      through `pkg-config --static`; a CMake project that does find_package(Bagua) and links
#      Bagua::bagua; two-worker jobs under bagua-launch --nproc-per-node 2 of that project's
#      allreduce program, of the libbagua.a one, and of the Python front end's allreduce; the
#      NCCL plugin's exported tables.
#
# Every check says what it found; the first failure stops the run with "package-test.sh:
# FAILED: STEP: why" and keeps the temporary directory (its logs) for inspection.
#
# usage: scripts/package-test.sh [--keep]     (--keep: keep the temporary directory on success)
# The build uses DEB_BUILD_OPTIONS's parallel=N when set, else parallel=$(nproc).
set -euo pipefail
ROOT_SRC=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
keep=0
for a in "$@"; do
  case $a in
    --keep) keep=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "package-test.sh: unknown argument \"$a\"; accepted: --keep, --help" >&2; exit 2 ;;
  esac
done

t_start=$(date +%s)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/bagua-package-test.XXXXXX")
ok=0
cleanup() {
  if [ $ok = 1 ] && [ $keep = 0 ]; then
    rm -rf "$WORK"
  else
    echo "package-test.sh: kept $WORK (logs: $WORK/*.log)" >&2
  fi
}
trap cleanup EXIT

step=""
step_t0=0
begin() {
  step=$1
  step_t0=$(date +%s)
  echo "== $step"
}
done_step() { echo "   ($(($(date +%s) - step_t0)) s)"; }
fail() {
  echo "package-test.sh: FAILED: $step: $*" >&2
  exit 1
}
# run LOG CMD...: runs CMD with its output in LOG; on failure, shows LOG's end and fails.
run() {
  local log=$1
  shift
  local rc=0
  "$@" >"$log" 2>&1 || rc=$?
  if [ $rc != 0 ]; then
    tail -n 40 "$log" >&2
    fail "$* (exit status $rc; full output in $log)"
  fi
}

SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || SUDO=missing
  [ "$SUDO" = missing ] || SUDO=sudo
fi
apt_updated=0
apt_get() { # apt-get ARGS...: as root (or through sudo), after one apt-get update
  [ "$SUDO" = missing ] && fail "apt-get $*: not root and no sudo; install those packages first"
  if [ $apt_updated = 0 ]; then
    run "$WORK/apt-update.log" $SUDO apt-get update -qq
    apt_updated=1
  fi
  run "$WORK/apt.log" env DEBIAN_FRONTEND=noninteractive $SUDO apt-get "$@"
}
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# ---- 1. Dependencies ----
begin "dependencies"
SRC=$WORK/src
mkdir -p "$SRC"
# The tree as git sees it, including uncommitted changes, without build directories.
if git -C "$ROOT_SRC" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$ROOT_SRC" && git ls-files -z --cached --others --exclude-standard |
     while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
     tar --null -T - -cf -) | tar -xf - -C "$SRC"
else
  (cd "$ROOT_SRC" && tar --exclude='./build*' --exclude=./out --exclude=./obj-* -cf - .) |
    tar -xf - -C "$SRC"
fi
[ -f "$SRC/debian/control" ] || fail "no debian/control in $ROOT_SRC"
installed dpkg-dev || apt_get install -y -qq --no-install-recommends dpkg-dev
if ! (cd "$SRC" && dpkg-checkbuilddeps) >"$WORK/builddeps.log" 2>&1; then
  echo "   $(cat "$WORK/builddeps.log")"
  apt_get build-dep -y -qq --no-install-recommends "$SRC"
  (cd "$SRC" && dpkg-checkbuilddeps) >"$WORK/builddeps.log" 2>&1 ||
    fail "apt-get build-dep left build dependencies unmet: $(cat "$WORK/builddeps.log")"
fi
# What the checks run besides the packages: the tools' private etcd, torch for the Python
# front end, a C compiler and CMake for the consumer programs (already build dependencies).
need=()
for p in etcd-server python3-torch; do installed "$p" || need+=("$p"); done
[ ${#need[@]} -eq 0 ] || apt_get install -y -qq --no-install-recommends "${need[@]}"
echo "   build dependencies and etcd-server, python3-torch present"
done_step

# ---- 2. Build ----
begin "dpkg-buildpackage -us -uc -b"
opts=${DEB_BUILD_OPTIONS:-}
case " $opts " in *" parallel="*) ;; *) opts="$opts parallel=$(nproc)" ;; esac
# nocheck: the package build runs no tests anyway (debian/rules); noautodbgsym: the -dbgsym
# packages are not checked here and take a third of dh's time.
run "$WORK/build.log" env -C "$SRC" DEB_BUILD_OPTIONS="nocheck noautodbgsym $opts" \
  dpkg-buildpackage -us -uc -b
version=$(cd "$SRC" && dpkg-parsechangelog -SVersion)
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
PACKAGES=(libbagua0 libbagua-dev bagua-tools python3-bagua libnccl-net-bagua)
for p in "${PACKAGES[@]}"; do
  deb=$WORK/${p}_${version}_${arch}.deb
  [ -f "$deb" ] || fail "$p was not built: no $deb (see $WORK/build.log)"
  printf '   %-40s %8s bytes\n' "$(basename "$deb")" "$(stat -c %s "$deb")"
done
done_step

# ---- 3. Package contents and relations ----
begin "package contents"
has() { # PACKAGE PATH-PATTERN: the package holds a file matching the (grep -E) pattern
  dpkg-deb -c "$WORK/${1}_${version}_${arch}.deb" | awk '{print $6}' | grep -Eq "^\./$2\$" ||
    fail "$1 has no file matching /$2"
}
has libbagua0 "usr/lib/$MA/libbagua\.so\.0"
has libbagua-dev "usr/lib/$MA/libbagua\.so"
has libbagua-dev "usr/lib/$MA/libbagua\.a"
has libbagua-dev "usr/include/bagua/bagua\.h"
has libbagua-dev "usr/lib/$MA/pkgconfig/bagua\.pc"
has libbagua-dev "usr/lib/$MA/cmake/Bagua/BaguaConfig\.cmake"
has libbagua-dev "usr/lib/$MA/cmake/Bagua/BaguaConfigVersion\.cmake"
has libbagua-dev "usr/lib/$MA/cmake/Bagua/BaguaTargets\.cmake"
has bagua-tools "usr/bin/bagua-launch"
has bagua-tools "usr/bin/bagua-agent"
has bagua-tools "usr/share/man/man1/bagua-launch\.1\.gz"
has bagua-tools "usr/share/man/man1/bagua-agent\.1\.gz"
has python3-bagua "usr/lib/python3/dist-packages/bagua/__init__\.py"
has python3-bagua "usr/lib/python3/dist-packages/bagua/_C\.cpython-[^/]*\.so"
has python3-bagua "usr/bin/baguarun"
has libnccl-net-bagua "usr/lib/$MA/libnccl-net-bagua\.so"
depends() { # PACKAGE DEPENDENCY: the package's Depends names the dependency
  dpkg-deb -f "$WORK/${1}_${version}_${arch}.deb" Depends | sed 's/[,|]/\n/g' |
    sed 's/^ *//; s/[ (].*//' | grep -qx "$2" || fail "$1 does not depend on $2"
}
depends bagua-tools etcd-server
depends python3-bagua python3
depends python3-bagua python3-torch
depends python3-bagua libbagua0
depends libbagua-dev libbagua0
echo "   every package holds its files; Depends as debian/control says"
ROOT=$WORK/root
mkdir -p "$ROOT"
for p in "${PACKAGES[@]}"; do dpkg-deb -x "$WORK/${p}_${version}_${arch}.deb" "$ROOT"; done
echo "   unpacked into $ROOT"
done_step

# Everything below runs from ROOT only. PYTHONPATH and PATH are set, not extended, so that a
# build tree's bagua (scripts/setup.sh puts one on sys.path) or an installed bagua-launch
# cannot stand in for the packaged files; each check also verifies where its files came from.
LIB=$ROOT/usr/lib/$MA
SITE=$ROOT/usr/lib/python3/dist-packages
export LD_LIBRARY_PATH=$LIB
export PYTHONPATH=$SITE
export PATH=$ROOT/usr/bin:/usr/sbin:/usr/bin:/sbin:/bin
want=$(sed -n 's/^#define BAGUA_VERSION_\(MAJOR\|MINOR\|PATCH\) *\([0-9][0-9]*\)$/\2/p' \
         "$ROOT/usr/include/bagua/version.h" | paste -sd. -)

# ---- 4. The tools ----
begin "bagua-launch, bagua-agent, man pages"
for t in bagua-launch bagua-agent; do
  out=$("$ROOT/usr/bin/$t" --version) || fail "$t --version exited with status $?"
  [ "$out" = "$t $want" ] || fail "$t --version printed \"$out\", expected \"$t $want\""
  page=$ROOT/usr/share/man/man1/$t.1.gz
  zcat "$page" | grep -q "^\.TH \"\{0,1\}${t^^}" || fail "$page is not the man page of $t"
  zcat "$page" | grep -qF -- '\-\-help' || fail "$page does not list --help"
  echo "   $out; $t(1) present"
done
done_step

# ---- 5. The Python package ----
begin "/usr/bin/python3 -c 'import bagua.torch_api'"
out=$(/usr/bin/python3 -c '
import bagua, bagua._C, bagua.torch_api
print(bagua.__file__)
print(bagua._C.__file__)
print(bagua.__version__)
print(next(l.split()[-1] for l in open("/proc/self/maps") if "libbagua.so" in l))
' 2>"$WORK/python.log") || { tail "$WORK/python.log" >&2; fail "the import failed (log: $WORK/python.log)"; }
mapfile -t py <<<"$out"
[ "${py[0]}" = "$SITE/bagua/__init__.py" ] || fail "bagua came from ${py[0]}, not from $SITE"
case ${py[1]} in "$SITE"/bagua/_C.cpython-*.so) ;; *) fail "bagua._C came from ${py[1]}" ;; esac
[ "${py[2]}" = "$want" ] || fail "bagua.__version__ is ${py[2]}, expected $want"
[ "$(readlink -f "${py[3]}")" = "$(readlink -f "$LIB/libbagua.so.0")" ] ||
  fail "bagua._C loaded ${py[3]}, not the packaged $LIB/libbagua.so.0"
echo "   bagua $want from $SITE; bagua._C loads $LIB/libbagua.so.0"
done_step

# A C program that names where its libbagua came from. As the CMake consumer it is also the
# worker of the two-worker job: every rank allreduces 65536 floats and checks the sums.
CON=$WORK/consumer
mkdir -p "$CON"
cat >"$CON/worker.c" <<'EOF'
#define _GNU_SOURCE
#include <bagua/bagua.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

/* The file libbagua was loaded from; a static link exports no symbol to look up. */
static const char *where(void) {
  Dl_info info;
  void *sym = dlsym(RTLD_DEFAULT, "bagua_allreduce");
  return sym && dladdr(sym, &info) ? info.dli_fname : "(linked in statically)";
}

int main(int argc, char **argv) {
  if (argc > 1) { /* --where: print the library's file and stop */
    printf("%s %s\n", BAGUA_VERSION_STRING, where());
    return 0;
  }
  bagua_comm_t *comm;
  bagua_status_t st = bagua_comm_create(NULL, &comm);
  if (st != BAGUA_OK) {
    fprintf(stderr, "worker: bagua_comm_create: %s (%s)\n", bagua_strerror(st), bagua_last_error());
    return 1;
  }
  int rank = bagua_comm_rank(comm), size = bagua_comm_size(comm);
  enum { N = 1 << 16 };
  float *x = malloc(N * sizeof(*x));
  if (!x) return 1;
  for (int i = 0; i < N; i++) x[i] = (float)(rank + 1) * (float)(i % 7);
  st = bagua_allreduce(comm, x, x, N, BAGUA_F32, BAGUA_SUM);
  if (st != BAGUA_OK) {
    fprintf(stderr, "worker: bagua_allreduce: %s (%s)\n", bagua_strerror(st), bagua_last_error());
    return 1;
  }
  float ranks = (float)(size * (size + 1) / 2);
  for (int i = 0; i < N; i++) {
    if (x[i] != ranks * (float)(i % 7)) {
      fprintf(stderr, "worker: rank %d: element %d is %g, expected %g\n", rank, i, x[i],
              ranks * (float)(i % 7));
      return 1;
    }
  }
  printf("worker rank %d/%d: allreduce of %d floats correct, libbagua %s\n", rank, size, N,
         where());
  bagua_comm_destroy(comm);
  free(x);
  return 0;
}
EOF

# ---- 6. pkg-config ----
begin "pkg-config --cflags --libs bagua"
# PKG_CONFIG_SYSROOT_DIR is pkg-config's way of reading a file meant for / in a staging root:
# it puts ROOT in front of the paths bagua.pc names (/usr/include, /usr/lib/MULTIARCH).
pc() { PKG_CONFIG_PATH=$LIB/pkgconfig PKG_CONFIG_SYSROOT_DIR=$ROOT pkg-config "$@"; }
pc --exists bagua || fail "pkg-config finds no bagua.pc in $LIB/pkgconfig"
[ "$(pc --modversion bagua)" = "$want" ] || fail "bagua.pc has version $(pc --modversion bagua), expected $want"
flags=$(pc --cflags --libs bagua)
echo "   $flags"
case " $flags " in *" -I$ROOT/usr/include "*) ;; *) fail "no -I$ROOT/usr/include in: $flags" ;; esac
case " $flags " in *" -L$LIB "*) ;; *) fail "no -L$LIB in: $flags" ;; esac
# shellcheck disable=SC2086 # the flags are words
run "$WORK/pkgconfig-cc.log" cc -o "$CON/pc-worker" "$CON/worker.c" $flags
out=$("$CON/pc-worker" --where) || fail "the program built with pkg-config's flags exited with status $?"
[ "$(readlink -f "${out#* }")" = "$(readlink -f "$LIB/libbagua.so.0")" ] ||
  fail "the program built with pkg-config's flags loaded ${out#* }, not $LIB/libbagua.so.0"
echo "   a program compiled with them runs with libbagua $out"
# libbagua.a: `--static --libs` lists what it needs; -l:libbagua.a takes the archive where
# -lbagua would take the shared library.
static_libs=" $(pc --static --libs bagua) "
# shellcheck disable=SC2046,SC2086 # the flags are words
run "$WORK/pkgconfig-static.log" cc -o "$CON/static-worker" "$CON/worker.c" \
  $(pc --cflags bagua) ${static_libs/ -lbagua / -l:libbagua.a }
if readelf -d "$CON/static-worker" | grep -q 'NEEDED.*libbagua'; then
  fail "the program linked with -l:libbagua.a still needs libbagua.so"
fi
echo "   with libbagua.a: $(pc --static --libs bagua)"
done_step

# ---- 7. find_package(Bagua) ----
begin "CMake consumer: find_package(Bagua), Bagua::bagua"
cat >"$CON/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.22)
project(bagua_consumer C)
find_package(Bagua 0.1 REQUIRED)
message(STATUS "Bagua ${Bagua_VERSION} from ${Bagua_DIR}")
get_target_property(_type Bagua::bagua TYPE)
if(NOT _type STREQUAL "SHARED_LIBRARY")
  message(FATAL_ERROR "Bagua::bagua is a ${_type}, not the shared library")
endif()
add_executable(worker worker.c)
target_link_libraries(worker PRIVATE Bagua::bagua ${CMAKE_DL_LIBS})
EOF
run "$WORK/consumer-configure.log" cmake -S "$CON" -B "$CON/build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$ROOT/usr" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
grep -q "Bagua $want from $LIB/cmake/Bagua" "$WORK/consumer-configure.log" ||
  fail "find_package(Bagua) did not take $LIB/cmake/Bagua: $(grep 'Bagua ' "$WORK/consumer-configure.log")"
run "$WORK/consumer-build.log" cmake --build "$CON/build"
out=$("$CON/build/worker" --where) || fail "the consumer exited with status $?"
[ "$(readlink -f "${out#* }")" = "$(readlink -f "$LIB/libbagua.so.0")" ] ||
  fail "the consumer loaded ${out#* }, not $LIB/libbagua.so.0"
echo "   Bagua $want from $LIB/cmake/Bagua; the consumer runs with libbagua $out"
done_step

# ---- 8. Two-worker jobs under the packaged bagua-launch ----
# job NAME LOG PROGRAM...: runs the job (bounded, so a hang fails rather than blocks) and checks
# that both ranks printed their "rank R/2: ... correct" line.
job() {
  local name=$1 log=$2
  shift 2
  local rc=0
  timeout 180 "$ROOT/usr/bin/bagua-launch" --nproc-per-node 2 --python /usr/bin/python3 \
    "$@" >"$log" 2>&1 || rc=$?
  if [ $rc != 0 ]; then
    tail -n 40 "$log" >&2
    [ $rc = 124 ] && fail "the $name job did not end within 180 s (log: $log)"
    fail "the $name job exited with status $rc (log: $log)"
  fi
  for r in 0 1; do
    line=$(grep -m1 "rank $r/2: allreduce .* correct" "$log") ||
      fail "the $name job's rank $r printed no result line (log: $log)"
    echo "   $line"
  done
}
begin "bagua-launch --nproc-per-node 2: C allreduce"
job C "$WORK/job-c.log" "$CON/build/worker"
grep -q "libbagua $LIB/libbagua.so" "$WORK/job-c.log" ||
  fail "the C workers did not run on $LIB/libbagua.so.0 (log: $WORK/job-c.log)"
done_step

begin "bagua-launch --nproc-per-node 2: C allreduce, libbagua.a linked in"
job "static C" "$WORK/job-static.log" "$CON/static-worker"
done_step

begin "bagua-launch --nproc-per-node 2: Python front end allreduce"
cat >"$CON/worker.py" <<'EOF'
import torch
import bagua.torch_api as bagua

bagua.init_process_group()
rank, size = bagua.get_rank(), bagua.get_world_size()
t = torch.arange(4096, dtype=torch.float32) % 7 * (rank + 1)
bagua.allreduce_inplace(t)
want = torch.arange(4096, dtype=torch.float32) % 7 * (size * (size + 1) // 2)
if not torch.equal(t, want):
    raise SystemExit(f"rank {rank}: allreduce gave {t[:8].tolist()}..., expected {want[:8].tolist()}...")
print(f"python rank {rank}/{size}: allreduce of {t.numel()} floats correct, bagua from {bagua.__file__}",
      flush=True)
EOF
job Python "$WORK/job-py.log" "$CON/worker.py"
grep -q "bagua from $SITE/bagua/torch_api" "$WORK/job-py.log" ||
  fail "the Python workers did not import the packaged bagua (log: $WORK/job-py.log)"
done_step

# ---- 9. The NCCL plugin ----
begin "libnccl-net-bagua.so"
tables=$(nm -D --defined-only "$LIB/libnccl-net-bagua.so" | awk '$3 ~ /^ncclNetPlugin_v/ {print $3}' |
           sort | paste -sd' ' -)
[ -n "$tables" ] || fail "$LIB/libnccl-net-bagua.so exports no ncclNetPlugin_v* table"
echo "   exports $tables"
done_step

ok=1
echo "package-test.sh: all checks passed in $(($(date +%s) - t_start)) s"
