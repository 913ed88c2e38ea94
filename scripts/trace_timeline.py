#!/usr/bin/env python3
"""Draws a pipeline run's trace as an SVG timeline: one row per rank, its forward spans
in blue, whole and input-half backward spans in orange and weight-half spans in green,
each labelled with its micro-batch, over the last traced step.

usage: trace_timeline.py TRACE.json OUT.svg
Reads the merged Chrome/Perfetto trace a run writes with `[trace] path` (or `troupe bench
pipeline --trace`): the "stream compute" track of every rank, whose work items are named
"forward STEP.MICRO.CHUNK", "backward STEP.MICRO.CHUNK", "backward_input STEP.MICRO.CHUNK"
and "backward_weight STEP.MICRO.CHUNK" (a rank's chunks share the track when they share the stream).
"""
import json
import sys


COLOURS = {"forward": "#4c78a8", "backward": "#f58518", "backward_input": "#f58518", "backward_weight": "#54a24b"}


def compute_spans(trace):
    names = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
    spans = []
    for e in trace["traceEvents"]:
        if e.get("ph") != "X" or names.get((e["pid"], e["tid"])) != "stream compute":
            continue
        kind, _, where = e["name"].partition(" ")
        if kind not in COLOURS or "." not in where:
            continue
        step, micro = where.split(".")[:2]
        spans.append((e["pid"], int(step), int(micro), kind, e["ts"], e["dur"]))
    return spans


def main():
    trace = json.load(open(sys.argv[1]))
    spans = compute_spans(trace)
    last = max(s[1] for s in spans)
    spans = [s for s in spans if s[1] == last]
    ranks = sorted({s[0] for s in spans})
    t0 = min(s[4] for s in spans)
    t1 = max(s[4] + s[5] for s in spans)
    width, row, left = 1000.0, 34, 70
    scale = (width - left - 10) / (t1 - t0)
    height = row * len(ranks) + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height}" '
           'font-family="sans-serif" font-size="11">',
           f'<rect width="100%" height="100%" fill="white"/>']
    for i, rank in enumerate(ranks):
        y = 10 + i * row
        out.append(f'<text x="4" y="{y + 18}">stage {rank}</text>')
        for (_, _, micro, kind, ts, dur) in (s for s in spans if s[0] == rank):
            x = left + (ts - t0) * scale
            w = max(1.0, dur * scale)
            color = COLOURS[kind]
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 8}" fill="{color}" '
                       'stroke="white" stroke-width="0.5"/>')
            if w > 12:
                out.append(f'<text x="{x + w / 2:.1f}" y="{y + 17}" fill="white" text-anchor="middle">{micro}</text>')
    axis_y = 10 + len(ranks) * row + 14
    out.append(f'<text x="{left}" y="{axis_y}">0 ms</text>')
    out.append(f'<text x="{width - 10}" y="{axis_y}" text-anchor="end">{(t1 - t0) / 1000:.0f} ms '
               '(blue: forward, orange: backward or its input half, green: weight half; one step)</text>')
    out.append("</svg>")
    open(sys.argv[2], "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
