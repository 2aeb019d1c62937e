"""The compiler is layered bottom-up: its module-level imports form no cycle, no module
imports another explorer module inside a function (a lazy import dodging a cycle), tensor.py
imports nothing above it, and every module imports in a fresh interpreter in bottom-up
order."""

import ast
import subprocess
import sys
from pathlib import Path

import explorer

ROOT = Path(explorer.__file__).parent
PKG = ROOT / "compiler"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> list[str]:
    """The explorer modules an ``ImportFrom`` loads (a submodule when a name is one)."""
    if node.level:
        base = mod.split(".") if is_pkg else mod.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if not target.startswith("explorer"):
        return []
    out = []
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        path = ROOT.parent / Path(*sub.split("."))
        out.append(sub if path.with_suffix(".py").exists() or path.is_dir() else target)
    return out


def _imports() -> dict[str, tuple[set[str], list[str]]]:
    """module -> (explorer modules imported at module level, lazy imports inside functions)."""
    graph = {}
    for path in sorted(PKG.rglob("*.py")):
        mod = _module_name(path)
        tree = ast.parse(path.read_text())
        top: set[str] = set()
        lazy: list[str] = []
        for stmt in tree.body:
            if isinstance(stmt, ast.ImportFrom):
                top.update(_resolve(mod, path.name == "__init__.py", stmt))
            elif isinstance(stmt, ast.Import):
                top.update(a.name for a in stmt.names if a.name.startswith("explorer"))
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                for n in ast.walk(fn):
                    if isinstance(n, ast.ImportFrom) and (
                        n.level or (n.module or "").startswith("explorer")
                    ):
                        lazy.append(f"{mod}.{fn.name}: from {'.' * n.level}{n.module or ''}")
        graph[mod] = ({m for m in top if m.startswith("explorer.compiler")}, lazy)
    return graph


def _bottom_up(graph: dict[str, tuple[set[str], list[str]]]) -> list[str]:
    """A topological order (dependencies first); raises AssertionError naming a cycle."""
    order: list[str] = []
    state: dict[str, int] = {}  # 1 visiting, 2 done
    for start in sorted(graph):
        stack = [(start, iter(sorted(graph[start][0])))]
        if state.get(start):
            continue
        state[start] = 1
        while stack:
            mod, deps = stack[-1]
            nxt = next(deps, None)
            if nxt is None:
                stack.pop()
                state[mod] = 2
                order.append(mod)
            elif nxt in graph and state.get(nxt) == 1:
                cycle = [m for m, _ in stack][[m for m, _ in stack].index(nxt) :]
                raise AssertionError(f"import cycle: {' -> '.join([*cycle, nxt])}")
            elif nxt in graph and not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(sorted(graph[nxt][0]))))
    return order


def test_module_level_imports_are_acyclic():
    order = _bottom_up(_imports())
    assert order.index("explorer.compiler.tensor") < order.index("explorer.compiler.eager")
    assert order.index("explorer.compiler.eager") < order.index("explorer.compiler.trace_stack")
    assert order.index("explorer.compiler.trace_stack") < order.index(
        "explorer.compiler.functional"
    )
    assert order.index("explorer.compiler.autodiff") < order.index("explorer.compiler.jit.api")


def test_cycle_detector_finds_a_cycle():
    graph = {"a": ({"b"}, []), "b": ({"c"}, []), "c": ({"a"}, [])}
    try:
        _bottom_up(graph)
    except AssertionError as e:
        assert "a -> b -> c -> a" in str(e)
    else:
        raise AssertionError("the cycle a -> b -> c -> a was not reported")


def test_no_lazy_imports_of_explorer_modules():
    lazy = [x for _, (_, lz) in sorted(_imports().items()) for x in lz]
    assert lazy == []


def test_tensor_imports_nothing_above_it():
    deps, _ = _imports()["explorer.compiler.tensor"]
    assert deps <= {"explorer.compiler.errors"}


def test_each_module_imports_bottom_up_in_a_fresh_interpreter():
    order = _bottom_up(_imports())
    script = f"import importlib\nfor m in {order!r}:\n    importlib.import_module(m)\nprint('ok')"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=ROOT.parent)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"
