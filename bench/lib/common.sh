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

# $WORK/ccmesh.toml: one endpoint, "mock", at the mock upstream on PORT, in FORMAT (default
# anthropic), and EXTRA (TOML, e.g. a [settings] table) after it.
write_mock_config() { # PORT [FORMAT] [EXTRA]
  cat >"$WORK/ccmesh.toml" <<EOF
[[endpoints]]
name = "mock"
base_url = "http://127.0.0.1:$1"
api_key = "bench"
format = "${2:-anthropic}"
${3:-}
EOF
}

# The targets of a side-by-side script: ccmesh builds and the floor, each on a free port, their
# pids and ports kept in the caller's `declare -A PID PORT` and every pid in PIDS (for the
# caller's trap); logs and data under $WORK, ccmesh with $WORK/ccmesh.toml.
#
# Two processes of one binary differ by more than noise: where a process's stack and heap fall
# (moved by the length of its path, arguments and environment, and by address randomisation)
# stays with it for its life, and put one process 1-3 % ahead of another of the same binary for
# a whole run. So each build runs from a path as long as the others' (`stage_gateway`), every
# gateway's arguments are as long as the others', and the scripts start the gateways afresh
# for every pass, in an order that alternates.

# Copies BINARY to $WORK/binSLOT/ccmesh (SLOT: one digit) and prints that path.
stage_gateway() { # SLOT BINARY
  mkdir -p "$WORK/bin$1"
  cp "$2" "$WORK/bin$1/ccmesh"
  echo "$WORK/bin$1/ccmesh"
}
GATEWAY_STARTS=0
start_gateway() { # NAME BINARY
  local port data; port=$(free_port)
  GATEWAY_STARTS=$((GATEWAY_STARTS + 1))
  data=$WORK/data$(printf %04d "$GATEWAY_STARTS")
  "$2" serve --listen "127.0.0.1:$port" --data-dir "$data" --config "$WORK/ccmesh.toml" >"$WORK/$1.log" 2>&1 &
  PID[$1]=$!; PIDS+=($!); PORT[$1]=$port
  wait_http "http://127.0.0.1:$port/health" || { echo "$1 did not start" >&2; tail "$WORK/$1.log" >&2; exit 1; }
}
stop_gateway() { # NAME
  kill "${PID[$1]}" 2>/dev/null || true
  wait "${PID[$1]}" 2>/dev/null || true
}
# The targets of a side-by-side run: OTHER (when given) staged as "other", CCMESH as "ccmesh",
# and the floor on UPSTREAM_PORT started; sets TARGETS, GATEWAYS and BINARY for the passes.
stage_targets() { # BIN_DIR UPSTREAM_PORT CCMESH [OTHER]
  declare -gA PORT PID BINARY
  GATEWAYS=()
  if [ -n "${4:-}" ]; then BINARY[other]=$(stage_gateway 1 "$4"); GATEWAYS+=(other); fi
  BINARY[ccmesh]=$(stage_gateway 2 "$3"); GATEWAYS+=(ccmesh)
  TARGETS=("${GATEWAYS[@]}")
  start_floor "$1" "$2"; TARGETS+=(floor)
}
# Pass N's gateways, started afresh in its order (`pass_order`, into `order`).
start_pass() { # N
  local t
  mapfile -t order < <(pass_order "$1")
  for t in "${order[@]}"; do [ "$t" = floor ] || start_gateway "$t" "${BINARY[$t]}"; done
}
end_pass() {
  local t
  for t in "${GATEWAYS[@]}"; do stop_gateway "$t"; done
}
# The targets of pass N: TARGETS in order, reversed when N is even.
pass_order() { # N
  local i
  if [ $(($1 % 2)) = 0 ]; then
    for ((i = ${#TARGETS[@]} - 1; i >= 0; i--)); do echo "${TARGETS[$i]}"; done
  else
    printf '%s\n' "${TARGETS[@]}"
  fi
}
start_floor() { # BIN_DIR UPSTREAM_PORT
  local port; port=$(free_port)
  "$1/examples/bare_proxy" --listen "127.0.0.1:$port" --upstream "http://127.0.0.1:$2" --client hyper \
    --per-thread "$(nproc)" >"$WORK/floor.log" 2>&1 &
  PID[floor]=$!; PIDS+=($!); PORT[floor]=$port
  wait_http "http://127.0.0.1:$port/health" || { echo "the floor did not start" >&2; exit 1; }
}

# The load's clock ticks (user + system) and the machine's, as `load NAME TICKS...` lines for
# bench/lib/machine_load.py: wrk's (WRK_TICKS, counted by the caller, which knows how wrk runs),
# the mock's (MOCK_PID), and the machine's busy and idle ticks (/proc/stat's first line; iowait
# counts as idle, steal as neither).
load_ticks() { # WRK_TICKS MOCK_PID
  echo "load wrk $1"
  awk '{ print "load mock", $14 + $15 }' "/proc/$2/stat"
  awk '/^cpu / { print "load machine", $2 + $3 + $4 + $7 + $8, $5 + $6 }' /proc/stat
}
