# Helpers every bench script sources after its `cd` to the repository root: `. bench/lib/common.sh`.

# A port on 127.0.0.1 that was free a moment ago (the kernel's pick for port 0).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits until URL answers any HTTP response, for at most SECONDS (default 60); 1 if it never does.
wait_http() { # URL [SECONDS]
  local i
  for ((i = 0; i < ${2:-60} * 10; i++)); do
    curl -s -o /dev/null --max-time 1 "$1" && return 0
    sleep 0.1
  done
  return 1
}
