"""Pairs the benchmark figures of builds that took turns, round by round.

Usage: python3 bench/lib/paired.py ROWS.jsonl METRIC:higher|lower:LABEL ...

ROWS.jsonl holds one object per round and target: {"round": N, "target": "ccmesh" | "other" |
"floor", METRIC: value, ...}. For each metric it prints every target's ratio to the floor per
round, and ccmesh's to "other" when there is one, with how many rounds ccmesh won: the targets
of a round ran minutes apart on the same machine, so a round's ratio cancels most of the
machine's drift, and a real change wins (nearly) every round rather than only the median.
"""

import json
import statistics
import sys


def main() -> None:
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    by = {(r["target"], r["round"]): r for r in rows}
    rounds = sorted({r["round"] for r in rows})
    targets = sorted({r["target"] for r in rows} - {"floor"})
    for spec in sys.argv[2:]:
        metric, better, label = spec.split(":", 2)
        print()
        for t in targets:
            ratios = [by[(t, n)][metric] / by[("floor", n)][metric] for n in rounds]
            print(f"{t} against the floor, {label} per round: {listed(ratios)}")
        if "other" in targets:
            ratios = [by[("ccmesh", n)][metric] / by[("other", n)][metric] for n in rounds]
            won = sum(1 for x in ratios if (x > 1 if better == "higher" else x < 1))
            print(f"ccmesh against other, {label} per round: {listed(ratios)}; "
                  f"ccmesh better in {won} of {len(rounds)} rounds")


def listed(ratios: list) -> str:
    return ", ".join(f"{x:.3f}" for x in ratios) + f" (median {statistics.median(ratios):.3f})"


if __name__ == "__main__":
    main()
