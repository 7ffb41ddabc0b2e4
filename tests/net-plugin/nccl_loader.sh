#!/bin/sh
# Does NCCL's own loader accept libnccl-net-bagua.so? Runs nccl_probe (a one-rank
# ncclCommInitRank) with NCCL_NET_PLUGIN=<the .so> NCCL_DEBUG=INFO and reads NCCL's log.
#   pass: NCCL logged that it loaded the plugin / uses network "Bagua".
#   skip (77): no libnccl.so.2, or NCCL stopped at CUDA initialisation before it loads any
#        network plugin (no GPU or driver: what every CPU-only machine shows; see
#        docs/net-plugin.md).
#   fail: anything else, e.g. NCCL reached plugin loading and refused ours.
set -u
lib=$1
probe=$2
out=$(NCCL_NET_PLUGIN="$lib" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV \
  BAGUA_NET_IFNAME=lo timeout 60 "$probe" 2>&1)
rc=$?
printf '%s\n' "$out" | grep -E 'nccl_probe|NET/|Plugin|WARN' | head -40
if [ $rc -eq 77 ]; then
  echo "SKIP: libnccl.so.2 is not installed"
  exit 77
fi
if printf '%s\n' "$out" | grep -qiE 'Using network Bagua|Loaded net plugin Bagua|NET/Bagua'; then
  echo "PASS: NCCL loaded the Bagua-Net plugin"
  exit 0
fi
if printf '%s\n' "$out" | grep -qiE 'CUDA driver version is insufficient|no CUDA-capable device|cudaErrorNoDevice|Cuda failure'; then
  echo "SKIP: NCCL fails in CUDA initialisation before it loads network plugins (no GPU)"
  exit 77
fi
echo "FAIL: NCCL neither loaded the plugin nor stopped at CUDA initialisation"
exit 1
