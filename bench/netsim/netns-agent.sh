#!/bin/sh
# Open MPI's remote-start agent for the emulated cluster (bench/netsim/netsim.sh): mpirun calls
# it like ssh, "AGENT HOST COMMAND...", with HOST a namespace name; the command runs under a
# shell inside that network namespace. Used as `mpirun --mca plm_rsh_agent THIS -H NS1,NS2,...`
# from inside one of the namespaces (so the daemons can reach mpirun over the emulated links).
# The namespaces share the host name and /tmp, so each gets its own TMPDIR: otherwise the
# daemons race to create the same Open MPI session directory (/tmp/ompi.HOST.UID/jf.N).
ns=$1
shift
export TMPDIR=/tmp/ompi-netns/$ns
mkdir -p "$TMPDIR" || exit 1
exec ip netns exec "$ns" /bin/sh -c "$*"
