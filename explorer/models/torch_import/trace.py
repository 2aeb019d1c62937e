"""``from_torch``: trace a PyTorch module (on the meta device) into an IR Graph."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from ...ir import DType, TensorType
from . import aten as _aten  # noqa: F401  (registers the handlers)
from . import aten_nn as _aten_nn  # noqa: F401
from .builtin_leaves import builtin_leaf
from .constants import list_picks_as_slices, prune
from .convert import Context, Ref
from .fuse import fuse_rope, split_fused_projections
from .leaves import LEAF_HANDLERS, LeafHandler, leaves_patched
from .report import ImportReport, TorchImportError, TracedGraph

__all__ = ["from_torch"]


def from_torch(
    module: Any, inputs: Any = (), kwargs: Mapping[str, Any] | None = None, *,
    name: str | None = None, leaves: Mapping[str, LeafHandler] | None = None,
    input_dtype: str = "int64", fuse: bool = True, float_casts: bool = False,
    tracer: str = "export",
) -> TracedGraph:  # fmt: skip
    """Trace ``module(*inputs, **kwargs)`` with torch.export into an IR graph.

    Parameters become ``param`` nodes named as in ``module.named_parameters()`` (tied
    weights once, under their first name), in the scope of their module; every op gets
    the scope of the innermost module that ran it (``nn_module_stack``). Buffers (rotary
    frequencies, ...) become ``input`` nodes. Aten ops map to registered ops; the rest
    become ``opaque`` nodes listed in ``graph.report`` (also ``graph.meta["import_report"]``).

    Args:
        module: a ``torch.nn.Module``; put it on the meta device (``with
            torch.device("meta"):``) so that a 671B model costs no memory.
        inputs: a tensor, a shape (a tuple of ints, made an ``input_dtype`` meta tensor),
            or a tuple/list of those: the positional inputs.
        kwargs: keyword inputs (tensors, shapes or Python values such as
            ``use_cache=False``).
        name: the graph's name (default: the module's class name).
        leaves: module class name -> `LeafHandler`, added to ``LEAF_HANDLERS``.
        input_dtype: element type of inputs given as shapes (token ids: ``"int64"``).
        fuse: emit modules recognised by their code as one op (transformers' RMSNorm
            classes as ``rmsnorm``; see `builtin_leaves`) and the rotary embedding's
            slices, negation, concatenation, multiplies and add as one ``rope`` (`fuse`).
        float_casts: keep float-to-float casts as ``cast`` nodes. By default an fp32
            upcast around a norm or softmax is not a tensor of its own (fused kernels
            upcast in registers), so activations keep the model's dtype.
        tracer: ``"export"`` (torch.export, non-strict; make_fx when it fails) or
            ``"make_fx"`` (make_fx over ``functional_call`` directly: faster on big models).

    Raises:
        TorchImportError: torch is missing, ``module`` is not a module, an input is not a
            tensor or shape, or torch.export and the make_fx fallback both fail.

    >>> import torch
    >>> lin = torch.nn.Linear(8, 4, device="meta")
    >>> g = from_torch(lin, [(2, 8)], input_dtype="fp32")
    >>> g.num_params(), g.flops(), [n.op for n in g.ops]
    (36, 136, ['einsum', 'add'])
    """
    try:
        import torch
    except ImportError:
        raise TorchImportError(
            "from_torch needs PyTorch; install the 'torch' extra (pip install "
            "'parallel-explorer[torch]')"
        ) from None
    if not isinstance(module, torch.nn.Module):
        raise TorchImportError(
            f"from_torch expects a torch.nn.Module, got {type(module).__name__}; build the "
            "model first (e.g. under `with torch.device('meta'):`)"
        )
    dt = DType.parse(input_dtype)
    args = tuple(_as_input(x, dt, f"inputs[{i}]") for i, x in enumerate(_as_tuple(inputs)))
    kw = {k: _as_input(v, dt, f"kwargs[{k!r}]", allow_python=True)
          for k, v in (kwargs or {}).items()}  # fmt: skip
    handlers = dict(LEAF_HANDLERS)
    handlers.update(leaves or {})
    was_training = module.training
    module.eval()
    try:
        with leaves_patched(module, handlers, builtin_leaf if fuse else None):
            with list_picks_as_slices():  # the module's code runs here only, not in _convert
                ep, used, why = _export(module, args, kw, tracer)
            report_notes = [why] if why else []
            graph = _convert(module, ep, used, name or type(module).__name__, report_notes,
                             float_casts, fuse)  # fmt: skip
    finally:
        module.train(was_training)
    return graph


def _as_tuple(inputs: Any) -> tuple[Any, ...]:
    if _is_shape(inputs) or _is_tensor(inputs):
        return (inputs,)
    if isinstance(inputs, list | tuple):
        return tuple(inputs)
    raise TorchImportError(
        f"inputs={inputs!r}: expected a tensor, a shape such as (1, 128), or a tuple of those"
    )


def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _is_shape(x: Any) -> bool:
    return (isinstance(x, tuple) and len(x) > 0
            and all(isinstance(d, int) and not isinstance(d, bool) for d in x))  # fmt: skip


def _as_input(x: Any, dt: DType, where: str, allow_python: bool = False) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return x
    if _is_shape(x) or isinstance(x, torch.Size):
        if any(d <= 0 for d in x):
            raise TorchImportError(f"{where}={tuple(x)}: every dim must be > 0")
        tdt = {DType.INT64: torch.long, DType.INT32: torch.int32, DType.FP32: torch.float32,
               DType.BF16: torch.bfloat16, DType.FP16: torch.float16,
               DType.BOOL: torch.bool}.get(dt)  # fmt: skip
        if tdt is None:
            raise TorchImportError(f"input_dtype={dt.value!r} has no torch equivalent")
        return torch.zeros(tuple(x), dtype=tdt, device="meta")
    if allow_python and (x is None or isinstance(x, bool | int | float | str)):
        return x
    raise TorchImportError(
        f"{where}={x!r}: expected a tensor or a shape such as (1, 128)"
        + (" or a Python constant" if allow_python else "")
    )


def _export(module: Any, args: tuple, kw: dict, tracer: str) -> tuple[Any, str, str]:
    """torch.export (non-strict); make_fx over functional_call when export fails."""
    import torch

    if tracer not in ("export", "make_fx"):
        raise TorchImportError(f"tracer={tracer!r}; expected 'export' or 'make_fx'")
    first = ""
    if tracer == "export":
        try:
            with _lean_fx():
                ep = torch.export.export(module, args, kwargs=kw, strict=False)
            return _functional(ep), "torch.export", ""
        except Exception as e:  # torch raises many kinds; the fallback reports the first
            first = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    try:
        from torch.fx.experimental.proxy_tensor import make_fx

        params = dict(module.named_parameters())
        buffers = dict(module.named_buffers())

        def call(p, b, *a):
            return torch.func.functional_call(module, {**p, **b}, a, kw)

        gm = make_fx(call, tracing_mode="fake", record_module_stack=True)(params, buffers, *args)
        if mutating_ops(gm):  # make_fx keeps in-place writes; functionalize and trace again
            gm = make_fx(torch.func.functionalize(call), tracing_mode="fake",
                         record_module_stack=True)(params, buffers, *args)  # fmt: skip
    except Exception as e2:
        raise TorchImportError(
            f"cannot trace {type(module).__name__}: torch.export failed ({first[:300]}) and "
            f"the make_fx fallback too ({type(e2).__name__}: {str(e2)[:300]}); make the "
            "forward traceable or register a leaf handler for the failing module class"
        ) from None
    why = f"torch.export failed ({first[:200]}); traced with make_fx" if first else ""
    return _MakeFx(gm, list(params), list(buffers), len(args)), "torch.fx (make_fx)", why


_LEAN_LOCK = threading.Lock()
_lean_depth = 0
_lean_saved: tuple[bool, bool] = (False, False)


@contextlib.contextmanager
def _lean_fx() -> Iterator[None]:
    """While torch.export runs: no Python stack trace recorded per fx node, and graph
    modules that regenerate their Python source only when called (torch's lazy graph
    modules), not after each of export's passes. The importer reads neither the stack
    traces nor the source, only the fx graph; the two took about a third of the export of
    a 44-layer model (GPT-NeoX-20B's default config: 19.3 s of CPU time, 12.5 s without).
    Both switches are process-wide torch settings: the first caller to enter sets them and
    the last to leave restores them, so concurrent traces do not undo each other."""
    global _lean_depth, _lean_saved
    try:
        import torch.fx.config as fx_config
        from torch.fx import _lazy_graph_module as lazy
    except ImportError:
        fx_config = lazy = None
    if not (hasattr(fx_config, "do_not_emit_stack_traces")
            and hasattr(lazy, "_use_lazy_graph_module_flag")):  # fmt: skip
        yield  # a torch without these switches: trace as it does by default
        return
    with _LEAN_LOCK:
        if _lean_depth == 0:
            _lean_saved = (fx_config.do_not_emit_stack_traces, lazy._use_lazy_graph_module_flag)
            fx_config.do_not_emit_stack_traces = True
            lazy._use_lazy_graph_module_flag = True
        _lean_depth += 1
    try:
        yield
    finally:
        with _LEAN_LOCK:
            _lean_depth -= 1
            if _lean_depth == 0:
                fx_config.do_not_emit_stack_traces, lazy._use_lazy_graph_module_flag = _lean_saved


def mutating_ops(gm: Any) -> list[str]:
    """The ops of ``gm`` that write into a tensor in place (their schema says so: ``mul_``,
    ``copy_``, ``index_put_``, ...): an in-place write through a view (``y[:, 1:3] *= -1``)
    changes a tensor that no fx edge connects to the write."""
    out = []
    for node in gm.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op == "call_function" and schema is not None and schema.is_mutable:
            out.append(str(node.target))
    return out


def _functional(ep: Any) -> Any:
    """``ep`` with its in-place writes made functional (``torch.export``'s
    ``run_decompositions({})``: no op decomposed, each write through a view becomes a
    ``slice_scatter`` / ``select_scatter`` / ``index_put`` of the base), when it has any;
    else ``ep`` itself. The converter maps the scatters onto slices and concatenations."""
    if not mutating_ops(ep.graph_module):
        return ep
    with _lean_fx():
        return ep.run_decompositions({})


class _MakeFx:
    """make_fx output dressed like an ExportedProgram for `_convert`."""

    def __init__(self, gm: Any, params: list[str], buffers: list[str], n_args: int) -> None:
        self.graph_module = gm
        self.params, self.buffers, self.n_args = params, buffers, n_args


def _convert(module: Any, ep: Any, tracer: str, name: str, notes: list[str],
             float_casts: bool, fuse: bool) -> TracedGraph:  # fmt: skip
    gm = ep.graph_module
    cx = Context(name, float_casts)
    # tied weights: one IR param per storage, named by its first name
    canonical: dict[int, str] = {}
    for pname, p in module.named_parameters(remove_duplicate=False):
        canonical.setdefault(id(p), pname)
    by_name = dict(module.named_parameters(remove_duplicate=False))
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    kinds = _placeholder_kinds(ep, placeholders)
    emitted: dict[str, Ref] = {}
    module_buffers = {name for name, _ in module.named_buffers(remove_duplicate=False)}
    lifted: dict[str, Any] = {}
    tied: dict[str, str] = {}
    buffers: list[str] = []
    for node in placeholders:
        kind, target = kinds[node.name]
        val = node.meta.get("val")
        if not hasattr(val, "shape"):
            cx.env[node.name] = val
            continue
        t = TensorType(tuple(int(d) for d in val.shape), cx.dtype(val.dtype))
        if kind == "param":
            first = canonical.get(id(by_name[target]), target) if target in by_name else target
            if first != target:
                tied[target] = first
            if first not in emitted:
                emitted[first] = cx.source("param", first, t, first.rpartition(".")[0], False)
            cx.env[node.name] = emitted[first]
        elif kind == "buffer":
            buffers.append(target)
            value = getattr(ep, "constants", {}).get(target)
            cx.constants.bind(node.name, value)
            if _is_tensor(value) and target not in module_buffers:
                lifted[target] = value  # a tensor the forward makes (torch.tensor(...))
            cx.env[node.name] = cx.source("input", target, t, target.rpartition(".")[0], True)
        else:
            cx.env[node.name] = cx.source("input", node.name, t, "", False)
    flat_out = _user_outputs(ep, cx.run(gm))
    outs = [o for o in flat_out if isinstance(o, Ref)]
    if not outs:
        raise TorchImportError(f"{name}: the traced forward returns no tensor")
    outs = list(dict.fromkeys(o.name for o in outs))
    b = cx.b
    nodes, dropped = prune(list(b._nodes), outs)
    live = {n.name for n in nodes}
    opaque = tuple(replace(o, nodes=tuple(n for n in o.nodes if n in live))
                   for o in cx.opaque_report())  # fmt: skip
    if dropped:
        notes = [*notes, f"{dropped} shape-only ops computed at trace time (masks, position "
                 "ids) and dropped: no output reads them"]  # fmt: skip
    report = ImportReport(
        module=type(module).__name__, tracer=tracer,
        opaque=tuple(o for o in opaque if o.nodes),
        leaves=tuple(cx.leaves), tied=tuple(sorted(tied.items())), buffers=tuple(buffers),
        notes=tuple(notes) + tuple(sorted(_live_notes(cx.notes, opaque))),
    )  # fmt: skip
    fused = split = 0
    if fuse:
        nodes, fused = fuse_rope(nodes)
        nodes, split = split_fused_projections(nodes)
    if fused:
        report = replace(report, notes=report.notes + (f"{fused} rotary embeddings fused",))
    if split:
        report = replace(report, notes=report.notes + (
            f"{split} fused projections split into one weight block per slice "
            "(named weight[start:stop])",))  # fmt: skip
    leaves = tuple(o.name if isinstance(o, Ref) else None for o in flat_out)
    return TracedGraph(tuple(nodes), tuple(outs), b.name, report=report, output_leaves=leaves,
                       lifted=tuple(lifted.items()))  # fmt: skip


def _user_outputs(ep: Any, values: list[Any]) -> list[Any]:
    """The converted values of the forward's flattened return, in order: torch.export's
    output node also lists buffer mutations (its signature's output specs say which)."""
    flat = list(_flat(values))
    specs = getattr(getattr(ep, "graph_signature", None), "output_specs", None)
    if specs is None or len(specs) != len(flat):
        return flat
    return [v for v, s in zip(flat, specs, strict=True) if s.kind.name == "USER_OUTPUT"]


def _live_notes(notes: set[str], opaque: tuple) -> list[str]:
    """The conversion notes, less those on ops whose opaque nodes were all dropped (a
    shape-only mask computed at trace time needs no explanation)."""
    gone = {o.target for o in opaque if not o.nodes}
    return [n for n in notes if n.split(": ", 1)[0] not in gone]


def _placeholder_kinds(ep: Any, placeholders: list) -> dict[str, tuple[str, str]]:
    """placeholder name -> ("param" | "buffer" | "input", target name)."""
    if isinstance(ep, _MakeFx):
        names = ([("param", p) for p in ep.params] + [("buffer", b) for b in ep.buffers]
                 + [("input", f"input_{i}") for i in range(ep.n_args)])  # fmt: skip
        out = {}
        for node, kt in zip(placeholders, names, strict=False):
            out[node.name] = kt
        for node in placeholders[len(names) :]:
            out[node.name] = ("input", node.name)
        return out
    out = {}
    for spec in ep.graph_signature.input_specs:
        kind = spec.kind.name
        arg = getattr(spec.arg, "name", None)
        if kind == "PARAMETER":
            out[arg] = ("param", spec.target)
        elif kind in ("BUFFER", "CONSTANT_TENSOR"):
            out[arg] = ("buffer", spec.target)
        else:
            out[arg] = ("input", arg)
    for node in placeholders:
        out.setdefault(node.name, ("input", node.name))
    return out


def _is_tensor(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "device")


def _flat(x: Any):
    if isinstance(x, list | tuple):
        for v in x:
            yield from _flat(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _flat(v)
    else:
        yield x
