"""What an import did: the traced graph, and the report of ops it could not map."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...errors import ExplorerError
from ...ir import Graph

__all__ = ["TorchImportError", "Unmapped", "OpaqueOp", "ImportReport", "TracedGraph"]


class TorchImportError(ExplorerError, ValueError):
    """A PyTorch module or Hugging Face config cannot be traced into the IR; the message
    names the module, op or field and what to do."""


class Unmapped(TorchImportError, NotImplementedError):
    """Raised by an aten handler for a form of its op the IR has no mapping for; the
    importer catches it and keeps the node as an ``opaque`` op, with this message as the
    reason in the import report."""


@dataclass(frozen=True)
class OpaqueOp:
    """One traced op without a mapping, kept in the graph as an ``opaque`` node.

    Args:
        target: the torch op, e.g. ``"aten.cumsum.default"``.
        nodes: the IR nodes standing for it.
        static: every input depends only on shapes and buffers (masks, position tables),
            never on the model's inputs or parameters, so no activation flows through it.
    """

    target: str
    nodes: tuple[str, ...]
    static: bool

    def __str__(self) -> str:
        where = "static (shape-only)" if self.static else "on the data path"
        return f"{self.target} x{len(self.nodes)} ({where})"


@dataclass(frozen=True)
class ImportReport:
    """How a module was traced and what did not map exactly.

    Args:
        module: the traced module's class name.
        tracer: ``"torch.export"`` or ``"torch.fx"``.
        opaque: unmapped ops (replicated-only ``opaque`` nodes costed by bytes).
        leaves: module path -> handler name for modules emitted whole by a leaf handler.
        tied: parameter name -> the canonical name it shares storage with (counted once).
        buffers: buffer names fed to the graph as ``input`` nodes (not parameters).
        ignored_fields: config fields ``from_hf`` was told to ignore (``strict=False``).
        notes: anything else worth knowing (dtype substitutions, ...).
    """

    module: str
    tracer: str
    opaque: tuple[OpaqueOp, ...] = ()
    leaves: tuple[tuple[str, str], ...] = ()
    tied: tuple[tuple[str, str], ...] = ()
    buffers: tuple[str, ...] = ()
    ignored_fields: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def exact(self) -> bool:
        """True when every op on the data path mapped to a registered op."""
        return not any(not o.static for o in self.opaque)

    def __str__(self) -> str:
        lines = [f"import of {self.module} by {self.tracer}: "
                 f"{'every op on the data path mapped' if self.exact else 'opaque ops on the data path'}"]  # fmt: skip
        lines += [f"  opaque {o}" for o in self.opaque]
        by_handler: dict[str, int] = {}
        for _, h in self.leaves:
            by_handler[h] = by_handler.get(h, 0) + 1
        lines += [f"  {n} module(s) emitted whole as {h}" for h, n in by_handler.items()]
        lines += [f"  tied {a} -> {b}" for a, b in self.tied]
        lines += [f"  ignored config field {f!r}" for f in self.ignored_fields]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass(frozen=True, eq=False)
class TracedGraph(Graph):
    """A ``Graph`` traced from PyTorch, carrying its ``ImportReport``.

    ``meta["import_report"]`` is the same report (the spelling views use).
    ``output_leaves`` lists, per tensor the forward returns (its return value flattened as
    torch's pytree does, in order), the graph value holding it (None where the forward
    returns a non-tensor there): `explorer.compiler.torch_program` rebuilds the module's
    output structure from it. ``lifted``: (input name, CPU tensor) of each tensor the
    forward itself made (torch.export's lifted constants), fed as an ``input`` like a
    buffer.
    """

    report: ImportReport | None = field(default=None, repr=False, compare=False)
    output_leaves: tuple[str | None, ...] = field(default=(), repr=False, compare=False)
    lifted: tuple[tuple[str, Any], ...] = field(default=(), repr=False, compare=False)

    @property
    def meta(self) -> dict[str, Any]:
        return {"import_report": self.report}
