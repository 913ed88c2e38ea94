#!/usr/bin/env python3
"""How much of the communication in a troupe trace runs while compute runs.

usage: trace_overlap.py TRACE.json [RANK]
Reads the merged Chrome/Perfetto trace a run writes with `[trace] path`, takes the spans
on the "comm" track (each collective, from its first received chunk to its completion: time
bytes were moving, not time it sat queued) and on the compute streams
("stream compute": forward and backward; "stream optimizer": the shard owner's clipping
and optimizer step) of one rank (default 0), less the time compute spent blocked on
communication ("compute wait": a ZeRO-3 gather, a gradient bucket), and prints:
  collectives=N overlapping=M comm_s=C overlapped_s=O exposed_comm_s=E wall_s=W exposed_fraction=F
where `overlapping` counts collectives that share any time with compute, `overlapped_s`
is the union of communication time that coincides with compute, `exposed_comm_s` the
union of communication time during which no compute runs, and `exposed_fraction` that
over the wall time of the traced steps.
"""
import json
import sys


def union(intervals):
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def subtract(intervals, holes):
    out = []
    for start, end in intervals:
        for hole_start, hole_end in holes:
            if hole_end <= start or hole_start >= end:
                continue
            if hole_start > start:
                out.append([start, hole_start])
            start = max(start, hole_end)
        if start < end:
            out.append([start, end])
    return out


def intersect_length(a, b):
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def main(path, rank):
    events = json.load(open(path))["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = [e for e in events if e["ph"] == "X" and e["pid"] == rank]
    track = lambda name: [(e["ts"], e["ts"] + e["dur"]) for e in spans if names.get((rank, e["tid"])) == name]
    comm, compute = track("comm"), track("stream compute") + track("stream optimizer")
    # A compute stream blocked on communication (a gather it needs, a free gradient
    # bucket) is not computing: those waits are cut out of its spans.
    compute_union, comm_union = subtract(union(compute), union(track("compute wait"))), union(comm)
    overlapping = sum(1 for c in comm if intersect_length([list(c)], compute_union) > 0)
    comm_s = sum(e - s for s, e in comm_union) / 1e6
    overlapped_s = intersect_length(comm_union, compute_union) / 1e6
    wall = (max(e for _, e in comm + compute) - min(s for s, _ in comm + compute)) / 1e6 if comm or compute else 0
    print(f"collectives={len(comm)} overlapping={overlapping} comm_s={comm_s:.6f} overlapped_s={overlapped_s:.6f} "
          f"exposed_comm_s={comm_s - overlapped_s:.6f} wall_s={wall:.6f} "
          f"exposed_fraction={(comm_s - overlapped_s) / wall if wall > 0 else 0:.4f}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
