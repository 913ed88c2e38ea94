#!/usr/bin/env python3
"""Each rank's compute in a `troupe run` trace ([trace] path): per step, the time its
`forward S.M[.C]` and `backward[_input|_weight] S.M[.C]` spans took and how many there
were, and the rank's idle fraction over the kept steps (1 - their compute time over the
time from the first kept step's first pass to the last kept step's last). The first SKIP
steps (default 2, as the metrics' medians skip them) are left out: they start the ranks.

usage: scripts/trace_busy.py TRACE.json [SKIP=2]
"""
import collections
import re
import sys

from trace_events import spans

PASS = re.compile(r"(forward|backward(?:_input|_weight)?) (\d+)\.")


def passes_by_rank(trace):
    ranks = collections.defaultdict(list)
    for e in spans(trace):
        match = PASS.match(e.get("name", ""))
        if match:
            ranks[e["pid"]].append((int(match.group(2)), e["ts"] / 1e3, e["dur"] / 1e3))
    return ranks


def main():
    trace = sys.argv[1]
    skip = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    for rank, passes in sorted(passes_by_rank(trace).items()):
        steps = sorted({step for step, _, _ in passes})[skip:]
        kept = [p for p in passes if p[0] >= steps[0]] if steps else []
        if not kept:
            print(f"rank {rank}: no passes after the first {skip} steps")
            continue
        busy = sum(d for _, _, d in kept)
        window = max(t + d for _, t, d in kept) - min(t for _, t, _ in kept)
        print(f"rank {rank}: {busy / len(steps):.0f} ms of compute a step in {len(kept) / len(steps):.0f} passes, "
              f"idle {100 * (1 - busy / window):.1f}% over steps {steps[0]}-{steps[-1]}")


if __name__ == "__main__":
    main()
