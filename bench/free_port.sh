# shellcheck shell=bash
# bench/free_port.sh: free_port prints a TCP port that nothing on this host listens on or uses
# now, chosen by the kernel (bind to port 0). Sourced by the bench scripts that start ranks or
# servers on this host: a random port from a fixed range can be one an outgoing connection
# holds at that moment (the kernel's ephemeral range starts at 32768), and the rank that
# listens on it then fails with "Address already in use".
free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'
}
