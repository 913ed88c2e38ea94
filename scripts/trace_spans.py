#!/usr/bin/env python3
"""Each rank's spans whose name matches a regular expression, in the order they started:
start (ms from the rank's first matching span), duration (ms) and name; then the
durations alone, as one list per rank. Reads a `troupe run` trace ([trace] path) or a
`troupe simulate --trace` timeline, e.g. a step's parameter all-gathers, `'all_gather
#.* 13293568 '`, or the passes of step 4, `'(forward|backward) 4\\.'`.

usage: scripts/trace_spans.py TRACE.json REGEX
"""
import collections
import re
import sys

from trace_events import spans


def main():
    trace, pattern = sys.argv[1], re.compile(sys.argv[2])
    ranks = collections.defaultdict(list)
    for e in spans(trace):
        if pattern.search(e.get("name", "")):
            ranks[e["pid"]].append((e["ts"] / 1e3, e["dur"] / 1e3, e["name"]))
    for rank, found in sorted(ranks.items()):
        found.sort()
        print(f"rank {rank}:")
        for start, duration, name in found:
            print(f"  {start - found[0][0]:9.1f} +{duration:7.1f}  {name}")
        print(f"  durations: {[round(d) for _, d, _ in found]}")


if __name__ == "__main__":
    main()
