#!/usr/bin/env python3
"""How far data-parallel ranks drift apart per step, and how far profiling processes do.

usage: trace_drift.py TRACE.json [PROFILE.json PROFILE.json]

TRACE.json: the merged trace of a real run with one pipeline stage (`troupe run JOB --set
trace.path=TRACE.json`). For each step (from one `train_step` to the next on each rank):
each rank's compute (the sum of its micro-batches' forward and backward spans), how far the
slowest and the fastest rank's sums differ over their mean, and the time from the slowest
rank's last backward to the step's end (the reduction, the norm, the optimizer, the next
step's start).

PROFILE.json x 2: two `troupe profile JOB --json --median` outputs of processes run at once.
Their passes in order, summed a step's worth at a time (as many passes as the trace's steps
have micro-batches) side by side, and how far the two sums differ over their mean: the
drift `troupe simulate` replays.
"""
import json
import re
import statistics
import sys

from trace_events import spans

COMPUTE = re.compile(r"(forward|backward) \d")


def steps_of(events, rank):
    starts = sorted(e["ts"] for e in events if e["pid"] == rank and e["name"] == "train_step")
    computes = [e for e in events if e["pid"] == rank and COMPUTE.match(e["name"])]
    out = []
    for begin, end in zip(starts, starts[1:]):
        mine = [e for e in computes if begin <= e["ts"] < end]
        if mine:
            out.append({"busy": sum(e["dur"] for e in mine) / 1e3,
                        "micro_batches": sum(e["name"].startswith("forward") for e in mine),
                        "last_end": max(e["ts"] + e["dur"] for e in mine), "end": end})
    return out


def relative(a, b):
    return (a - b) / ((a + b) / 2)


def trace_drift(path):
    events = spans(path)
    ranks = sorted({e["pid"] for e in events})
    by_rank = [steps_of(events, r) for r in ranks]
    count = min(len(s) for s in by_rank)
    diffs, tails = [], []
    for k in range(count):
        busy = sorted(s[k]["busy"] for s in by_rank)
        diffs.append(relative(busy[-1], busy[0]))
        slowest_end = max(s[k]["last_end"] for s in by_rank)
        tails.append((by_rank[0][k]["end"] - slowest_end) / 1e3)
        each = ", ".join(f"{s[k]['busy']:.1f}" for s in by_rank)
        print(f"step {k}: compute ms by rank {each}; "
              f"apart {100 * diffs[-1]:.1f}%; after the slowest's last backward {tails[-1]:.1f} ms")
    print(f"{path}: ranks apart by {100 * statistics.mean(diffs):.1f}% a step on average "
          f"(at most {100 * max(diffs):.1f}%); after the slowest rank's last backward, median "
          f"{statistics.median(tails):.1f} ms")
    return by_rank[0][0]["micro_batches"]


def profile_drift(paths, micro_batches):
    sums = []
    for path in paths:
        passes = json.load(open(path))["passes"]
        totals = [p["forward_ms"] + p["backward_ms"] for p in passes]
        sums.append([sum(totals[i:i + micro_batches]) for i in range(0, len(totals) - micro_batches + 1,
                                                                   micro_batches)])
    diffs = [abs(relative(a, b)) for a, b in zip(*sums)]
    print(f"{' and '.join(paths)}: {micro_batches} passes summed side by side apart by "
          f"{100 * statistics.mean(diffs):.1f}% on average over {len(diffs)} sums")


def main():
    if len(sys.argv) not in (2, 4):
        sys.exit(__doc__)
    micro_batches = trace_drift(sys.argv[1])
    if len(sys.argv) == 4:
        profile_drift(sys.argv[2:4], micro_batches)


if __name__ == "__main__":
    main()
