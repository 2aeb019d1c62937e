"""``ex.compile``: a PyTorch module (or function) traced with its real weights into the IR,
run eagerly (the IR interpreter, op by op) or statically (passes, memory plan, kernels
chosen once, one generated plan function) from the same graph.

>>> import torch, numpy as np
>>> import explorer as ex
>>> torch.manual_seed(0) and None
>>> mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
>>> x = torch.randn(2, 8)
>>> prog = ex.compile(mlp, (x,))
>>> bool(torch.allclose(prog(x), mlp(x), rtol=1e-5, atol=1e-5))
True
>>> y = prog.run_eager(x.numpy())          # numpy in, numpy out
>>> type(y).__name__, [e.name for e in prog.last_trace.events][:2]
('ndarray', ['einsum', 'add'])

Tolerances (`TOLERANCE`, per dtype of the model's weights): the static and eager runs
compute float32 (bf16, fp16 and fp8 models too: numpy has no narrower float type), in
another order of operations than torch, so for an fp32 model every output is within
``rtol=1e-5, atol=1e-5`` of torch's (the 31 tiny transformers architectures of
tests/models: 5.4e-6 at most on logits up to about 7, measured); a bf16 or fp16 model is
compared with torch computing in its own precision, ``rtol=atol=1e-1`` (bf16) and
``2e-2`` (fp16) (the tiny Llama: 4.3e-2 and 9.8e-3 at most, measured); fp8 ``2e-1``
(not measured: no fp8 model was run).
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .. import trace as _trace
from ..ir import DType, Graph
from ..models.torch_import import TorchImportError, from_torch
from . import torch_cache
from .errors import TorchCompileError
from .executor import Program
from .huge_pages import collapse
from .passes import LEVELS, Level, MemoryPlan, RewriteStep, optimize
from .passes.donate import donate as donate_inputs
from .passes.driver import BACKENDS, Backend
from .torch_buckets import BucketedProgram
from .torch_cache import CACHE_MODES, CacheEvent, DiskCache
from .torch_eager import TimedInterpreter
from .torch_fold import fold_weights
from .torch_guard import make_call
from .torch_io import PYTHON_LEAVES, FlatSignature, as_array, flat_module, module_state, weights
from .torch_projections import merge_projections
from .torch_verify import Verification, verify_runs

__all__ = ["compile", "TorchProgram", "BucketedProgram", "Verification", "TOLERANCE"]

#: (rtol, atol) of our outputs against torch's, by the model's weight dtype.
TOLERANCE: dict[str, tuple[float, float]] = {
    "fp32": (1e-5, 1e-5), "fp16": (2e-2, 2e-2), "bf16": (1e-1, 1e-1), "fp8": (2e-1, 2e-1),
}  # fmt: skip


def compile(  # noqa: A001 (ex.compile, as torch.compile)
    module_or_fn: Any, example_inputs: Any = (), kwargs: Mapping[str, Any] | None = None, *,
    level: Level = "O2", backend: Backend = "numpy", name: str | None = None,
    use_cache: bool | None = False, buckets: Sequence[int] | None = None, seq_dim: int = 1,
    disk_cache: DiskCache = "values", donate: Sequence[int] = (),
) -> TorchProgram | BucketedProgram:  # fmt: skip
    """Trace ``module_or_fn(*example_inputs, **kwargs)`` with its real weights into the IR
    and build both runs of it; returns a `TorchProgram`, called like the module.

    Args:
        module_or_fn: a ``torch.nn.Module`` (a transformers model included) or a function
            of tensors (wrapped in a module to trace it).
        example_inputs: a tensor or numpy array, or a tuple/list of tensors, arrays and
            Python constants: the positional inputs. Shapes and dtypes are fixed: a call
            with other shapes raises (compile again for them), except the sequence length
            with ``buckets``.
        kwargs: keyword inputs (tensors, arrays or Python constants, frozen as traced).
        level: the optimisation level of the static run (``"O2"``: fold, CSE, DCE,
            simplify, softmax and elementwise fusion, memory plan).
        backend: ``"numpy"`` or ``"numba"`` (generated kernels for fused regions).
        name: the graph's name (default: the module's class name).
        use_cache: for a module with ``config.use_cache`` (transformers) whose forward takes
            ``use_cache``, the value passed when the call does not say (default False: the
            key/value cache is an output object torch.export cannot trace); None passes
            nothing.
        buckets: sequence lengths to compile for (ascending, e.g. ``(32, 64, 128)``): a
            call of any length up to the last runs the program of the smallest bucket that
            holds it, its inputs padded with zeros and its outputs cut back
            (`BucketedProgram`; each bucket compiled on its first call). None (default):
            one program for the example's shapes.
        seq_dim: with ``buckets``, the dim of the inputs and outputs that holds the
            sequence (default 1: ``[batch, seq, ...]``).
        disk_cache: the traced program kept on disk across processes
            (`explorer.compiler.torch_cache`): a later ``compile`` of the same module, code,
            weights, call structure and options loads it without calling torch.export.
            ``"values"`` (default) keys on the weights' values too; ``"structure"`` on their
            names, shapes and dtypes only (the weights are always read from the module);
            ``"off"`` neither reads nor writes. What happened: ``prog.cache`` (`CacheEvent`).
        donate: positions of tensor inputs (among the call's tensors, in order) whose arrays
            the static run may overwrite, as JAX's ``donate_argnums``: a key/value cache of
            ``P + 1`` slots appended to as ``cat(cache[:, :, :P], new)`` gets the new slot
            written in place (`explorer.compiler.passes.donate`) instead of copied. Only the
            slot the model does not read is written; the outputs are the same.

    Raises:
        TorchCompileError: torch is missing, ``module_or_fn`` is not callable, an input is
            neither a tensor nor a Python constant, tracing fails (torch.export's error is
            summarised with the fix), the traced graph has ops the IR cannot run, or the
            module returns an object that is neither a tensor nor a Python constant; with
            ``buckets``: bad buckets, an example longer than the last bucket, or a module
            whose outputs change when its sequence is padded (neither causal nor masked);
            ``donate`` not a tuple of tensor input positions.
    """
    try:
        import torch
    except ImportError:
        raise TorchCompileError(
            "ex.compile needs PyTorch; install the 'torch' extra (pip install "
            "'parallel-explorer[torch]')"
        ) from None
    if name is not None and not isinstance(name, str):
        raise TorchCompileError(f"name={name!r}: expected a str (the graph's name) or None")
    if use_cache is not None and not isinstance(use_cache, bool):
        raise TorchCompileError(f"use_cache={use_cache!r}: expected True, False or None")
    if disk_cache not in CACHE_MODES:
        raise TorchCompileError(
            f"disk_cache={disk_cache!r}: expected one of {', '.join(CACHE_MODES)}"
        )
    if level not in LEVELS or backend not in BACKENDS:
        raise TorchCompileError(
            f"level={level!r}, backend={backend!r}: expected a level of {', '.join(LEVELS)} "
            f"and a backend of {', '.join(BACKENDS)}"
        )
    module = _as_module(module_or_fn, torch)
    args = tuple(_to_torch(x, torch) for x in _as_tuple(example_inputs, torch))
    kw = {k: _to_torch(v, torch) for k, v in dict(kwargs or {}).items()}
    defaults = {}
    if use_cache is not None and "use_cache" not in kw and _takes_use_cache(module):
        defaults["use_cache"] = bool(use_cache)
    donate = _donated(donate)
    if buckets is not None:
        opts = {"level": level, "backend": backend, "name": name, "use_cache": use_cache,
                "disk_cache": disk_cache, "donate": donate}  # fmt: skip
        return BucketedProgram(
            module, args, kw, buckets, seq_dim, lambda a, k: compile(module, a, k, **opts)
        )
    dressed, flat, sig = flat_module(module, args, {**defaults, **kw})
    title = name or type(module).__name__
    fn = None if module is module_or_fn else module_or_fn
    options = {"level": level, "backend": backend, "name": title, "use_cache": use_cache}
    graph, notes, event = _traced(module, fn, dressed, flat, sig, title, options, disk_cache)
    prog = TorchProgram(module, graph, sig, defaults, level, backend, donate)
    prog.notes += notes
    prog.cache = event
    return prog


def _traced(module: Any, fn: Any, dressed: Any, flat: tuple, sig: FlatSignature, title: str,
            options: dict[str, Any], mode: DiskCache) -> tuple[Graph, tuple[str, ...], CacheEvent]:  # fmt: skip
    """(the traced graph, the trace's notes, what the disk cache did): loaded from the disk
    cache when its entry exists (``sig``'s output structure filled from it), else traced
    with torch.export and stored."""
    key, corrupt = "", ""
    if mode != "off":
        try:
            key = torch_cache.program_key(module, fn, sig, flat, options, mode)
            hit = torch_cache.load(key)
        except torch_cache.CacheFormatError as e:
            hit, corrupt = None, str(e)
        if hit is not None:
            sig.out_spec, sig.out_leaves = hit.out_spec, hit.out_leaves
            sig.out_tensor_at, sig.out_dtypes = hit.out_tensor_at, hit.out_dtypes
            path = str(torch_cache.entry_path(key))
            return hit.graph, hit.notes, CacheEvent("hit", key, path)
    with _eager_attention(module) as switched:
        graph = _trace_graph(dressed, flat, title, type(module).__name__)
    notes: tuple[str, ...] = ()
    if switched:
        notes = (
            f"attention traced as 'eager' (the module's {', '.join(switched)}: its mask "
            "builder is not traceable into the IR; the same function up to rounding)",
        )  # fmt: skip
    if mode == "off":
        return graph, notes, CacheEvent("off")
    if not key:  # the module's code could not be identified
        return graph, notes, CacheEvent("unstored", reason=corrupt)
    try:
        path = str(torch_cache.store(key, graph, sig, notes))
    except (torch_cache.CacheFormatError, OSError) as e:
        return graph, notes, CacheEvent("unstored", key, reason=f"not stored: {e}")
    if corrupt:
        return graph, notes, CacheEvent("corrupt", key, path, f"traced again: {corrupt}")
    return graph, notes, CacheEvent("miss", key, path)


class TorchProgram:
    """A traced PyTorch callable: ``prog(*args, **kwargs)`` runs the static path,
    ``prog.run_eager(...)`` the IR interpreter op by op (its `Trace` in ``last_trace``).

    Inputs are torch tensors or numpy arrays of the traced shapes and dtypes (Python
    values as traced); outputs have the module's structure (``.logits`` of a transformers
    output), torch tensors when any input was a torch tensor, else numpy arrays.

    The weights are read when compiling (numpy views of the module's CPU tensors, and the
    weight-only values computed from them): compile again after changing them. Static
    calls from several threads take turns (the memory plan's buffers are shared).

    Attributes:
        graph: the traced graph (parameters and buffers as ``param``/``input`` nodes): what
            the eager run runs; the static path merges its split projections first
            (`merge_projections`).
        folded: the graph with its weight-only values computed once (`fold_weights`: rotary
            tables, position embeddings, weight casts) as ``param`` sources.
        optimized, steps, memory_plan: the static graph (``folded`` through the passes),
            the passes' RewriteSteps and the memory plan.
        program: the executor's `Program` (``program.source``: the plan's Python).
        weights: parameter and buffer values by source name of the static path's graph
            (numpy).
        tolerance: (rtol, atol) against torch for the model's dtype (`TOLERANCE`).
        notes: what ``compile`` decided for the user (the cache turned off, ...).
        cache: what the disk cache did (`CacheEvent`: hit, miss, corrupt with its reason).
        huge_page_bytes: bytes of the weights moved onto huge pages in place
            (`huge_pages.collapse`: weights from 4 MiB; 0 where the OS refuses).
    """

    def __init__(self, module: Any, graph: Graph, sig: FlatSignature, defaults: dict[str, Any],
                 level: Level, backend: Backend, donate: tuple[int, ...] = ()) -> None:  # fmt: skip
        self.module = module
        self.graph = graph
        self.name = graph.name
        self._sig = sig
        self._defaults = defaults
        self.notes = tuple(f"{k}={v!r} passed to the forward (the call may override it)"
                           for k, v in defaults.items())  # fmt: skip
        self._out_index = _output_index(graph, sig, self.name)
        lifted = dict(getattr(graph, "lifted", ()))
        state = module_state(module, lifted)
        # the static path runs the importer's split projections as one matmul over the
        # stored weight; the eager run keeps the traced graph, op by op
        graph, merged = merge_projections(
            graph, lambda name: tuple(state[name].shape) if name in state else None
        )
        if merged:
            self.notes += (f"{merged} split projections run as one matmul each over the "
                           "stored weight on the static path (torch_projections)",)  # fmt: skip
        self._lifted = lifted if merged else None  # the eager run's weights: made on demand
        self.weights = weights(graph, module, lifted)
        self._eager_weights = self.weights
        users = [n for n in graph.inputs if n.name not in self.weights]
        if len(users) != len(sig.names):
            raise TorchCompileError(
                f"{self.name}: the traced graph has {len(users)} inputs besides its buffers "
                f"({', '.join(n.name for n in users)}), the call {len(sig.names)} tensors "
                f"({', '.join(sig.names)}); an input the forward does not read is dropped "
                "by torch.export: pass it as a Python constant (e.g. None) instead"
            )
        self._user = [n.name for n in users]
        self._types = [(n.type.shape, n.type.dtype.numpy) for n in users]
        dtype = _weight_dtype(graph)
        self.dtype = dtype
        self.tolerance = TOLERANCE.get(dtype.value, TOLERANCE["fp32"])
        self.folded, fed = fold_weights(graph, self.weights)
        if any(i >= len(self._user) for i in donate):
            raise TorchCompileError(
                f"donate={donate!r}: the call has {len(self._user)} tensor inputs "
                f"({', '.join(sig.names)}); give positions among them"
            )
        donated, appended = donate_inputs(self.folded, [self._user[i] for i in donate])
        self.optimized, self.steps, self.memory_plan = _optimize(donated, level, backend)
        self.steps = appended + self.steps
        self.program = Program(self.optimized, self.memory_plan)
        self.source = self.program.source
        slot = {n: i for i, n in enumerate(self.program.feed_names)}
        self._template = [fed.get(n) for n in self.program.feed_names]
        # the weights the plan streams, on huge pages (in place: see huge_pages)
        self.huge_page_bytes = collapse(a for a in self._template if a is not None)
        self._user_slots = [slot[n] for n in self._user]
        self._fast = sig.positional and set(sig.keywords) <= set(defaults)
        self._single = self._out_index[0] if sig.out_spec.is_leaf() else None
        self.last_trace: _trace.Trace | None = None
        self._lock = threading.Lock()
        self._eager: TimedInterpreter | None = None
        self._call = self._guarded_call()
        self.cache = CacheEvent("off")

    # --- calls ------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(*args, **kwargs)

    def _slow_call(self, args: tuple, kwargs: dict) -> Any:
        """The general static call: converts and checks every input (named errors), and
        runs the plan step by step with kernel events inside ``ex.trace.record``."""
        arrays, as_torch = self._arrays(args, kwargs)
        return self._structure(self._static_outs(arrays), as_torch)

    def _guarded_call(self) -> Any:
        """The generated call (`make_call`): the traced call's guard, then the plan with
        the weights baked in; every other call goes to `_slow_call`."""
        if not self._fast:  # keyword tensors or Python constants: flattened per call
            return lambda *a, **k: self._slow_call(a, k)
        bound = {i: a for i, a in enumerate(self._template) if a is not None}
        _, entry = self.program.bound_plan(bound, self._user_slots)
        single = self._single
        return make_call(
            single, self._types, entry, self._slow_call,
            self._sig.out_dtypes[0] if single is not None else None,
            self._structure if single is None else None, self._lock,
        )  # fmt: skip

    def run_eager(self, *args: Any, **kwargs: Any) -> Any:
        """The eager run: the IR interpreter over the traced graph, op by op, each op timed
        into a `Trace` (``last_trace``; into the active ``ex.trace.record`` block too)."""
        arrays, as_torch = self._arrays(args, kwargs)
        return self._structure(self._eager_outs(arrays), as_torch)

    def _static_outs(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """The static run of checked flat inputs: the graph's outputs in order."""
        feeds = list(self._template)
        for s, a in zip(self._user_slots, arrays, strict=True):
            feeds[s] = a
        with self._lock:
            return self.program.run(feeds)

    def _eager_outs(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        if self._lifted is not None:  # the traced graph's weight blocks (torch_projections)
            self._eager_weights = weights(self.graph, self.module, self._lifted)
            self._lifted = None
        feeds = dict(self._eager_weights)
        feeds.update(zip(self._user, arrays, strict=True))
        outer = _trace.active()
        rec = outer if outer is not None else _trace.Recorder(f"{self.name} eager")
        if self._eager is None:  # its per-node lookups are made once
            self._eager = TimedInterpreter(self.graph, rec)
        values = self._eager.run(feeds, rec)
        self.last_trace = rec.finish() if outer is None else None
        return [values[o] for o in self.graph.outputs]

    def run_static_traced(self, *args: Any, **kwargs: Any) -> tuple[Any, _trace.Trace]:
        """The static run with one ``kernel`` event per step: (the output, its Trace)."""
        with _trace.record(f"{self.name} static") as t:
            out = self(*args, **kwargs)
        return out, t.trace

    def compare(self, *args: Any, **kwargs: Any) -> _trace.Comparison:
        """The eager run and the static run of one input, aligned op by op
        (``explorer.trace.compare``: a fused kernel against the eager ops it absorbed, ops
        folded away or computed once listed without a kernel)."""
        self.run_eager(*args, **kwargs)
        eager = self.last_trace
        _, static = self.run_static_traced(*args, **kwargs)
        return _trace.compare(eager, static)

    def verify(self, *args: Any, **kwargs: Any) -> Verification:
        """Run torch, the static path and the eager run on one input; compare every tensor
        output with torch's at `tolerance`."""
        return verify_runs(self.module, self._defaults, self.tolerance, self.__call__,
                           self.run_eager, args, kwargs)  # fmt: skip

    def __repr__(self) -> str:
        return (f"TorchProgram({self.name!r}: {len(self.graph.ops)} ops traced, "
                f"{len(self.program.steps)} steps static)")  # fmt: skip

    # --- inputs and outputs ---------------------------------------------------------------
    def _arrays(self, args: tuple, kwargs: dict) -> tuple[list[np.ndarray], bool]:
        return self._checked(self._tensors(args, kwargs))

    def _tensors(self, args: tuple, kwargs: dict) -> list[Any] | tuple:
        """The call's tensor leaves, in the traced order (not converted, not checked)."""
        if self._fast and not kwargs:
            if len(args) != len(self._types):
                raise TorchCompileError(
                    f"{self.name} was compiled for {len(self._types)} positional tensors "
                    f"({', '.join(self._sig.names)}), got {len(args)} arguments"
                )
            return args
        return self._flat_call(args, kwargs)

    def _checked(self, tensors: Any) -> tuple[list[np.ndarray], bool]:
        """Numpy arrays of the traced shapes and dtypes, and whether any input was torch's."""
        as_torch = False
        arrays = []
        for k, (x, (shape, dt)) in enumerate(zip(tensors, self._types, strict=True)):
            if type(x) is not np.ndarray:
                as_torch = as_torch or _is_torch(x)
                x = numpy_of(x)
            if x.shape != shape:
                raise TorchCompileError(
                    f"{self.name}: input {self._sig.names[k]} has shape {x.shape}, compiled "
                    f"for {shape}; call ex.compile again with example inputs of this shape "
                    "(or with buckets= for sequence lengths that vary per call)"
                )
            if x.dtype != dt:
                x = x.astype(dt)
            arrays.append(x)
        return arrays, as_torch

    def _flat_call(self, args: tuple, kwargs: dict) -> list[Any]:
        from torch.utils._pytree import tree_flatten

        leaves, spec = tree_flatten((tuple(args), {**self._defaults, **kwargs}))
        if spec != self._sig.in_spec:
            raise TorchCompileError(
                f"{self.name}: called with arguments of another structure than traced "
                f"({len(args)} positional, keywords {sorted(kwargs)}); call it as traced "
                f"(tensors {', '.join(self._sig.names)}) or compile again"
            )
        tensors = []
        for k, (leaf, traced) in enumerate(zip(leaves, self._sig.in_leaves, strict=True)):
            if k in self._sig.tensor_at:
                tensors.append(leaf)
            elif leaf != traced or type(leaf) is not type(traced):
                raise TorchCompileError(
                    f"{self.name}: argument {k} is {leaf!r}, traced as {traced!r}; Python "
                    "values are frozen at trace time: compile again with this value"
                )
        return tensors

    def _structure(self, outs: list[np.ndarray], as_torch: bool) -> Any:
        sig = self._sig
        if self._single is not None:  # the forward returns one tensor: no pytree to rebuild
            a = outs[self._single]
            return _torch_of(a, sig.out_dtypes[0]) if as_torch else a
        from torch.utils._pytree import tree_unflatten

        leaves = list(sig.out_leaves)
        for k, pos in enumerate(sig.out_tensor_at):
            a = outs[self._out_index[k]]
            leaves[pos] = _torch_of(a, sig.out_dtypes[k]) if as_torch else a
        return tree_unflatten(leaves, sig.out_spec)


# --- helpers --------------------------------------------------------------------------------


def _as_module(fn: Any, torch: Any) -> Any:
    if isinstance(fn, torch.nn.Module):
        return fn
    if not callable(fn):
        raise TorchCompileError(
            f"ex.compile expects a torch.nn.Module or a function of tensors, got "
            f"{type(fn).__name__}"
        )

    class FunctionModule(torch.nn.Module):
        def forward(self, *args, **kwargs):
            return fn(*args, **kwargs)

    FunctionModule.__name__ = getattr(fn, "__name__", "function")
    return FunctionModule()


def _as_tuple(inputs: Any, torch: Any) -> tuple:
    if isinstance(inputs, torch.Tensor | np.ndarray):
        return (inputs,)
    if isinstance(inputs, list | tuple):
        return tuple(inputs)
    raise TorchCompileError(
        f"example_inputs={type(inputs).__name__}: expected a tensor, a numpy array or a "
        "tuple of those (and Python constants)"
    )


def _to_torch(x: Any, torch: Any) -> Any:
    return torch.from_numpy(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else x


def numpy_of(x: Any) -> np.ndarray:
    """A tensor's numpy array (a view for a CPU tensor without grad in a numpy dtype)."""
    try:
        return x.numpy()
    except (AttributeError, TypeError, RuntimeError):
        return as_array(x)


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def _torch_of(a: np.ndarray, dtype: Any) -> Any:
    import torch

    if not a.flags.writeable:
        a = a.copy()
    t = torch.from_numpy(a)
    return t if t.dtype == dtype else t.to(dtype)


def _takes_use_cache(module: Any) -> bool:
    if getattr(getattr(module, "config", None), "use_cache", None) is None:
        return False
    try:
        params = inspect.signature(type(module).forward).parameters
    except (TypeError, ValueError):
        return False
    return "use_cache" in params


@contextlib.contextmanager
def _eager_attention(module: Any) -> Iterator[list[str]]:
    """Trace a transformers model with its ``eager`` attention: the ``sdpa`` path builds its
    mask with ops the IR does not map (``aten.diff``, boolean indexing: found on GPT-2 as
    ``GPT2LMHeadModel(config)`` makes it), and flash/flex kernels do not trace on a CPU.
    Yields the implementations switched (empty when none); restores them after."""
    configs = {}
    for m in module.modules():
        cfg = getattr(m, "config", None)
        impl = getattr(cfg, "_attn_implementation", None)
        if isinstance(impl, str) and impl != "eager":
            configs[id(cfg)] = (cfg, impl)
    switched = sorted({impl for _, impl in configs.values()})
    try:
        for cfg, _ in configs.values():
            cfg._attn_implementation = "eager"
        yield switched
    finally:
        for cfg, impl in configs.values():
            cfg._attn_implementation = impl


def _trace_graph(dressed: Any, flat: tuple, title: str, cls: str) -> Graph:

    try:
        graph = from_torch(dressed, flat, name=title)
    except TorchImportError as e:
        raise TorchCompileError(
            f"cannot compile {cls}: {str(e)[:600]}; make the forward traceable by "
            "torch.export (no data-dependent Python control flow, outputs of tensors and "
            "Python values; transformers models: use_cache=False)"
        ) from None
    except Exception as e:  # torch raises many kinds while tracing: never let one out raw
        raise TorchCompileError(
            f"cannot compile {cls}: tracing failed with {type(e).__name__}: "
            f"{str(e).splitlines()[0][:400] if str(e) else ''}; make the forward traceable "
            "by torch.export"
        ) from None
    rep = graph.report
    if rep is not None and rep.opaque:
        raise TorchCompileError(
            f"cannot compile {cls}: ops without an IR mapping "
            f"({', '.join(str(o) for o in rep.opaque)}); register a mapping in "
            "explorer.models.torch_import (HANDLERS) or a leaf handler for the module"
        )
    return graph


def _output_index(graph: Graph, sig: FlatSignature, name: str) -> list[int]:
    if sig.out_spec is None:
        raise TorchCompileError(f"{name}: the forward did not run while tracing")
    bad = [v for v in sig.out_leaves if v is not None and not isinstance(v, PYTHON_LEAVES)]
    if bad:
        kind = type(bad[0]).__name__
        raise TorchCompileError(
            f"{name} returns a {kind}, neither a tensor nor a Python value; ex.compile "
            "cannot return it from a compiled call"
            + (
                ": pass use_cache=False (the key/value cache is not carried)"
                if "Cache" in kind
                else ": return its tensors instead"
            )  # fmt: skip
        )
    leaves = getattr(graph, "output_leaves", ())
    if len(leaves) != len(sig.out_tensor_at) or any(v is None for v in leaves):
        raise TorchCompileError(
            f"{name}: the traced graph's outputs do not match the forward's tensors "
            f"({len(leaves)} vs {len(sig.out_tensor_at)}); trace it with from_torch to see why"
        )
    return [graph.outputs.index(v) for v in leaves]


def _weight_dtype(graph: Graph) -> DType:
    for n in graph.parameters:
        if n.type.dtype.is_float:
            return n.type.dtype
    return DType.FP32


def _donated(donate: Any) -> tuple[int, ...]:
    if (
        isinstance(donate, int)
        or not isinstance(donate, Sequence | range)
        or any(type(i) is not int or i < 0 for i in donate)
    ):
        raise TorchCompileError(
            f"donate={donate!r}: expected a tuple of input positions (ints >= 0), e.g. (3, 4)"
        )
    return tuple(sorted(set(donate)))


def _optimize(graph: Graph, level: Level, backend: Backend
              ) -> tuple[Graph, list[RewriteStep], MemoryPlan | None]:  # fmt: skip
    g, steps, plan = optimize(graph, level, backend)
    if len(g.outputs) != len(graph.outputs):
        raise TorchCompileError(
            f"{graph.name}: the passes changed the number of outputs "
            f"({len(graph.outputs)} -> {len(g.outputs)}); compile with level='O0'"
        )
    return g, steps, plan
