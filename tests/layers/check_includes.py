#!/usr/bin/env python3
"""The layering of src/, checked from its #include "..." lines.

usage: check_includes.py SRC_DIR [--alias OLD=NEW]...

Prints one line per violation and exits 1 when there is any, 0 when none:
  unknown folder  a folder under SRC_DIR that LAYERS below does not place
  layer           an include from a folder to a higher level, or to another
                  folder of the same level
  cycle           modules that include each other, directly or round a loop
A module is x.c with x.h in one folder; module A depends on module B when A.c or
A.h includes B.h. --alias dist=comm checks a folder under its old name as the
folder it became (a tree from before a rename).
Standard library only: the check runs wherever the tests run.
"""
import os
import re
import sys

# The map of the code, lowest layer first. A folder may include itself and any
# folder of a strictly lower level; nothing else. docs/ARCHITECTURE.md shows the
# same table: change both together. A new folder under src/ must be placed here.
LAYERS = {
    "core": 0,
    "kernels": 1, "data": 1, "comm": 1, "io": 1,
    "moe": 2,
    "model": 3,
    "train": 4, "plan": 4,
    "api": 5,
    "cli": 6,
}

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def usage():
    sys.stderr.write("usage: check_includes.py SRC_DIR [--alias OLD=NEW]...\n")
    sys.exit(2)


def parse_args(argv):
    src, aliases = None, {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--alias" and i + 1 < len(argv) and "=" in argv[i + 1]:
            old, new = argv[i + 1].split("=", 1)
            if new not in LAYERS:
                sys.stderr.write(f"check_includes.py: --alias {old}={new}: {new} is not in the layer table\n")
                sys.exit(2)
            aliases[old] = new
            i += 2
        elif src is None and not arg.startswith("-"):
            src = arg
            i += 1
        else:
            usage()
    if src is None or not os.path.isdir(src):
        usage()
    return src, aliases


def source_files(src):
    """Every .c and .h under src, as paths relative to it with '/' separators, sorted."""
    found = []
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for name in files:
            if name.endswith((".c", ".h")):
                found.append(os.path.relpath(os.path.join(root, name), src).replace(os.sep, "/"))
    return sorted(found)


def resolve(src, includer, target):
    """The file under src that `#include "target"` in includer names, or None when it
    is outside src (a system or library header). Quoted includes search the
    includer's own folder first, then the include path (src/, as CMake sets it)."""
    beside = os.path.normpath(os.path.join(os.path.dirname(includer), target)).replace(os.sep, "/")
    if not beside.startswith("../") and os.path.isfile(os.path.join(src, beside)):
        return beside
    rooted = os.path.normpath(target).replace(os.sep, "/")
    if not rooted.startswith("../") and os.path.isfile(os.path.join(src, rooted)):
        return rooted
    return None


def folder_of(path):
    return path.split("/", 1)[0] if "/" in path else ""


def module_of(path):
    return os.path.splitext(path)[0]


def strongly_connected(graph):
    """Tarjan's algorithm, iterative; components listed in sorted order of members."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                comps.append(sorted(comp))
    return sorted(comps)


def shortest_loop(graph, members):
    """A shortest cycle through the first member, staying inside the component."""
    inside = set(members)
    first = members[0]
    previous = {first: None}
    queue = [first]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph.get(node, ())):
            if child == first:
                path = [node]
                while previous[path[-1]] is not None:
                    path.append(previous[path[-1]])
                return list(reversed(path)) + [first]
            if child in inside and child not in previous:
                previous[child] = node
                queue.append(child)
    return members + [first]


def main():
    src, aliases = parse_args(sys.argv[1:])

    def level(folder):
        return LAYERS.get(aliases.get(folder, folder))

    problems = []
    folders = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    for folder in folders:
        if level(folder) is None:
            problems.append(f"unknown folder: src/{folder}/ is not placed in the layer table "
                            f"(LAYERS in tests/layers/check_includes.py)")

    graph = {}   # module -> modules it includes
    sites = {}   # (module, module) -> first include site, for the cycle messages
    layer_lines = []
    for path in source_files(src):
        here = folder_of(path)
        if here == "":
            problems.append(f"unknown folder: src/{path} lies outside every layer folder")
        graph.setdefault(module_of(path), set())
        with open(os.path.join(src, path), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                match = INCLUDE.match(line)
                if not match:
                    continue
                target = resolve(src, path, match.group(1))
                if target is None:
                    continue
                site = f"src/{path}:{lineno} includes {match.group(1)}"
                a, b = module_of(path), module_of(target)
                if a != b:
                    graph[a].add(b)
                    sites.setdefault((a, b), site)
                there = folder_of(target)
                la, lb = level(here), level(there)
                if aliases.get(here, here) == aliases.get(there, there) or la is None or lb is None:
                    continue
                if la < lb:
                    layer_lines.append(f"layer: {site}: {here} (level {la}) may not include "
                                       f"{there} (level {lb})")
                elif la == lb:
                    layer_lines.append(f"layer: {site}: {here} and {there} are both level {la} "
                                       f"and may not include each other")
    problems += layer_lines

    for members in strongly_connected(graph):
        if len(members) < 2:
            continue
        loop = shortest_loop(graph, members)
        how = "; ".join(sites[(loop[i], loop[i + 1])] for i in range(len(loop) - 1))
        problems.append(f"cycle: {' -> '.join(loop)} (members: {', '.join(members)}; {how})")

    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
