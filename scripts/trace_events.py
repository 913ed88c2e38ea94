"""The complete spans of a troupe trace ([trace] path, or `troupe simulate --trace`): the
file's "traceEvents" (or its top-level list), the "X" events only. Shared by the trace
scripts beside it."""
import json


def spans(trace):
    events = json.load(open(trace))
    events = events["traceEvents"] if isinstance(events, dict) else events
    return [e for e in events if e.get("ph") == "X"]
