#!/usr/bin/env python3
"""The layers of src/ (docs/architecture.md), checked: a file may call its own layer or lower,
never higher, and no two files may call each other, directly or around a loop. A file includes
the headers of its own layer or lower ones only, for their types too.

    scripts/check_layers.py [--src DIR] [--nm NM] [--graph] OBJECT...

The calls between files come from the library's object files: `nm` tells which file defines each
symbol and which files use it. An OBJECT argument may hold several paths separated by ';' (as
CMake's $<TARGET_OBJECTS:...> gives them). Calls to a header's static inline functions and
function-like macros leave no symbol, so the sources are searched for those names too. Every
file of src/ must have a layer in LAYERS below.

Exit status: 0 when the layers hold, 1 on a violation (each is printed), 2 on a usage error.
Python 3 standard library only.
"""

import argparse
import os
import re
import subprocess
import sys

# Each file of src/ (by name, without .c or .h) and its layer, from the bottom up. A file calls
# its own layer or lower ones; docs/architecture.md says what each layer is for.
LAYERS = [
    ("base", ["error", "sys", "fault", "op", "init", "settings", "cancel", "version", "stats",
              "frame_check"]),
    ("loaders", ["dl", "cuda", "cufile", "curl", "http", "uring", "nvcomp", "nvcomp_abi",
                 "jansson"]),
    ("resources", ["pool", "bounce", "registry", "staging", "memory", "device_pool", "numa"]),
    ("io paths", ["posix_io", "device_io", "zero_copy", "zero_copy_read", "page_cache", "gds", "append"]),
    ("requests", ["future", "request", "stream_io"]),
    ("handles", ["file", "mmap", "remote", "batch", "batch_pool", "batch_uring", "batch_cufile", "batch_state"]),
    ("entry points", ["cufile_driver", "codec", "safetensors"]),
    ("fused calls", ["read_decompress"]),
]

LAYER_OF = {name: (rank, layer) for rank, (layer, names) in enumerate(LAYERS) for name in names}


def module_of(path):
    """registry.c.o, registry.c and registry.h are all the module 'registry'."""
    return os.path.basename(path).split(".", 1)[0]


def nm_symbols(nm, obj):
    """The global symbols an object defines, and those it uses without defining."""
    def run(*flags):
        out = subprocess.run([nm, "-P", *flags, obj], check=True, capture_output=True, text=True)
        return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}
    return run("-g", "--defined-only"), run("-u")


def strip_c(text):
    """The source without comments, string and character literals (which may name functions)."""
    pattern = r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\''
    return re.sub(pattern, " ", text, flags=re.S)


INLINE_DEF = re.compile(r"\bstatic\s+inline\b[^;{}()]*?\b(\w+)\s*\(")
MACRO_DEF = re.compile(r"^[ \t]*#[ \t]*define[ \t]+((?:kvik__|KVIK__)\w+)\(", re.M)


def header_names(src, headers):
    """Static inline functions and function-like macros of src/ headers: name -> module."""
    owner = {}
    for header in headers:
        text = strip_c(open(os.path.join(src, header), encoding="utf-8").read())
        for name in INLINE_DEF.findall(text) + MACRO_DEF.findall(text):
            owner[name] = module_of(header)
    return owner


def add_edge(edges, caller, callee, symbol):
    if caller != callee:
        edges.setdefault(caller, {}).setdefault(callee, set()).add(symbol)


def source_edges(src, files, owner, edges):
    """Uses of header-only names (static inline functions, macros) from each src file."""
    names = "|".join(map(re.escape, sorted(owner)))
    use = re.compile(r"\b(" + names + r")\s*\(") if owner else None
    for name in files:
        text = strip_c(open(os.path.join(src, name), encoding="utf-8").read())
        for symbol in set(use.findall(text)) if use else ():
            add_edge(edges, module_of(name), owner[symbol], symbol)


INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"/]+)\.h"', re.M)


def upward_includes(src, files):
    """Each include of a src/ header from a higher layer than the including file's."""
    found = []
    for name in files:
        rank, layer = LAYER_OF[module_of(name)]
        for header in INCLUDE.findall(open(os.path.join(src, name), encoding="utf-8").read()):
            if header in LAYER_OF and LAYER_OF[header][0] > rank:
                found.append(f"upward include: src/{name} ({layer}) includes "
                             f"src/{header}.h ({LAYER_OF[header][1]})")
    return found


