"""The layers of csrc/ as a graph of #include arrows, and their sizes.

    python tools/layers.py            # line counts per layer, and the bindings' ratio
    python tools/layers.py --graph    # the arrows between layers (A -> B: a file of A includes one of B)

A layer is a folder of csrc/ (csrc/python/<x> for the bindings). The engine is what the
extensions are built on: core/, the two backends cpu/ and cuda/, the data plumbing data/ and
the game shogi/. The bindings are the product's Python glue, csrc/python/{common,core,cuda}
(manaka._core and manaka._cuda); csrc/python/testing is the test-hook extension
manaka._testing, counted apart. tests/packaging/test_layers.py holds the arrows to the rules
below; docs/design.md ("Layers") draws them."""
import argparse
import collections
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = os.path.join(ROOT, "csrc")
SOURCE = (".c", ".h", ".cu", ".cuh", ".def")

ENGINE = ("core", "cpu", "cuda", "data", "shogi")
BINDINGS = ("python/common", "python/core", "python/cuda")
TEST_HOOKS = ("python/testing",)

# Which layers each layer may include (besides itself). Nothing below the bindings includes a
# binding; the engine's core includes nothing else; the data plumbing names no game.
ALLOWED = {
    "core": set(),
    "cpu": {"core"},
    "cuda": {"core"},
    "data": {"core"},
    "shogi": {"core", "data"},
    "python/common": {"core", "data"},
    "python/core": {"core", "cpu", "data", "shogi", "python/common"},
    "python/cuda": {"core", "cuda", "python/common"},
    "python/testing": {"core", "cpu", "data", "python/common"},
}

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path: str) -> str:
    rel = os.path.relpath(os.path.dirname(path), CSRC).replace(os.sep, "/")
    return "/".join(rel.split("/")[:2]) if rel.startswith("python") else rel.split("/")[0]


def files():
    for folder, _, names in os.walk(CSRC):
        for name in sorted(names):
            if name.endswith(SOURCE):
                yield os.path.join(folder, name)


def include_arrows():
    """{(from layer, to layer): [(file, included name)]} for every #include "..." that crosses
    layers, resolved as the compiler does (beside the file first, then from csrc/)."""
    arrows = collections.defaultdict(list)
    for path in files():
        with open(path, errors="replace") as f:
            text = f.read()
        for name in _INCLUDE.findall(text):
            beside = os.path.join(os.path.dirname(path), name)
            target = beside if os.path.exists(beside) else os.path.join(CSRC, name)
            if not os.path.exists(target):
                continue  # a system or generated header
            a, b = layer_of(path), layer_of(target)
            if a != b:
                arrows[(a, b)].append((os.path.relpath(path, ROOT), name))
    return arrows


def cycles(arrows):
    """The layers that lie on a circle of arrows (empty when the graph is a DAG)."""
    graph = collections.defaultdict(set)
    for a, b in arrows:
        graph[a].add(b)
    on_cycle, state = set(), {}

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                on_cycle.update(stack[stack.index(nxt):])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in list(graph):
        if node not in state:
            visit(node, [])
    return on_cycle


def python_import_arrows(package: str = "manaka"):
    """{module: {modules it imports at module level}} inside `package` (imports inside
    functions, which run later, are not arrows). `from . import x` is an arrow to the
    submodule x when there is one, else to the package."""
    import ast

    modules = {}
    for folder, _, names in os.walk(os.path.join(ROOT, package)):
        for name in names:
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(folder, name), ROOT)[:-3].replace(os.sep, ".")
                modules[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = os.path.join(folder, name)
    arrows = collections.defaultdict(set)
    for module, path in modules.items():
        with open(path) as f:
            tree = ast.parse(f.read())
        here = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
        for node in tree.body:
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = here.split(".")[:len(here.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                # a private name that is no .py module is a compiled extension (_core, _cuda,
                # _testing): it imports nothing of the package, so it is no arrow
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules or a.name.startswith("_") else base
                           for a in node.names]
            else:
                continue
            arrows[module].update(t for t in targets if t in modules and t != module)
    return arrows


def line_counts():
    counts = collections.Counter()
    for path in files():
        with open(path, errors="replace") as f:
            counts[layer_of(path)] += sum(1 for _ in f)
    return counts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graph", action="store_true", help="print the arrows between layers")
    args = p.parse_args(argv)
    if args.graph:
        for (a, b), where in sorted(include_arrows().items()):
            print(f"{a:>16} -> {b:<16} {len(where):3d} includes{'' if b in ALLOWED.get(a, set()) else '   NOT ALLOWED'}")
        return 0
    counts = line_counts()
    engine = sum(counts[layer] for layer in ENGINE)
    bindings = sum(counts[layer] for layer in BINDINGS)
    hooks = sum(counts[layer] for layer in TEST_HOOKS)
    for layer in sorted(counts):
        print(f"csrc/{layer:<16} {counts[layer]:6d}")
    print(f"engine   ({', '.join(ENGINE)}): {engine}")
    print(f"bindings ({', '.join(BINDINGS)}): {bindings}  = {bindings / engine:.3f} x the engine")
    print(f"test hooks ({', '.join(TEST_HOOKS)}): {hooks}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
