"""What the load (wrk and the mock) spent per request over a pass, and how busy the machine was,
from the `load NAME TICKS...` lines `load_ticks` (bench/lib/common.sh) prints before and after
it. The rate is the busy share of the cores over all the programs' CPU per request, so these say
how much of a gap a proxy's own CPU does not explain. Shared by bench/run's report and
bench/cpu_per_request's rows."""


def parse(lines):
    """`load NAME TICKS...` lines (any other line ignored): name -> the ticks, as integers."""
    got = {}
    for line in lines:
        f = line.split()
        if len(f) >= 3 and f[0] == "load":
            got[f[1]] = [int(x) for x in f[2:]]
    return got


def per_request(before, after, ticks_per_s, requests):
    """µs of wrk's and the mock's CPU per request and the machine's busy share (None when no
    tick passed), from two `parse` results; None when a line is missing."""
    try:
        us = {k: (after[k][0] - before[k][0]) * 1e6 / ticks_per_s / requests for k in ("wrk", "mock")}
        busy, idle = (after["machine"][i] - before["machine"][i] for i in (0, 1))
    except (KeyError, IndexError):
        return None
    return {**us, "busy": busy / (busy + idle) if busy + idle > 0 else None}
