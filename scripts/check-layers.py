#!/usr/bin/env python3
"""Checks the layering of src/ (docs/architecture.md): every project include is written
"layer/file.h", names a file that exists, and points to the same layer or one below it; the
recorder includes nothing of the project outside itself; only src/plugin sees NCCL's ABI header;
and the include graph between files has no cycle.

    scripts/check-layers.py [SRC_DIR]      exit 0 when clean, 1 with one line per finding
    scripts/check-layers.py --self-test    proves the check fails on planted violations
"""
import os
import re
import sys
import tempfile

# Lowest first: a file may include its own layer and the layers before it.
LAYERS = ["base", "flightrec", "events", "stacks", "dump", "telemetry", "watchdog", "plugin"]
# Layers that may include nothing of the project but themselves.
SEALED = {"base", "flightrec"}
NCCL_ABI = "plugin/profiler_abi.h"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(src):
    for layer in sorted(os.listdir(src)):
        d = os.path.join(src, layer)
        if not os.path.isdir(d):
            continue
        for root, _, files in os.walk(d):
            for f in sorted(files):
                if f.endswith((".c", ".h")):
                    p = os.path.join(root, f)
                    yield os.path.relpath(p, src), p


def check(src):
    problems, graph = [], {}
    for rel, path in sources(src):
        layer = rel.split("/")[0]
        if layer not in LAYERS:
            problems.append(f"{rel}: folder '{layer}' is not a layer (add it to LAYERS)")
            continue
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        graph[rel] = []
        for inc in INCLUDE.findall(text):
            parts = inc.split("/")
            if len(parts) != 2 or parts[0] not in LAYERS:
                problems.append(f"{rel}: include \"{inc}\" is not written \"layer/file.h\"")
                continue
            if not os.path.exists(os.path.join(src, inc)):
                problems.append(f"{rel}: include \"{inc}\" names no file")
                continue
            target = parts[0]
            if LAYERS.index(target) > LAYERS.index(layer):
                problems.append(f"{rel}: include \"{inc}\" points up ({layer} -> {target})")
            elif layer in SEALED and target != layer:
                problems.append(f"{rel}: the {layer} layer includes nothing outside it, got \"{inc}\"")
            if inc == NCCL_ABI and layer != "plugin":
                problems.append(f"{rel}: only src/plugin includes NCCL's ABI header")
            graph[rel].append(inc)
    # Cycles between files (headers including each other, directly or not).
    state = {}
    def visit(node, stack):
        state[node] = 1
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                cyc = stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt]
                problems.append("include cycle: " + " -> ".join(cyc))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2
    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as d:
        def put(rel, text):
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w", encoding="utf-8") as fh:
                fh.write(text)
        put("base/a.h", '#include "events/b.h"\n')        # up
        put("events/b.h", '#include "events/c.h"\n')
        put("events/c.h", '#include "events/b.h"\n')      # cycle
        put("events/d.c", '#include "../base/a.h"\n')     # style
        put("dump/e.c", '#include "plugin/profiler_abi.h"\n')  # up and ABI
        put("plugin/profiler_abi.h", "\n")
        put("flightrec/f.c", '#include "base/a.h"\n')     # sealed
        found = check(d)
    want = ["points up (base -> events)", "include cycle", "not written", "only src/plugin",
            "includes nothing outside it"]
    missing = [w for w in want if not any(w in p for p in found)]
    for w in missing:
        print(f"self-test: no finding for '{w}'")
    print("self-test:", "ok" if not missing else "FAILED")
    return 1 if missing else 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        return self_test()
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
    problems = check(src)
    for p in problems:
        print(p)
    print(f"layers: {len(problems)} finding(s)" if problems else "layers: clean")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
