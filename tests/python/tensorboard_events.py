"""Reads troupe's TensorBoard event files with TensorBoard's own reader and holds them to
the metrics file: every scalar at every step equal to the JSONL's value of the same name,
as a 32-bit float (what TensorBoard stores and shows).

    tensorboard_events.py check TB_DIR METRICS_JSONL [CSV_DIR]

A tag is "<group>/<key>", key being the metrics file's field. Every step of the JSONL must
be in the event files once (a resumed run's restart hides what earlier files held from its
first step on), with every field the monitor writes; DeepSpeed's CSV files, when given,
must hold the same values. Exit 0 and one summary line, or exit 1 naming the first
difference.
"""
import csv
import json
import math
import os
import sys

import numpy

# The accumulator TensorBoard's server loads runs with: it keeps tensor summaries and purges
# what a restart (SessionLog START) hides.
from tensorboard.backend.event_processing import plugin_event_accumulator as event_accumulator
from tensorboard.util import tensor_util

ALWAYS = ["loss", "lr", "skipped", "tokens_per_s", "step_ms", "bubble", "sent_bytes",
          "model_state_bytes", "parameter_bytes", "gradient_bytes", "optimizer_state_bytes",
          "communication_bytes", "activation_bytes", "device_bytes"]


def expected_keys(line):
    keys = list(ALWAYS)
    if line.get("grad_norm") is not None and not line["skipped"]:
        keys.append("grad_norm")
    if line["loss_scale"] > 0:
        keys.append("loss_scale")
    if line["step_flops"] > 0:  # the model's FLOPs known: an MFU
        keys.append("mfu")
    if "val_loss" in line:
        keys += ["val_loss", "val_perplexity"]
    return keys


def as_number(value):
    return float(value) if not isinstance(value, bool) else (1.0 if value else 0.0)


def read_events(folder):
    acc = event_accumulator.EventAccumulator(folder, size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
    by_step = {}
    for tag in acc.Tags()[event_accumulator.TENSORS]:
        for event in acc.Tensors(tag):
            values = by_step.setdefault(event.step, {})
            key = tag.split("/", 1)[1]
            if key in values:
                raise SystemExit(f"{tag} appears twice at step {event.step}")
            values[key] = tensor_util.make_ndarray(event.tensor_proto).item()
    return by_step


def check_csv(folder, metrics):
    files = sorted(f for f in os.listdir(folder) if f.endswith(".csv"))
    if not files:
        raise SystemExit(f"no CSV files in {folder}")
    checked = 0
    for name in files:
        with open(os.path.join(folder, name), newline="") as f:
            rows = list(csv.reader(f))
        key = rows[0][1]
        if rows[0][0] != "step":
            raise SystemExit(f"{name}: header {rows[0]}, expected step,{key}")
        steps = [int(step) for step, _ in rows[1:]]
        want_steps = sorted(s for s, line in metrics.items() if key in expected_keys(line))
        if steps != want_steps:
            raise SystemExit(f"{name} has steps {steps}, expected each of {want_steps} once")
        for step, value in rows[1:]:
            want = as_number(metrics[int(step)][key])
            if float(value) != want:
                raise SystemExit(f"{name} step {step}: {value} != metrics file's {key} {want!r}")
            checked += 1
    return len(files), checked


def check(tb_dir, metrics_path, csv_dir=None):
    metrics = {}
    with open(metrics_path) as f:
        for text in f:
            line = json.loads(text)
            metrics[line["step"]] = line
    events = read_events(tb_dir)
    if sorted(events) != sorted(metrics):
        raise SystemExit(f"event files have steps {sorted(events)}, the metrics file {sorted(metrics)}")
    scalars = 0
    for step, line in metrics.items():
        got = events[step]
        want_keys = expected_keys(line)
        if sorted(got) != sorted(want_keys):
            raise SystemExit(f"step {step}: event files have {sorted(got)}, expected {sorted(want_keys)}")
        for key in want_keys:
            want = float(numpy.float32(as_number(line[key])))
            if got[key] != want and not (math.isnan(got[key]) and math.isnan(want)):
                raise SystemExit(f"step {step}: {key} is {got[key]!r} in the event files, {want!r} in the metrics file")
            scalars += 1
    summary = f"{len(metrics)} steps, {scalars} scalars equal to the metrics file's (as 32-bit floats)"
    if csv_dir:
        files, rows = check_csv(csv_dir, metrics)
        summary += f"; {files} CSV files, {rows} values equal"
    print(summary)


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5) or sys.argv[1] != "check":
        raise SystemExit(__doc__)
    check(*sys.argv[2:])
