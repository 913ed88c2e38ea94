#!/usr/bin/env python3
"""Checks that troupe's folders include each other only down the layers.

    scripts/check_layers.py [SOURCE_DIR]      # exit 1 and one line per offending include
    scripts/check_layers.py --graph           # the folder graph, with include counts
    scripts/check_layers.py --self-test       # shows the check fails on a bad tree

Reads every #include "..." and #include <...> whose first component is one of the
project's folders (or troupe/, the public headers under include/) in the files git tracks,
and checks two things: each folder includes only the folders LAYERS allows it, and the
folder graph has no cycle. The public headers (include/troupe) are the library's face and
count as part of runtime. Tests may include anything.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

# Each folder and the folders it may include (its own always). In dependency order.
LAYERS = {
    "base": [],
    "kernels": ["base"],
    "memory": ["base", "kernels"],
    "optim": ["base", "kernels"],
    "pipeline": ["base"],
    "transport": ["base", "kernels", "memory"],
    "actors": ["base", "kernels", "memory", "optim", "pipeline", "transport"],
    # The library a trainer links: config, launcher, engine, checkpoints, models.
    "runtime": ["base", "kernels", "memory", "optim", "pipeline", "transport", "actors"],
    # The simulator runs the library's scheduler actors against its interfaces.
    "sim": ["base", "kernels", "memory", "optim", "pipeline", "transport", "actors", "runtime"],
    # What is built on both: command line, benchmarks, profilers, simulate and plan.
    "tools": ["base", "kernels", "memory", "optim", "pipeline", "transport", "actors", "runtime", "sim"],
    # An outside trainer: the installed public headers only.
    "examples": ["runtime"],
}
SOURCE = re.compile(r"\.(cpp|hpp|cu|cuh|h)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*["<]([^">]+)[">]')


def folder_of_include(target):
    if "/" not in target:  # <memory> is the standard library's, "x.hpp" a neighbour
        return None
    first = target.split("/")[0]
    if first == "troupe":
        return "runtime"
    return first if first in LAYERS else None


def folder_of_file(path):
    first = path.split("/")[0]
    if first == "include":
        return "runtime"
    return first if first in LAYERS else None


def tracked_sources(root):
    listed = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True)
    if listed.returncode == 0 and listed.stdout:
        names = listed.stdout.split()
    else:  # not a git checkout (a source package, the self-test): walk the tree
        names = [os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs]
    return sorted(n for n in names if SOURCE.search(n) and os.path.isfile(os.path.join(root, n)))


def edges(root):
    """(from folder, to folder, file, line number, include) for every cross-folder include."""
    for name in tracked_sources(root):
        source = folder_of_file(name)
        if source is None:
            continue
        with open(os.path.join(root, name), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                target = folder_of_include(m.group(1)) if m else None
                if target is not None and target != source:
                    yield source, target, name, number, m.group(1)


def find_cycle(graph):
    """A list of folders forming a cycle, or None."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return None


def check(root):
    problems, graph = [], {}
    for source, target, name, number, text in edges(root):
        graph.setdefault(source, {}).setdefault(target, 0)
        graph[source][target] += 1
        if target not in LAYERS[source]:
            problems.append(f"{name}:{number}: {source}/ includes {text} of {target}/, "
                            f"which it may not (it may include {', '.join(LAYERS[source]) or 'nothing else'})")
    cycle = find_cycle(graph)
    if cycle:
        problems.append("the folders include each other in a cycle: " + " -> ".join(cycle))
    return problems, graph


def self_test():
    """The check must fail on a library file that includes a tool's, and on a cycle."""
    with tempfile.TemporaryDirectory() as root:
        def write(path, text):
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        write("tools/bench.hpp", "#pragma once\n")
        write("runtime/engine.cpp", '#include "tools/bench.hpp"\n')
        write("sim/world.cpp", '#include "runtime/engine.hpp"\n')
        write("runtime/engine.hpp", '#include "sim/world.hpp"\n')
        problems, _ = check(root)
        wanted = ["runtime/engine.cpp:1: runtime/ includes tools/bench.hpp", "cycle: "]
        missing = [w for w in wanted if not any(w in p for p in problems)]
        if missing:
            print("check_layers self-test: not reported: " + "; ".join(missing), file=sys.stderr)
            return 1
    print("check_layers self-test: a tool included by the library and a cycle are both reported")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--graph", action="store_true", help="print the folder graph")
    parser.add_argument("--self-test", action="store_true", help="check the checker")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    problems, graph = check(os.path.abspath(args.root))
    if args.graph:
        for source in LAYERS:
            targets = graph.get(source, {})
            print(f"{source:10} -> " + ", ".join(f"{t} ({n})" for t, n in sorted(targets.items())))
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print(f"layers: {sum(sum(t.values()) for t in graph.values())} includes across folders, "
              f"all down the layers, no cycle")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
