#!/usr/bin/env python3
"""How well `troupe simulate` predicts real runs on this machine.

For each job below: the real run (`troupe run --metrics`, the median step time after the
first two steps, the bubble averaged over those steps, rank 0's memory) and the
simulation on this machine's cluster (one host; `troupe profile-device --json` measured
once at the start; compute = "measured": the job's layers timed by as many processes at
once as it has ranks, their passes replayed on the ranks as the machine's noise; the
bubble over SIM_STEPS steps), alternated `rounds` times (the real run first in every
other round), the medians of each compared. Both bubbles are the job's: the ranks' mean
idle fraction of the step (a pipeline's summed over its stages, each stage's the mean of
its replicas). Prints a
markdown table: predicted and measured step time, bubble and peak memory, whether each is
within the bounds (10% of the step time, 2 points of bubble, 5% of memory), and how far
the real run's step time moved between rounds (max - min over the median: this machine's
noise).

This machine is a virtual one whose CPU comes and goes: at times a thread spinning alone
gets half a core while `top` shows no steal. Each real run and each simulation (whose
layer timings are measurements too) is therefore bracketed by a probe, one spinning
process per core for a second: a run starts once every probe process got at least
MIN_SHARE of its core, and is done again (up to 4 times) if the probe after it did not.
The lowest share seen around each job's kept runs is printed with it.

usage: scripts/sim-accuracy.py [ROUNDS=2] [STEPS=6]
With SIM_ACCURACY_JOBS="name,name", only the jobs of those names (the table's first column).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TROUPE = os.path.join(ROOT, "build", "troupe")
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 2
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 6
SIM_STEPS = 24  # simulated steps are cheap: enough of the measured noise replayed for a steady mean
PROFILE_REPEATS = 15  # timed passes per measuring process: this machine's slow bursts come every few seconds
# Untimed passes first: the real runs' medians are of steps 3 on, 3-20 s into a run under
# sustained load, and this VM's cores slow down under it (a 150-pass profile here: medians
# of 10 passes from about 110 ms to 170 ms over 20 s), so a measurement from idle is fast.
WARMUP_S = 5

MODEL = """
[model]
seq_len = 128
d_model = 256
n_layers = 4
n_heads = 4
[batch]
micro_batch_size = 4
gradient_accumulation_steps = {m}
[train]
steps = {steps}
log_interval = 1000
"""

# name, ranks, micro-batches, the job's own sections
JOBS = [
    ("dp1", 1, 4, "[parallel]\ndp = 1\n"),
    ("dp2 ZeRO-0", 2, 4, "[parallel]\ndp = 2\n"),
    ("dp2 ZeRO-1", 2, 4, "[parallel]\ndp = 2\n[zero]\nstage = 1\n"),
    ("dp2 ZeRO-2", 2, 4, "[parallel]\ndp = 2\n[zero]\nstage = 2\n"),
    ("dp2 ZeRO-3", 2, 4, "[parallel]\ndp = 2\n[zero]\nstage = 3\n"),
    ("dp4 ZeRO-1", 4, 2, "[parallel]\ndp = 4\n[zero]\nstage = 1\n"),
    ("dp2 ZeRO-2 optimizer on nvme", 2, 4,
     "[parallel]\ndp = 2\n[zero]\nstage = 2\n[offload]\noptimizer = \"nvme\"\nnvme_path = \"{nvme}\"\n"),
    ("pp2 1f1b", 2, 8, "[parallel]\npp = 2\n[pipeline]\nschedule = \"1f1b\"\n"),
    ("pp2 gpipe", 2, 8, "[parallel]\npp = 2\n[pipeline]\nschedule = \"gpipe\"\n"),
    ("pp2 interleaved_1f1b", 2, 8, "[parallel]\npp = 2\n[pipeline]\nschedule = \"interleaved_1f1b\"\n"),
    ("pp2 zb_h1", 2, 8, "[parallel]\npp = 2\n[pipeline]\nschedule = \"zb_h1\"\n"),
    ("pp2 zbv", 2, 8, "[parallel]\npp = 2\n[pipeline]\nschedule = \"zbv\"\n"),
    ("pp4 1f1b", 4, 8, "[parallel]\npp = 4\n[pipeline]\nschedule = \"1f1b\"\n"),
    ("pp2 x dp2 1f1b ZeRO-1", 4, 8, "[parallel]\npp = 2\ndp = 2\n[zero]\nstage = 1\n"),
]


def chosen_jobs():
    """JOBS, or those SIM_ACCURACY_JOBS names."""
    names = [n for n in os.environ.get("SIM_ACCURACY_JOBS", "").split(",") if n]
    unknown = [n for n in names if n not in {job[0] for job in JOBS}]
    if unknown:
        sys.exit(f"sim-accuracy: SIM_ACCURACY_JOBS names {', '.join(unknown)}; the jobs are: "
                 + ", ".join(job[0] for job in JOBS))
    return [job for job in JOBS if job[0] in names] if names else JOBS


MIN_SHARE = 0.9
SPIN = ("import time\nt = time.time(); c = time.process_time()\nwhile time.time() - t < 1: pass\n"
        "print((time.process_time() - c) / (time.time() - t))")


def run(args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def cpu_share():
    """The least share of a core that one spinning process per core got for a second."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True)
                for _ in range(os.cpu_count() or 1)]
    return min(float(p.communicate()[0]) for p in spinners)


