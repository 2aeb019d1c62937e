"""The house holds: the core (``explorer/``) stands on floors declared below and every import
points down or along its floor; no module-level import circle; no function-local import of
a core module except the method facades listed with their reason; no ``if TYPE_CHECKING:``
import of a core module; every module imports bottom-up in a fresh interpreter; and the
views (``widgets/``) import only the core's public names from its front doors.

The detectors are tested on small fake graphs first, so each check is known to fail when
the house breaks. Walker and graph algorithms: ``tests/house.py``.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.house import (
    CORE,
    REPO,
    Import,
    bottom_up,
    core_imports,
    cycles,
    floor_of,
    is_package,
    module_graph,
    read_imports,
    upward,
)

# The floors of the core, the ground first. A room imports only rooms on its own floor or
# below; rooms on one floor may import each other as long as no circle forms.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("explorer.errors",),  # ExplorerError, the root of every area's errors
    ("explorer.checks", "explorer.memo", "explorer.jsonfile"),  # shared utilities
    ("explorer.ir", "explorer.hardware", "explorer.trace"),  # the graph, the machines, traces
    ("explorer.sharding", "explorer.models", "explorer.compiler", "explorer.traces"),  # on the IR
    ("explorer.search",),  # operator-sharding search over sharding's strategies
    ("explorer.training",),  # the training step, on models, search and hardware
    # plans to real engines; exercises and rank maps; two plans compared; how robust a choice is
    ("explorer.export", "explorer.teach", "explorer.diff", "explorer.robustness"),
    ("explorer.cli",),  # python -m explorer
    ("explorer", "explorer.__main__"),  # the front door
)

# Function-local imports of core modules that stay: (module, function) -> why, one line each.
FACADES: dict[tuple[str, str], str] = {
    ("explorer.models.config", "ModelConfig.num_params"): (
        "cfg.num_params() is ModelConfig's public face; the counts read a ModelConfig, "
        "so config_counts stands above config"
    ),
    ("explorer.models.config", "ModelConfig.forward_flops"): (
        "cfg.forward_flops() is ModelConfig's public face; the counts read a ModelConfig, "
        "so config_counts stands above config"
    ),
}


def _all_imports() -> list[Import]:
    return [i for imps in core_imports().values() for i in imps]


def _is_facade(i: Import) -> bool:
    return (i.module, i.scope) in FACADES


# --- the detectors, on fake graphs -----------------------------------------------------------


def test_cycle_detector_names_each_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"], ["d", "e", "d"]]
    with pytest.raises(AssertionError, match="a -> b -> c -> a; d -> e -> d"):
        bottom_up(graph)
    assert cycles({"a": {"a"}}) == [["a", "a"]]


def test_bottom_up_puts_each_module_after_what_it_imports():
    order = bottom_up({"top": {"mid", "low"}, "mid": {"low", "outside"}, "low": set()})
    assert order == ["low", "mid", "top"]


def test_upward_detector_names_both_modules_and_the_names():
    floors = (("p.low",), ("p.high",))
    imp = Import("p.low.a", "p.high.b", ("Thing",), 12)
    (found,) = upward([imp, Import("p.high.b", "p.low.a", ("x",), 3)], floors)
    assert "p.low.a:12 imports p.high.b (Thing)" in found
    assert "floor 0: p.low -> floor 1: p.high" in found


def test_undeclared_room_is_refused():
    with pytest.raises(AssertionError, match="explorer.attic.box stands on no declared floor"):
        floor_of("explorer.attic.box", FLOORS)


def test_reader_sees_function_local_and_type_checking_imports(tmp_path: Path):
    pkg = tmp_path / "explorer" / "fake"
    pkg.mkdir(parents=True)
    (tmp_path / "explorer" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("X = 1\n")
    (pkg / "high.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import low\n"
        "from .low import X\n"
        "if TYPE_CHECKING:\n"
        "    from explorer.fake.low import X as Y\n"
        "class C:\n"
        "    def m(self):\n"
        "        from ..fake import low as again\n"
        "        return again\n"
    )
    found = read_imports(pkg / "high.py", root=tmp_path)
    assert [(i.target, i.names, i.scope, i.type_checking) for i in found] == [
        ("explorer.fake.low", (), "", False),
        ("explorer.fake.low", ("X",), "", False),
        ("explorer.fake.low", ("X",), "", True),
        ("explorer.fake.low", (), "C.m", False),
    ]
    assert module_graph({"explorer.fake.high": found}) == {
        "explorer.fake.high": {"explorer.fake.low"}
    }


# --- the house ----------------------------------------------------------------------------


def test_every_module_stands_on_a_declared_floor():
    for module in core_imports():
        floor_of(module, FLOORS)


def test_no_import_runs_back_up_a_floor():
    found = upward([i for i in _all_imports() if not _is_facade(i)], FLOORS)
    assert not found, "imports from a lower floor to a higher one:\n" + "\n".join(found)


def test_no_module_level_import_circle():
    found = cycles(module_graph(core_imports()))
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_no_function_local_imports_of_core_modules():
    found = [str(i) for i in _all_imports() if i.scope and not _is_facade(i)]
    assert not found, (
        "function-local imports of core modules (import at module level; a method facade "
        "goes into FACADES with its reason):\n" + "\n".join(found)
    )


def test_facades_are_still_there():
    """An allowlisted facade that no longer imports lazily leaves the list."""
    present = {(i.module, i.scope) for i in _all_imports() if i.scope}
    assert set(FACADES) <= present, sorted(set(FACADES) - present)


def test_no_type_checking_imports_of_core_modules():
    found = [str(i) for i in _all_imports() if i.type_checking]
    assert not found, "TYPE_CHECKING imports of core modules:\n" + "\n".join(found)


def test_every_module_imports_bottom_up_in_a_fresh_interpreter():
    # ``__main__`` runs the command line when imported: it is read, not imported
    order = [m for m in bottom_up(module_graph(core_imports())) if not m.endswith(".__main__")]
    script = f"import importlib\nfor m in {order!r}:\n    importlib.import_module(m)\nprint('ok')"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


# --- the views use the core's public names ------------------------------------------------


def _front_door(module: str) -> bool:
    """``explorer``, a package's ``__init__``, or a one-file room on the core's top level
    (``explorer.errors``, ``explorer.memo``): the room's own door."""
    return module == CORE or is_package(module) or module.count(".") == 1


