#!/usr/bin/env python3
"""Where a pipeline step's time goes, from a `troupe run` trace ([trace] path): for step
STEP, each rank's compute passes by kind (forward F, whole backward B, input half I,
weight half W) with their median ms, the time its compute stream spent waiting for bytes
(the "activation S.M.C" and "gradient S.M.C" spans of the "compute wait" track: a pass
queued before its input arrived), its idle
time between passes, and the step's span; then the step replayed: each rank's passes in
the order they ran, each taking the time it took, every message free. The replay's span
is what the schedule's order costs at these passes' costs; the measured span less the
replay's is what the runtime added (hops, hand-offs, noise).

LAYOUT is how chunks sit on ranks: "loop" (one chunk per rank, or interleaved: chunk c of
rank r is stage c*P + r) or "v" (zbv: rank r holds stages r and 2P-1-r).

usage: scripts/trace_pipeline.py TRACE.json STEP loop|v
"""
import collections
import re
import statistics
import sys

from trace_events import spans

PASS = re.compile(r"(forward|backward_input|backward_weight|backward) (\d+)\.(\d+)\.(\d+)$")
WAIT = re.compile(r"(activation|gradient) (\d+)\.\d+\.\d+$")
SHORT = {"forward": "F", "backward": "B", "backward_input": "I", "backward_weight": "W"}


def passes_of(trace, step):
    ranks, waits = collections.defaultdict(list), collections.defaultdict(float)
    for e in spans(trace):
        name = e.get("name", "")
        m = PASS.match(name)
        if m and int(m.group(2)) == step:
            ranks[e["pid"]].append((e["ts"] / 1e3, e["dur"] / 1e3, SHORT[m.group(1)], int(m.group(3)), int(m.group(4))))
        w = WAIT.match(name)
        if w and int(w.group(2)) == step:
            waits[e["pid"]] += e["dur"] / 1e3
    for r in ranks:
        ranks[r].sort()
    return ranks, waits


def replay(ranks, layout):
    """Each rank's passes in their order, each as long as it took, messages free: the span."""
    p = len(ranks)
    chunks = max(c for r in ranks for *_, c in ranks[r]) + 1
    last = p * chunks - 1

    def stage(r, c):
        return (r if c == 0 else 2 * p - 1 - r) if layout == "v" else c * p + r

    def needs(r, kind, micro, c):
        s = stage(r, c)
        if kind == "F":
            return ("F", micro, s - 1) if s > 0 else None
        if kind == "W":
            return None
        return ("B", micro, s + 1) if s < last else ("F", micro, s)

    ends, clock, at = {}, [0.0] * p, [0] * p
    while any(at[r] < len(ranks[r]) for r in range(p)):
        moved = False
        for r in range(p):
            while at[r] < len(ranks[r]):
                _, took, kind, micro, c = ranks[r][at[r]]
                need = needs(r, kind, micro, c)
                if need and need not in ends:
                    break
                clock[r] = max(clock[r], ends[need] if need else 0) + took
                if kind in "FBI":
                    ends[("F" if kind == "F" else "B", micro, stage(r, c))] = clock[r]
                at[r] += 1
                moved = True
        if not moved:
            sys.exit("the passes' order deadlocks in the replay: is LAYOUT right?")
    return max(clock)


def main():
    trace, step, layout = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    ranks, waits = passes_of(trace, step)
    if not ranks:
        sys.exit(f"no passes of step {step} in {trace}")
    start = min(v[0][0] for v in ranks.values())
    end = max(t + d for v in ranks.values() for t, d, *_ in v)
    busy_all = 0.0
    for r in sorted(ranks):
        v = ranks[r]
        busy = sum(d for _, d, *_ in v)
        busy_all += busy
        idle = (v[-1][0] + v[-1][1] - v[0][0]) - busy
        kinds = collections.defaultdict(list)
        for _, d, kind, _, _ in v:
            kinds[kind].append(d)
        medians = "  ".join(f"{k} {statistics.median(ds):.1f} x{len(ds)}" for k, ds in sorted(kinds.items()))
        print(f"rank {r}: compute {busy:.0f} ms ({medians}); idle between passes {idle:.0f} ms, "
              f"of which the stream waited for bytes {waits.get(r, 0):.0f} ms")
    measured = end - start
    planned = replay(ranks, layout)
    p = len(ranks)
    print(f"step {step}: passes span {measured:.0f} ms, bubble {1 - busy_all / (p * measured):.3f}; "
          f"replayed with free messages {planned:.0f} ms, bubble {1 - busy_all / (p * planned):.3f}; "
          f"the runtime added {measured - planned:.0f} ms")


if __name__ == "__main__":
    main()
