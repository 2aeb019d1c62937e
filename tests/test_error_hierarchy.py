"""One error hierarchy: no public code path raises a builtin exception.

Every ``raise`` in ``explorer/`` and ``widgets/`` names a project exception (a subclass of
``explorer.ExplorerError``; most also subclass ``ValueError`` so older ``except`` clauses
keep working), never a bare builtin. Re-raising (``raise``) and raising a caught exception
object are allowed. The few builtins that mean something to Python itself stay allowed where
the protocol needs them: ``StopIteration`` in iterators, ``AttributeError`` in
``__getattr__`` (so ``hasattr`` works), ``SystemExit`` (the CLI's exit code).
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import explorer as ex

ROOT = Path(__file__).resolve().parents[1]
BUILTIN_ERRORS = {
    name for name, obj in vars(builtins).items()
    if isinstance(obj, type) and issubclass(obj, BaseException)
}  # fmt: skip
PROTOCOL = {"StopIteration", "AttributeError", "KeyboardInterrupt", "GeneratorExit", "SystemExit"}


def _raised_name(node: ast.Raise) -> str | None:
    exc = node.exc
    if exc is None:
        return None
    if isinstance(exc, ast.Call):
        exc = exc.func
    return exc.id if isinstance(exc, ast.Name) else None


def builtin_raises() -> list[str]:
    found = []
    for folder in ("explorer", "widgets"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Raise):
                    name = _raised_name(node)
                    if name in BUILTIN_ERRORS and name not in PROTOCOL:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} raises {name}")
    return found


def test_no_builtin_exception_is_raised_by_project_code():
    assert builtin_raises() == []


def test_the_scan_sees_a_builtin_raise(tmp_path):
    # the check can fail: a raise of ValueError is found by the same walk
    tree = ast.parse("def f():\n    raise ValueError('x')\n")
    raises = [n for n in ast.walk(tree) if isinstance(n, ast.Raise)]
    assert [_raised_name(n) for n in raises] == ["ValueError"]


def test_every_area_error_is_an_explorer_error():
    import explorer.compiler.errors as compiler_errors

    areas = [ex.search.SearchError, ex.sharding.ShardingError, ex.trace.TraceError,
             compiler_errors.CompilerError]  # fmt: skip
    assert all(issubclass(e, ex.ExplorerError) for e in areas)