def _widget_imports() -> list[tuple[str, int, str, tuple[str, ...]]]:
    """(file, line, module, names) of every ``from explorer... import names`` in widgets/
    (and ``import explorer.x``, with no names)."""
    out = []
    for path in sorted((REPO / "widgets").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level:
                mod = node.module or ""
                if mod == CORE or mod.startswith(CORE + "."):
                    out.append((rel, node.lineno, mod, tuple(a.name for a in node.names)))
            elif isinstance(node, ast.Import):
                out += [(rel, node.lineno, a.name, ()) for a in node.names
                        if a.name.startswith(CORE + ".")]  # fmt: skip
    return out


def test_widgets_import_only_public_names_from_front_doors():
    bad = []
    for rel, line, mod, names in _widget_imports():
        if not _front_door(mod):
            what = ", ".join(names) or mod
            bad.append(f"{rel}:{line}: {mod} is not a front door; import {what} from its package")
            continue
        public = getattr(importlib.import_module(mod), "__all__", None)
        for name in names:
            if name.startswith("_"):
                bad.append(f"{rel}:{line}: {mod}.{name} is private")
            elif public is not None and name not in public:
                bad.append(f"{rel}:{line}: {mod}.{name} is not in {mod}.__all__")
    assert not bad, "widgets reach past the core's front doors:\n" + "\n".join(bad)


def test_widget_import_check_sees_a_private_path():
    assert not _front_door("explorer.search.problem")
    assert _front_door("explorer.search") and _front_door("explorer.memo")
    assert _front_door("explorer")
