#!/usr/bin/env python3
"""Draws bus bandwidth against size from benchmark JSON lines as an SVG line chart.

usage: plot_bandwidth.py RESULTS.jsonl OUT.svg
Each line: {"system": ..., "ranks": ..., "bytes": ..., "busbw_GBps": ...}; one series per
(system, ranks). No plotting library needed: the SVG is written directly.
"""
import json
import math
import sys

COLOURS = {"troupe": ["#1f77b4", "#17becf"], "openmpi": ["#d62728", "#ff7f0e"]}


def load(path):
    series = {}
    for line in open(path):
        row = json.loads(line)
        series.setdefault((row["system"], row["ranks"]), []).append((row["bytes"], row["busbw_GBps"]))
    return {k: sorted(v) for k, v in sorted(series.items())}


def human(nbytes):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024:
            return f"{nbytes:g} {unit}"
        nbytes /= 1024
    return f"{nbytes:g} TiB"


def draw(series, out):
    width, height, left, right, top, bottom = 760, 440, 70, 170, 40, 60
    xs = [b for points in series.values() for b, _ in points]
    ys = [max(v, 1e-4) for points in series.values() for _, v in points]
    x0, x1 = math.log2(min(xs)), math.log2(max(xs))
    y0, y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    px = lambda b: left + (math.log2(b) - x0) / max(x1 - x0, 1) * (width - left - right)
    py = lambda v: top + (y1 - math.log10(max(v, 1e-4))) / max(y1 - y0, 1) * (height - top - bottom)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2 - 60}" y="22" font-size="15">All-reduce bus bandwidth</text>']
    for e in range(y0, y1 + 1):
        y = py(10 ** e)
        svg.append(f'<line x1="{left}" y1="{y}" x2="{width - right}" y2="{y}" stroke="#ddd"/>')
        svg.append(f'<text x="{left - 8}" y="{y + 4}" text-anchor="end">{10 ** e:g}</text>')
    for b in sorted(set(xs)):
        x = px(b)
        svg.append(f'<line x1="{x}" y1="{top}" x2="{x}" y2="{height - bottom}" stroke="#eee"/>')
        svg.append(f'<text x="{x}" y="{height - bottom + 16}" text-anchor="middle" font-size="10">{human(b)}</text>')
    svg.append(f'<text x="{(left + width - right) / 2}" y="{height - 18}" text-anchor="middle">buffer size</text>')
    svg.append(f'<text x="18" y="{(top + height - bottom) / 2}" transform="rotate(-90 18 {(top + height - bottom) / 2})" '
               f'text-anchor="middle">busbw (GB/s, log)</text>')
    used = {}
    for i, ((system, ranks), points) in enumerate(series.items()):
        colour = COLOURS.get(system, ["#555", "#999"])[used.setdefault(system, 0) % 2]
        used[system] += 1
        dash = "" if system == "troupe" else ' stroke-dasharray="6 3"'
        path = " ".join(f"{'M' if j == 0 else 'L'}{px(b):.1f},{py(v):.1f}" for j, (b, v) in enumerate(points))
        svg.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        ly = top + 10 + 20 * i
        svg.append(f'<line x1="{width - right + 12}" y1="{ly}" x2="{width - right + 40}" y2="{ly}" stroke="{colour}" stroke-width="2"{dash}/>')
        svg.append(f'<text x="{width - right + 46}" y="{ly + 4}">{system}, {ranks} ranks</text>')
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    draw(load(sys.argv[1]), sys.argv[2])
