"""One pass of bench/cpu_per_request: a target's CPU per request by thread (`perf stat
--per-thread` over the window), the load's (wrk and the mock, from their /proc ticks) and the
machine's busy share, as a row of the script's table; the pass's rate and CPU also go to a JSON
line for the paired summary.

Arguments: PASS TARGET WINDOW_S WRK_OUT PERF_STAT DSO_REPORT PASSES_JSONL LOAD_BEFORE LOAD_AFTER
CLK_TCK. The load files hold `load_ticks`'s lines (bench/lib/machine_load.py); a missing
DSO_REPORT (no SPLIT) leaves out the kernel / vDSO / user split.
"""
import json, os, re, sys

import machine_load
pass_, target, window, wrk, perf, dso, passes, load_before, load_after, clk_tck = sys.argv[1:11]
window = float(window)
rps = next(json.loads(l)["rps"] for l in open(wrk) if l.startswith("{"))
requests = rps * window
clock, switches, syscalls = {}, 0.0, 0.0
for line in open(perf):
    m = re.match(r"\s*(\S+)-\d+\s+([\d,.]+)\s+(?:msec\s+)?(task-clock|context-switches|raw_syscalls:sys_enter)", line)
    if not m:
        continue
    name = "workers" if m.group(1).startswith("ccmesh-worker") else m.group(1)
    value = float(m.group(2).replace(",", ""))
    if m.group(3) == "task-clock":
        clock[name] = clock.get(name, 0.0) + value * 1000 / requests
    elif m.group(3) == "context-switches":
        switches += value / requests
    else:
        syscalls += value / requests
parts = ", ".join(f"{n} {us:.1f}" for n, us in sorted(clock.items()) if us >= 0.05)
total = sum(clock.values())
row = f"| {pass_} | {target} | {rps:.0f} | {parts} | {total:.1f} | {switches:.2f} | {syscalls:.2f} |"
load = machine_load.per_request(
    machine_load.parse(open(load_before)), machine_load.parse(open(load_after)), int(clk_tck), requests
)
row += f" {load['wrk']:.1f} / {load['mock']:.1f} | {100 * load['busy']:.0f} % |"
if os.path.exists(dso):
    shares = {"kernel": 0.0, "vdso": 0.0, "user": 0.0}
    for line in open(dso):
        m = re.match(r"\s*([\d.]+)%\s+(\S+)", line)
        if m:
            kind = "kernel" if "kernel" in m.group(2) else "vdso" if "vdso" in m.group(2) else "user"
            shares[kind] += float(m.group(1)) / 100
    row += " " + " / ".join(f"{total * shares[k]:.1f} µs" for k in ("kernel", "vdso", "user")) + " |"
print(row)
with open(passes, "a") as f:
    f.write(json.dumps({"round": int(pass_), "target": target, "rps": rps, "us": total}) + "\n")
