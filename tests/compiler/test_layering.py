"""The compiler is layered bottom-up: tensor.py imports nothing above it, and its modules
import in the order tensor -> eager -> trace stack -> functional, autodiff -> jit.

The rules of the whole core (no circle, no lazy import of a core module, no import back up a
floor, every module importable bottom-up) are held by ``tests/test_house.py``; this file
keeps the compiler's own order, read with the same walker (``tests/house.py``).
"""

from tests.house import bottom_up, core_imports, module_graph

PKG = "explorer.compiler"


def _compiler_graph() -> dict[str, set[str]]:
    """Compiler module -> the compiler modules it imports at module level."""
    graph = module_graph(core_imports(PKG))
    return {m: {d for d in deps if d.startswith(PKG)} for m, deps in graph.items()}


def test_compiler_modules_import_in_layer_order():
    order = bottom_up(_compiler_graph())
    assert order.index("explorer.compiler.tensor") < order.index("explorer.compiler.eager")
    assert order.index("explorer.compiler.eager") < order.index("explorer.compiler.trace_stack")
    assert order.index("explorer.compiler.trace_stack") < order.index(
        "explorer.compiler.functional"
    )
    assert order.index("explorer.compiler.autodiff") < order.index("explorer.compiler.jit.api")


def test_tensor_imports_nothing_above_it():
    assert _compiler_graph()["explorer.compiler.tensor"] <= {"explorer.compiler.errors"}
