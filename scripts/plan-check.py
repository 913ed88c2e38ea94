#!/usr/bin/env python3
"""Does `troupe plan` choose well on this machine? Plans the benchmark GPT
(configs/bench-gpt.toml: its global batch of 32 on 2 ranks) on this machine's cluster
(`troupe profile-device`, compute = "measured"), once as users run it (pruned: only the
best estimates simulated) and once with --exhaustive (every layout simulated, ranked); then
runs for real the pruned plan's choice and the exhaustive ranking spread over its list (the
best few, then every STRIDE-th), alternated ROUNDS times, and compares: the chosen
layout's measured step time against the fastest measured one's.

usage: scripts/plan-check.py [ROUNDS=2] [FIRST=6] [STRIDE=5]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TROUPE = os.path.join(ROOT, "build", "troupe")
JOB = os.path.join(ROOT, "configs", "bench-gpt.toml")
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 2
FIRST = int(sys.argv[2]) if len(sys.argv) > 2 else 6
STRIDE = int(sys.argv[3]) if len(sys.argv) > 3 else 5


def run(args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def layout(c):
    text = f"dp {c['dp']} x pp {c['pp']}, ZeRO-{c['zero']}, micro {c['micro_batch_size']} x {c['gradient_accumulation_steps']}"
    return text + (f", {c['schedule']}" if c["pp"] > 1 else "")


def measure(c, work):
    metrics = os.path.join(work, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    sets = {"parallel.dp": c["dp"], "parallel.pp": c["pp"], "parallel.tp": c["tp"], "zero.stage": c["zero"],
            "pipeline.schedule": f'"{c["schedule"]}"', "batch.micro_batch_size": c["micro_batch_size"],
            "batch.gradient_accumulation_steps": c["gradient_accumulation_steps"], "train.steps": 6}
    args = [TROUPE, "run", JOB, "--metrics", metrics]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    run(args)
    rows = [json.loads(line) for line in open(metrics)]
    return statistics.median(r["step_ms"] for r in rows[2:])


def main():
    work = tempfile.mkdtemp(prefix="plan-check.")
    device = os.path.join(work, "this-host.json")
    with open(device, "w") as f:
        f.write(run([TROUPE, "profile-device", "--json"]))
    cluster = os.path.join(work, "cluster.toml")
    with open(cluster, "w") as f:
        f.write('[cluster]\nhosts = 1\nranks_per_host = 2\ndevice = "this-host.json"\ncompute = "measured"\n')
    plan = json.loads(run([TROUPE, "plan", JOB, "--cluster", cluster, "--json", "--out",
                           os.path.join(work, "chosen.toml")]))
    every = json.loads(run([TROUPE, "plan", JOB, "--cluster", cluster, "--json", "--exhaustive", "--out",
                            os.path.join(work, "every.toml")]))
    chosen = plan["ranked"][0]
    same = lambda a, b: all(a[k] == b[k] for k in ("dp", "pp", "tp", "zero", "schedule", "micro_batch_size"))
    ranked = [chosen] + [c for c in every["ranked"] if not same(c, chosen)]
    picked = sorted(set(range(min(FIRST, len(ranked)))) | set(range(FIRST, len(ranked), STRIDE)))
    measured = {i: [] for i in picked}
    for _ in range(ROUNDS):
        for i in picked:
            measured[i].append(measure(ranked[i], work))
    medians = {i: statistics.median(v) for i, v in measured.items()}
    fastest = min(medians.values())
    print(f"{plan['considered']} layouts considered; the plan simulated {plan['simulated']}, the exhaustive one "
          f"{every['simulated']}; {len(picked)} run for real (rank: the chosen, then the exhaustive ranking), "
          f"medians of {ROUNDS} alternated rounds of 6 steps (after 2)\n")
    print("| rank | layout | simulated step ms | measured step ms | vs fastest measured |")
    print("|---|---|---|---|---|")
    for i in picked:
        c = ranked[i]
        print(f"| {i + 1}{' (chosen)' if i == 0 else ''} | {layout(c)} | {c['step_ms']:.0f} | {medians[i]:.0f} | "
              f"{100 * (medians[i] / fastest - 1):+.1f}% |")
    verdict = "within" if medians[0] <= 1.10 * fastest else "NOT within"
    print(f"\nthe chosen layout is {100 * (medians[0] / fastest - 1):.1f}% slower than the fastest measured: "
          f"{verdict} 10%")


if __name__ == "__main__":
    main()
