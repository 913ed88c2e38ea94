#!/usr/bin/env python3
"""Counts the places outside tests that decide something from the ZeRO stage's number.

A ZeRO stage is meant to be decided once (memory/zero_policy.hpp): this lists every line of
the C++ sources that compares a stage number (`stage == 3`, `store.stage() < 2`,
`switch (plan.stage)`, `stage >= 2 ? ...`) and is not the policy itself or the loader's
range check of the key. Pipeline stages (`place.stage`, a ring's `stage`) are not ZeRO
stages and are left out by name.

Usage: scripts/count_zero_branches.py [--list] [ROOT]   (prints the count; --list each line)
"""
import pathlib
import re
import sys

FOLDERS = ["base", "kernels", "memory", "optim", "transport", "actors", "runtime", "sim", "tools"]  # pipeline/: no ZeRO
# The one decision, and files whose `stage` is a pipeline or ring stage.
EXEMPT = {"memory/zero_policy.hpp", "memory/zero_policy.cpp", "transport/collective.cpp", "sim/trace_hops.cpp"}
STAGE = r"(?:zero\.stage|zero_stage|(?:\.|->)stage\(\)|\bplan_?\.stage|\bin\.stage|\bz\.stage|\be\.stage|\bstage|\bzero)"
COMPARED = re.compile(STAGE + r"\s*(?:==|!=|<=|>=|<|>)\s*[0-3]\b|switch\s*\(\s*[\w.>-]*" + STAGE + r"\s*\)")
NOT_ZERO = re.compile(r"place\.stage|pipeline stage|\.stages\b")


def branches(root):
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".cpp", ".hpp", ".cu", ".cuh"):
                continue
            name = path.relative_to(root).as_posix()
            if name in EXEMPT:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("//")[0]
                if COMPARED.search(code) and not NOT_ZERO.search(code):
                    yield f"{name}:{number}: {line.strip()}"


def main():
    args = [a for a in sys.argv[1:] if a != "--list"]
    root = pathlib.Path(args[0] if args else pathlib.Path(__file__).resolve().parent.parent)
    found = list(branches(root))
    if "--list" in sys.argv:
        for line in found:
            print(line)
    print(len(found))


if __name__ == "__main__":
    main()