def steady(measure, shares):
    """`measure()` between two probes that show the whole machine; its result."""
    for _ in range(4):
        for _ in range(120):
            before = cpu_share()
            if before >= MIN_SHARE:
                break
        result = measure()
        after = cpu_share()
        if after >= MIN_SHARE:
            shares.append(min(before, after))
            return result
    shares.append(min(before, after))
    return result


def real(job, work):
    metrics = os.path.join(work, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    run([TROUPE, "run", job, "--metrics", metrics])
    rows = [json.loads(line) for line in open(metrics)]
    last = rows[-1]
    return {
        "step_ms": statistics.median(r["step_ms"] for r in rows[2:]),
        "bubble": statistics.mean(r["bubble"] for r in rows[2:]),
        "bytes": last["model_state_bytes"] + last["communication_bytes"] + last["activation_bytes"],
    }


def simulated(job, cluster):
    j = json.loads(run([TROUPE, "simulate", job, "--cluster", cluster, "--json", "--repeats", str(PROFILE_REPEATS),
                        "--warmup-seconds", str(WARMUP_S), "--steps", str(SIM_STEPS)]).stdout)
    stage0 = j["stages"][0]
    return {
        "step_ms": j["step_ms"],
        "bubble": j["bubble"],
        "bytes": stage0["model_state_bytes"] + stage0["communication_bytes"] + stage0["activation_bytes"],
    }


def main():
    jobs = chosen_jobs()  # before the device profile: a wrong name fails at once
    work = tempfile.mkdtemp(prefix="sim-accuracy.")
    nvme = os.path.join(work, "nvme")
    os.makedirs(nvme)
    device = os.path.join(work, "device.json")
    with open(device, "w") as f:
        f.write(run([TROUPE, "profile-device", "--json", "--nvme-dir", nvme]).stdout)
    print(f"device: {json.load(open(device))['source']}", file=sys.stderr)
    rows, within = [], 0
    for name, ranks, m, sections in jobs:
        job = os.path.join(work, "job.toml")
        with open(job, "w") as f:
            f.write(f"[cluster]\nworld_size = {ranks}\n" + sections.format(nvme=nvme) + MODEL.format(m=m, steps=STEPS))
        cluster = os.path.join(work, "cluster.toml")
        with open(cluster, "w") as f:
            f.write(f"[cluster]\nhosts = 1\nranks_per_host = {ranks}\ndevice = \"{device}\"\ncompute = \"measured\"\n")
        measured, predicted, shares = [], [], []
        for k in range(ROUNDS):  # which goes first alternates: this machine drifts within a minute
            if k % 2 == 0:
                measured.append(steady(lambda: real(job, work), shares))
            predicted.append(steady(lambda: simulated(job, cluster), shares))
            if k % 2 == 1:
                measured.append(steady(lambda: real(job, work), shares))
        med = lambda runs, key: statistics.median(r[key] for r in runs)
        r = {k: med(measured, k) for k in ("step_ms", "bubble", "bytes")}
        p = {k: med(predicted, k) for k in ("step_ms", "bubble", "bytes")}
        step_err = p["step_ms"] / r["step_ms"] - 1
        bubble_err = 100 * (p["bubble"] - r["bubble"])
        mem_err = p["bytes"] / r["bytes"] - 1
        ok = abs(step_err) <= 0.10 and abs(bubble_err) <= 2 and abs(mem_err) <= 0.05
        # The step's compute (step x (1 - bubble)) apart from its idle: which of the two is off.
        busy_err = p["step_ms"] * (1 - p["bubble"]) / (r["step_ms"] * (1 - r["bubble"])) - 1
        within += ok
        rounds = [r["step_ms"] for r in measured]
        spread = (max(rounds) - min(rounds)) / r["step_ms"]
        rows.append(f"| {name} | {p['step_ms']:.0f} | {r['step_ms']:.0f} | {100 * step_err:+.1f}% | "
                    f"{100 * p['bubble']:.1f}% | {100 * r['bubble']:.1f}% | {bubble_err:+.1f} | {100 * busy_err:+.1f}% | "
                    f"{p['bytes'] / 1e6:.2f} | {r['bytes'] / 1e6:.2f} | {100 * mem_err:+.1f}% | {'yes' if ok else 'no'} | "
                    f"{100 * spread:.0f}% | {min(shares):.2f} |")
        print(rows[-1], file=sys.stderr)
    print("| job | predicted step ms | measured step ms | error | predicted bubble | measured bubble | "
          "points | busy error | predicted MB | measured MB | error | within | real spread | CPU share |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\n{within} of {len(jobs)} jobs within 10% step time, 2 points bubble and 5% memory "
          f"(medians of {ROUNDS} alternated rounds, {STEPS} steps each)")


if __name__ == "__main__":
    main()
