#!/usr/bin/env bash
# The control plane at size: N bagua-agents on this host against one etcd, four phases (form,
# steady, kill 5 %, join 5 %), etcd's requests by method, CPU, sockets; records via record.py.
# Usage and details: bench/scale.py (this is its entry point, like the other bench scripts).
exec /usr/bin/python3 "$(dirname "$0")/scale.py" "$@"
