#!/usr/bin/env python3
"""bench/callgrind's code footprint (CALLGRIND_CODE=1): how much machine code one request runs
through, in 64-byte lines, from two callgrind runs made with --dump-instr=yes.

Usage: code_lines.py PREFIX_N1 PREFIX_N2 N1 N2
  PREFIX_Nx: a run's profile path without its `.PID-TT` thread suffix (every thread's file is read)
Prints: "LINES WRITER_LINES", both counted per request (N2's count of each instruction less
N1's, over N2 - N1), the writer's being the thread whose profile holds the record writer's loop.

An instruction counts when it runs at least once every two requests; a line counts when one of
its instructions does. Code that runs once per request, straight through, fills a line with
~15 instructions; a loop runs its few lines many times. So lines per request, beside the
instruction count, say how much code a request pulls through the instruction cache.
"""
import collections
import glob
import re
import sys

WRITER_LOOP = "observe::writer::Worker::write"


def instructions(path):
    """Each instruction's own count, keyed by (object, address)."""
    objects, obj, addr, out, skip = {}, None, 0, collections.Counter(), False
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        m = re.match(r"c?ob=\((\d+)\)(?: (.*))?", line)
        if m:
            if m.group(2):
                objects[m.group(1)] = m.group(2)
            if line.startswith("ob="):
                obj = objects.get(m.group(1), m.group(1))
            continue
        if line.startswith("calls="):
            skip = True  # the next cost line is the call's inclusive cost, not this one's
            continue
        if not line or line[0] not in "0123456789+-*":
            continue
        fields = line.split()
        pos = fields[0]
        if pos.startswith("0x"):
            addr = int(pos, 16)
        elif pos.startswith("+"):
            addr += int(pos[1:])
        elif pos.startswith("-"):
            addr -= int(pos[1:])
        if skip:
            skip = False
            continue
        if len(fields) >= 3:
            out[(obj, addr)] += int(fields[2])
    return out


def threads(prefix):
    """Each thread's profile, by its thread number (the `-TT` suffix)."""
    files = {}
    for f in glob.glob(prefix + ".*"):
        m = re.search(r"\.\d+-(\d+)$", f)
        if m:
            files[m.group(1)] = f
    return files


def lines_per_request(a, b, n):
    hot = [k for k in b if (b[k] - a.get(k, 0)) / n >= 0.5]
    return len({(obj, addr // 64) for obj, addr in hot})


def main():
    p1, p2, n1, n2 = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    t1, t2 = threads(p1), threads(p2)
    total = writer = 0
    for tid, f2 in t2.items():
        a = instructions(t1[tid]) if tid in t1 else collections.Counter()
        lines = lines_per_request(a, instructions(f2), n2 - n1)
        total += lines
        if WRITER_LOOP in open(f2, errors="replace").read():
            writer = lines
    print(total, writer)


main()