def object_edges(nm, objects, edges):
    defined_by, uses = {}, {}
    for obj in objects:
        defined, undefined = nm_symbols(nm, obj)
        for symbol in defined:
            defined_by[symbol] = module_of(obj)
        uses[module_of(obj)] = undefined
    for caller, symbols in uses.items():
        for symbol in symbols:
            if symbol in defined_by:
                add_edge(edges, caller, defined_by[symbol], symbol)


def cycles(nodes, edges):
    """Strongly connected components of more than one file (Tarjan), each as a list."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


def loop_in(component, edges):
    """One loop through the component's first file, as a list of files that starts and ends
    with it (breadth first, so the shortest)."""
    start, members = component[0], set(component)
    came_from, queue = {start: None}, [start]
    for v in queue:
        for w in sorted(edges.get(v, {})):
            if w == start:
                path = [v]
                while came_from[path[-1]] is not None:
                    path.append(came_from[path[-1]])
                return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, v, start]
            if w in members and w not in came_from:
                came_from[w] = v
                queue.append(w)
    return component + [start]


def describe(module):
    rank, layer = LAYER_OF[module]
    return f"{module} ({layer}, layer {rank})"


def example(symbols):
    listed = sorted(symbols)
    return ", ".join(listed[:3]) + (f" and {len(listed) - 3} more" if len(listed) > 3 else "")


def check(src, objects, nm, show_graph):
    names = sorted(f for f in os.listdir(src) if f.endswith((".c", ".h")))
    problems = []
    for name in names:
        if module_of(name) not in LAYER_OF:
            problems.append(f"src/{name} has no layer: add it to LAYERS in scripts/check_layers.py "
                            "(and to docs/architecture.md)")
    modules = {module_of(n) for n in names}
    for stale in sorted(set(LAYER_OF) - modules):
        problems.append(f"LAYERS names '{stale}', which is no file of src/: remove it")
    if problems:
        return problems

    edges = {}
    object_edges(nm, objects, edges)
    source_edges(src, names, header_names(src, [n for n in names if n.endswith(".h")]), edges)
    for caller in sorted(edges):
        for callee, symbols in sorted(edges[caller].items()):
            if LAYER_OF[callee][0] > LAYER_OF[caller][0]:
                problems.append(f"upward call: {describe(caller)} calls {describe(callee)}: "
                                f"{example(symbols)}")
    problems += upward_includes(src, names)
    for component in cycles(modules, edges):
        loop = loop_in(component, edges)
        steps = "; ".join(f"{a} calls {example(edges[a][b])}" for a, b in zip(loop, loop[1:]))
        knot = ""
        if len(component) > len(loop) - 1:
            knot = f"; all {len(component)} files in it: {', '.join(component)}"
        problems.append(f"cycle between files: {' -> '.join(loop)} ({steps}{knot})")
    if show_graph:
        for caller in sorted(modules, key=lambda m: (LAYER_OF[m][0], m)):
            callees = sorted(edges.get(caller, {}), key=lambda m: (-LAYER_OF[m][0], m))
            print(f"{LAYER_OF[caller][1]:>12}  {caller} -> {' '.join(callees) or '(nothing)'}")
    calls = sum(len(v) for v in edges.values())
    if not problems:
        print(f"check_layers: {len(modules)} files in {len(LAYERS)} layers, {calls} file-to-file "
              "dependencies: none calls or includes a higher layer, no cycle")
    return problems


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", default=os.path.join(here, "..", "src"), help="the src/ directory")
    parser.add_argument("--nm", default=os.environ.get("NM", "nm"), help="the nm to run")
    parser.add_argument("--graph", action="store_true", help="print each file's dependencies")
    parser.add_argument("objects", nargs="+", help="the library's object files")
    args = parser.parse_args()
    objects = [p for arg in args.objects for p in arg.split(";") if p]
    missing = [p for p in objects if not os.path.isfile(p)]
    if not objects or missing:
        print(f"check_layers: no such object file: {', '.join(missing) or '(none given)'}",
              file=sys.stderr)
        return 2
    problems = check(args.src, objects, args.nm, args.graph)
    for problem in problems:
        print(f"check_layers: {problem}", file=sys.stderr)
    if problems:
        print(f"check_layers: {len(problems)} violation(s) of the layers of docs/architecture.md",
              file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
