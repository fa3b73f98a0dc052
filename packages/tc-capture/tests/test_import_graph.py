"""The import graph of tc_capture: no cycle, and no import of our own modules inside a function.

Modules are parsed (not imported) with ``ast``; an edge ``a -> b`` means importing ``a`` imports
``b`` (``from .x import y`` is an edge to ``x.y`` when that is a module, else to ``x``; importing
``p.q`` also runs the package ``p``). Then every module is imported in a fresh interpreter, bottom
first, so each one's own imports are enough to load it.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import tc_capture

ROOT = pathlib.Path(tc_capture.__file__).parent
PACKAGE = "tc_capture"


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level:
        base = base[:len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))
    return node.module or ""


def _targets(module: str, path: pathlib.Path, mods: dict, tree: ast.AST | None = None) -> list[tuple[str, ast.AST]]:
    """(imported module of ours, the import statement) for every import in ``module``."""
    out = []
    for node in ast.walk(tree or ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            target = _resolve(module, path.name == "__init__.py", node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.append((sub if sub in mods else target, node))
        elif isinstance(node, ast.Import):
            out += [(alias.name, node) for alias in node.names]
    return [(t, n) for t, n in out if t == PACKAGE or t.startswith(PACKAGE + ".")]


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for module, path in mods.items():
        for target, _ in _targets(module, path, mods):
            parts = target.split(".")
            for k in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
                dep = ".".join(parts[:k])
                if dep in mods and dep != module and not module.startswith(dep + "."):
                    graph[module].add(dep)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and (found := visit(d)):
                return found
        state[m] = 2
        stack.pop()
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def _bottom_first(graph: dict[str, set[str]]) -> list[str]:
    order, done = [], set()

    def visit(m):
        if m in done:
            return
        done.add(m)
        for d in sorted(graph[m]):
            visit(d)
        order.append(m)

    for m in sorted(graph):
        visit(m)
    return order


def test_the_module_graph_has_no_cycle():
    graph = _graph()
    assert len(graph) > 20 and graph[f"{PACKAGE}.interp.calls"], "the graph was not read"
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph))}"


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_imports_ours_inside_a_function():
    mods = _modules()
    inside = []
    for module, path in mods.items():
        tree = ast.parse(path.read_text())
        top = {id(n) for n in tree.body} | {id(n) for s in tree.body if isinstance(s, ast.If) for n in s.body}
        inside += [f"{module}:{node.lineno} imports {target}" for target, node in _targets(module, path, mods, tree)
                   if id(node) not in top]
    assert not inside, "\n".join(inside)


def test_each_module_imports_in_a_fresh_interpreter_bottom_first():
    order = _bottom_first(_graph())
    code = f"import importlib\nfor m in {order!r}:\n    importlib.import_module(m)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
