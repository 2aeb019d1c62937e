"""The house's imports read from the source: what each module imports, from where (module
level, inside a function, under ``if TYPE_CHECKING:``), and the graph algorithms the layering
tests run on them (cycles, a bottom-up order, imports that run back up a floor).

Shared by ``tests/test_house.py`` (the whole core) and ``tests/compiler/test_layering.py``
(the compiler's own order). Nothing is imported or run: the files are parsed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORE = "explorer"


@dataclass(frozen=True)
class Import:
    """One import statement's edge: ``module`` loads ``target`` (a core module).

    ``scope`` is "" at module level, else the qualified name of the function holding it
    (``Graph.__str__``); ``type_checking`` marks an import under ``if TYPE_CHECKING:``.
    """

    module: str
    target: str
    names: tuple[str, ...]
    line: int
    scope: str = ""
    type_checking: bool = False

    @property
    def at_module_level(self) -> bool:
        return not self.scope and not self.type_checking

    def __str__(self) -> str:
        where = f" in {self.scope}" if self.scope else ""
        where += " under TYPE_CHECKING" if self.type_checking else ""
        names = f" ({', '.join(self.names)})" if self.names else ""
        return f"{self.module}:{self.line}{where} imports {self.target}{names}"


def module_name(path: Path, root: Path = REPO) -> str:
    """``explorer/ir/graph.py`` -> ``explorer.ir.graph``; a package's ``__init__.py`` -> the
    package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_package(module: str, root: Path = REPO) -> bool:
    return (root / Path(*module.split(".")) / "__init__.py").exists()


def _is_module(module: str, root: Path) -> bool:
    path = root / Path(*module.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def read_imports(path: Path, root: Path = REPO, core: str = CORE) -> list[Import]:
    """Every import of a ``core`` module in one file, in source order.

    ``from P import a`` loads ``P.a`` when that is a module (a file or a package), else ``P``.
    """
    module = module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: list[Import] = []
    # an explicit stack, not recursion: (node, qualified scope, under TYPE_CHECKING,
    # inside a function)
    stack: list[tuple[ast.AST, str, bool, bool]] = [(ast.parse(path.read_text()), "", False, False)]
    while stack:
        node, qual, checking, in_fn = stack.pop()
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == core or target.startswith(core + "."):
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    tgt, names = (sub, ()) if _is_module(sub, root) else (target, (alias.name,))
                    out.append(Import(module, tgt, names, node.lineno, qual if in_fn else "",
                                      checking))  # fmt: skip
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == core or alias.name.startswith(core + "."):
                    out.append(Import(module, alias.name, (), node.lineno, qual if in_fn else "",
                                      checking))  # fmt: skip
            continue
        children: list[tuple[ast.AST, str, bool, bool]] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            inner = f"{qual}.{node.name}" if qual else node.name
            fn = in_fn or not isinstance(node, ast.ClassDef)
            children = [(c, inner, checking, fn) for c in node.body]
            children += [(d, qual, checking, in_fn) for d in node.decorator_list]
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            children = [(c, qual, True, in_fn) for c in node.body]
            children += [(c, qual, checking, in_fn) for c in node.orelse]
        else:
            children = [(c, qual, checking, in_fn) for c in ast.iter_child_nodes(node)]
        stack.extend(reversed(children))
    return sorted(out, key=lambda i: i.line)


@cache
def core_imports(package: str = CORE) -> dict[str, tuple[Import, ...]]:
    """Module -> its imports of core modules, for every module of ``package``."""
    top = REPO / Path(*package.split("."))
    return {module_name(p): tuple(read_imports(p)) for p in sorted(top.rglob("*.py"))}


def module_graph(imports: Mapping[str, Iterable[Import]]) -> dict[str, set[str]]:
    """Module -> the modules it loads at import time (module level, not TYPE_CHECKING)."""
    return {m: {i.target for i in imps if i.at_module_level} for m, imps in imports.items()}


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Every import circle: one loop ``[a, b, ..., a]`` per group of modules that import
    each other (a strongly connected component, found by Tarjan's algorithm without
    recursion), sorted. Edges to modules outside ``graph`` are ignored."""
    succ = {m: sorted(d for d in deps if d in graph) for m, deps in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []
    for start in sorted(succ):
        if start in index:
            continue
        work = [(start, iter(succ[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    group = []
                    while True:
                        x = stack.pop()
                        on_stack.discard(x)
                        group.append(x)
                        if x == v:
                            break
                    if len(group) > 1 or v in succ[v]:
                        groups.append(sorted(group))
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                on_stack.add(w)
                work.append((w, iter(succ[w])))
            elif w in on_stack:
                low[v] = min(low[v], index[w])
    return sorted(_loop(g, succ) for g in groups)


def _loop(group: list[str], succ: Mapping[str, list[str]]) -> list[str]:
    """A shortest loop from the group's first module back to itself, inside the group."""
    members, first = set(group), group[0]
    parent: dict[str, str] = {}
    frontier = [first]
    while frontier:
        nxt = []
        for v in frontier:
            for w in succ[v]:
                if w == first:
                    path = [v]
                    while path[-1] != first:
                        path.append(parent[path[-1]])
                    return [*reversed(path), first]
                if w in members and w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    return [first, first]


def bottom_up(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """The modules in an order where each comes after every module it imports; raises
    ``AssertionError`` naming each import circle."""
    found = cycles(graph)
    if found:
        raise AssertionError("import circle(s): " + "; ".join(" -> ".join(loop) for loop in found))
    order: list[str] = []
    done: set[str] = set()
    for start in sorted(graph):
        work = [(start, iter(sorted(d for d in graph[start] if d in graph)))]
        if start in done:
            continue
        done.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                order.append(v)
            elif w not in done:
                done.add(w)
                work.append((w, iter(sorted(d for d in graph[w] if d in graph))))
    return order


def room(module: str, floors: Sequence[Sequence[str]]) -> str:
    """The longest name declared in ``floors`` that is ``module`` or a package above it."""
    names = [n for floor in floors for n in floor]
    # the core itself holds only its front door: a new area must be declared, not inherited
    held = [n for n in names if module == n or (n != CORE and module.startswith(n + "."))]
    best = max(held, key=len, default=None)
    if best is None:
        raise AssertionError(f"{module} stands on no declared floor; add it to FLOORS")
    return best


def floor_of(module: str, floors: Sequence[Sequence[str]]) -> int:
    """The index in ``floors`` (0 = the ground) of the room holding ``module``."""
    name = room(module, floors)
    return next(k for k, floor in enumerate(floors) if name in floor)


def upward(imports: Iterable[Import], floors: Sequence[Sequence[str]]) -> list[str]:
    """Each import that runs from a lower floor to a higher one, named."""
    out = []
    for i in imports:
        a, b = floor_of(i.module, floors), floor_of(i.target, floors)
        if b > a:
            out.append(f"{i} (floor {a}: {room(i.module, floors)} -> floor {b}: "
                       f"{room(i.target, floors)})")  # fmt: skip
    return out
