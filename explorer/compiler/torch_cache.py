"""The disk cache of ``ex.compile``: a traced PyTorch program kept across processes, so that
a second process builds its program without calling torch.export.

What is stored (one ``.npz`` file per key, read with ``allow_pickle=False``: JSON text and
numpy arrays, never a pickle) is what tracing makes: the IR graph (nodes, types, attributes,
constants), its outputs, which graph value each returned tensor is, the tensors the forward
made itself (lifted constants), the output structure of the forward (torch's pytree spec
as JSON) and the notes of the trace. The weights are not stored: every program reads them
from the module (the folding, passes, memory plan and kernels are rebuilt from the graph:
25 ms for the whole ``ex.compile`` of transformers' GPT-2 tiny on a hit, against 0.8-1.2 s
tracing it, measured with other work running; numba's kernels have their own disk cache).

The key (`program_key`) holds everything the traced graph depends on: the source files of
the module's classes (and of a traced function's code), the non-tensor state of every
submodule (flags such as ``training``, a transformers config as JSON), parameter and
buffer names, shapes and dtypes, a hash of their values (``disk_cache="values"``, the
default; ``"structure"`` leaves the values out, the weights being read fresh anyway), the
example inputs' structure, shapes and dtypes, the Python constants of the call, the compile
options, the versions of explorer, torch, transformers and numpy and a hash of the sources
of the IR, the model importers and the ``torch_*`` modules of this package. Any change is
another key: the program is traced again. What the key cannot see: module-level Python
values the forward reads that a program changes at run time (a global flag), and objects
other than tensors, Python values and functions that a compiled function closes over (such
a function is traced and not stored: ``"unstored"``); compile such code with
``disk_cache="off"``.

A file that cannot be read back (truncated, edited, from another format) is a
`CacheEvent` of kind ``"corrupt"`` with its reason: the program is traced again and the
entry rewritten.

The directory: ``EXPLORER_COMPILE_CACHE`` when set, else
``$XDG_CACHE_HOME/parallel-explorer/compile`` (``~/.cache`` when XDG_CACHE_HOME is unset;
the generated numba kernels live in ``~/.cache/parallel-explorer/codegen``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..ir import DType, Node, TensorType
from ..ir.ops_tensor import Const
from ..models.torch_import.report import ImportReport, TracedGraph
from .torch_io import PYTHON_LEAVES, FlatSignature, as_array

__all__ = ["DiskCache", "CacheEvent", "CACHE_MODES", "cache_dir", "program_key", "FORMAT"]

DiskCache = Literal["values", "structure", "off"]
CACHE_MODES: tuple[str, ...] = ("values", "structure", "off")
#: The layout of a stored entry; another value is a miss (never read as this one).
FORMAT = 1
_SRC_LOCK = threading.Lock()
_FILE_HASHES: dict[tuple[str, float], str] = {}


@dataclass(frozen=True)
class CacheEvent:
    """What the disk cache did for one ``ex.compile``.

    ``kind``: ``"hit"`` (loaded, torch.export not called), ``"miss"`` (traced and stored),
    ``"corrupt"`` (the entry could not be read: traced again and rewritten; ``reason``
    says why), ``"unstored"`` (traced; the graph holds a value the format cannot store,
    named in ``reason``) or ``"off"``. ``key``: the entry's key; ``path``: its file.
    """

    kind: Literal["hit", "miss", "corrupt", "unstored", "off"]
    key: str = ""
    path: str = ""
    reason: str = ""

    def __str__(self) -> str:
        why = f": {self.reason}" if self.reason else ""
        return f"disk cache {self.kind} {self.key[:12]}{why}"


class CacheFormatError(Exception):
    """Internal: an entry that cannot be read back, or a value that cannot be written."""


def cache_dir() -> Path:
    """The directory of stored programs (see the module docstring)."""
    env = os.environ.get("EXPLORER_COMPILE_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "parallel-explorer" / "compile"


# --- the key ----------------------------------------------------------------------------------


def program_key(module: Any, fn: Any, sig: FlatSignature, flat: tuple, options: dict[str, Any],
                mode: DiskCache) -> str:  # fmt: skip
    """The hex key of a compile: ``module`` the torch module compiled, ``fn`` the function it
    wraps (None for a module), ``sig``/``flat`` the flattened example call, ``options`` the
    compile options. Raises `CacheFormatError` when the module's code cannot be identified
    (no source file): such a program is not cached."""
    h = hashlib.blake2b(digest_size=20)

    def put(*parts: Any) -> None:
        for p in parts:
            h.update(p if isinstance(p, bytes) else str(p).encode())
            h.update(b"\x00")

    put("format", FORMAT, *_versions(), _explorer_sources())
    put("options", json.dumps(options, sort_keys=True, default=repr))
    for path, m in module.named_modules(remove_duplicate=False):
        put("module", path, *_class_code(type(m)), _state(m))
    if fn is not None:
        put("fn", *_function_code(fn))
    tensors = list(module.named_parameters(remove_duplicate=False))
    tensors += list(module.named_buffers(remove_duplicate=False))
    for name, t in tensors:
        put("tensor", name, tuple(t.shape), t.dtype, t.requires_grad)
        if mode == "values":
            put(_tensor_digest(t))
    put("call", sig.in_spec, json.dumps(sig.in_leaves, default=repr), *sig.names)
    for t in flat:
        put(tuple(t.shape), t.dtype)
    return h.hexdigest()


def _versions() -> tuple[str, ...]:
    import torch

    try:
        ours = importlib.metadata.version("parallel-explorer")
    except importlib.metadata.PackageNotFoundError:  # a source checkout: the hashes decide
        ours = "-"
    tf = sys.modules.get("transformers")
    return (ours, torch.__version__, getattr(tf, "__version__", "-"), np.__version__)


def _explorer_sources() -> str:
    """A hash of the sources that make a traced graph and read it back: the IR, the model
    importers (``explorer/models``, the torch importer and its leaf handlers included) and
    this package's ``torch_*`` modules (flattening the call, the cache itself)."""
    root = Path(__file__).resolve().parents[1]
    files = sorted((root / "ir").glob("*.py")) + sorted((root / "models").rglob("*.py"))
    files += sorted((root / "compiler").glob("torch_*.py"))
    digest = "".join(_file_hash(f) for f in files)
    return hashlib.blake2b(digest.encode(), digest_size=16).hexdigest()


def _file_hash(path: Path | str) -> str:
    path = str(path)
    stat = os.stat(path)
    key = (path, stat.st_mtime)
    with _SRC_LOCK:
        found = _FILE_HASHES.get(key)
    if found is None:
        with open(path, "rb") as f:
            found = hashlib.blake2b(f.read(), digest_size=16).hexdigest()
        with _SRC_LOCK:
            _FILE_HASHES[key] = found
    return found


def _class_code(cls: type) -> list[str]:
    """Qualified name and source-file hash of every class of ``cls``'s MRO below torch's
    ``nn.Module`` (the file: helper functions beside the class count too)."""
    out = []
    for c in cls.__mro__:
        mod = c.__module__ or ""
        if mod.startswith("torch.") or c is object:
            out.append(f"{mod}.{c.__qualname__}")
            continue
        try:
            src = inspect.getsourcefile(c)
        except TypeError:
            src = None
        if src is None or not os.path.exists(src):
            raise CacheFormatError(f"class {mod}.{c.__qualname__} has no source file")
        out += [f"{mod}.{c.__qualname__}", _file_hash(src)]
    return out


def _function_code(fn: Any) -> list[str]:
    code = getattr(fn, "__code__", None)
    if code is None:
        return _class_code(type(fn))
    out = [getattr(fn, "__qualname__", "?"), _code_digest(code)]
    for cell in getattr(fn, "__closure__", None) or ():
        out.append(_value_digest(cell.cell_contents))
    return out


def _code_digest(code: Any) -> str:
    h = hashlib.blake2b(code.co_code, digest_size=16)
    for c in code.co_consts:
        h.update(_code_digest(c).encode() if hasattr(c, "co_code") else repr(c).encode())
    h.update(repr(code.co_names).encode())
    return h.hexdigest()


def _value_digest(v: Any) -> str:
    if (
        isinstance(v, PYTHON_LEAVES)
        or isinstance(v, tuple)
        and all(isinstance(x, PYTHON_LEAVES) for x in v)
    ):
        return repr(v)
    if hasattr(v, "__code__"):
        return "".join(_function_code(v))
    if type(v).__module__.startswith("torch") and hasattr(v, "shape"):
        return f"tensor{tuple(v.shape)}{v.dtype}{_tensor_digest(v)}"
    if isinstance(v, np.ndarray):
        return f"array{v.shape}{v.dtype}{hashlib.blake2b(v.tobytes(), digest_size=16).hexdigest()}"
    raise CacheFormatError(f"the function closes over a {type(v).__name__}")


def _tensor_digest(t: Any) -> str:
    import torch

    x = t.detach()
    if x.device.type != "cpu":
        x = x.cpu()
    raw = x.contiguous().reshape(-1).view(torch.uint8).numpy()
    return hashlib.blake2b(raw.data, digest_size=16).hexdigest()


_SKIP_STATE = frozenset({"_parameters", "_buffers", "_modules"})


def _state(m: Any) -> str:
    """The non-tensor state of one module: its Python values and its config as JSON."""
    parts = []
    for k, v in sorted(vars(m).items()):
        if (
            k in _SKIP_STATE
            or k.endswith("hooks")
            or k.startswith("_forward")
            or k.startswith("_backward")
        ):
            continue
        if (
            isinstance(v, PYTHON_LEAVES)
            or isinstance(v, tuple)
            and all(isinstance(x, PYTHON_LEAVES) for x in v)
        ):
            parts.append(f"{k}={v!r}")
        elif hasattr(v, "to_dict") and callable(v.to_dict):  # a transformers config
            parts.append(f"{k}={json.dumps(v.to_dict(), sort_keys=True, default=repr)}")
    return ";".join(parts)


# --- the entry --------------------------------------------------------------------------------


def entry_path(key: str) -> Path:
    return cache_dir() / f"p_{key}.npz"


def store(key: str, graph: Any, sig: FlatSignature, notes: tuple[str, ...]) -> Path:
    """Write the entry of ``key``; raises `CacheFormatError` for a value it cannot store."""
    from torch.utils._pytree import treespec_dumps

    arrays: dict[str, np.ndarray] = {}
    nodes = [
        [n.name, n.op, list(n.inputs), list(n.type.shape), n.type.dtype.value,
         [[k, _encode(v, arrays)] for k, v in n.attrs], n.scope]
        for n in graph.nodes
    ]  # fmt: skip
    lifted = []
    for name, value in getattr(graph, "lifted", ()):
        arrays[f"a{len(arrays)}"] = np.ascontiguousarray(as_array(value))
        lifted.append([name, f"a{len(arrays) - 1}"])
    try:
        out_spec = treespec_dumps(sig.out_spec)
    except Exception as e:  # noqa: BLE001 (torch raises several kinds for unregistered types)
        raise CacheFormatError(f"the output structure cannot be stored ({e})"[:300]) from None
    report = getattr(graph, "report", None)
    meta = {
        "format": FORMAT, "key": key, "name": graph.name, "nodes": nodes,
        "outputs": list(graph.outputs), "output_leaves": list(getattr(graph, "output_leaves", ())),
        "lifted": lifted, "out_spec": out_spec, "out_leaves": sig.out_leaves,
        "out_tensor_at": sig.out_tensor_at, "out_dtypes": [str(d) for d in sig.out_dtypes or ()],
        "notes": list(notes),
        "report": None if report is None else {
            "module": report.module, "tracer": report.tracer, "leaves": report.leaves,
            "tied": report.tied, "buffers": report.buffers, "notes": report.notes,
        },
    }  # fmt: skip
    try:
        text = json.dumps(meta, allow_nan=True)
    except (TypeError, ValueError) as e:
        raise CacheFormatError(f"an output leaf cannot be stored ({e})") from None
    arrays["meta"] = np.frombuffer(text.encode(), dtype=np.uint8)
    path = entry_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)  # readers see the whole file or none
    return path


@dataclass(frozen=True)
class Loaded:
    """An entry read back: the traced graph, the output structure, the trace's notes."""

    graph: Any
    out_spec: Any
    out_leaves: list[Any]
    out_tensor_at: list[int]
    out_dtypes: list[Any]
    notes: tuple[str, ...]


def load(key: str) -> Loaded | None:
    """The entry of ``key``, or None when there is none; raises `CacheFormatError` with the
    reason for an entry that cannot be read back."""
    path = entry_path(key)
    if not path.exists():
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(4)
        if head != b"PK\x03\x04":  # np.load would take other bytes for a pickle (refused)
            raise CacheFormatError(f"not an .npz archive (it begins with {head!r})")
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(arrays.pop("meta").tobytes().decode())
        if meta.get("format") != FORMAT or meta.get("key") != key:
            raise CacheFormatError(f"format {meta.get('format')!r}, key {meta.get('key')!r}")
        return _rebuild(meta, arrays)
    except CacheFormatError:
        raise
    except Exception as e:  # noqa: BLE001 (zip, JSON, IR validation: any failure is corruption)
        raise CacheFormatError(f"{type(e).__name__}: {str(e)[:300]}") from None


def _rebuild(meta: dict, arrays: dict[str, np.ndarray]) -> Loaded:
    import torch
    from torch.utils._pytree import treespec_loads

    nodes = tuple(
        Node(name, op, tuple(inputs), TensorType(tuple(shape), DType(dt)),
             tuple((k, _decode(v, arrays)) for k, v in attrs), scope)
        for name, op, inputs, shape, dt, attrs, scope in meta["nodes"]
    )  # fmt: skip
    rep = meta["report"]
    report = None
    if rep is not None:
        report = ImportReport(
            module=rep["module"], tracer=rep["tracer"],
            leaves=tuple(tuple(x) for x in rep["leaves"]), tied=tuple(tuple(x) for x in rep["tied"]),
            buffers=tuple(rep["buffers"]), notes=tuple(rep["notes"]),
        )  # fmt: skip
    lifted = tuple((name, torch.from_numpy(arrays[a])) for name, a in meta["lifted"])
    graph = TracedGraph(nodes, tuple(meta["outputs"]), meta["name"], report=report,
                        output_leaves=tuple(meta["output_leaves"]), lifted=lifted)  # fmt: skip
    dtypes = [getattr(torch, d.removeprefix("torch.")) for d in meta["out_dtypes"]]
    return Loaded(graph, treespec_loads(meta["out_spec"]), meta["out_leaves"],
                  meta["out_tensor_at"], dtypes, tuple(meta["notes"]))  # fmt: skip


def _encode(v: Any, arrays: dict[str, np.ndarray]) -> Any:
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, tuple):
        return {"t": [_encode(x, arrays) for x in v]}
    if isinstance(v, DType):
        return {"dtype": v.value}
    if isinstance(v, Const):
        name = f"a{len(arrays)}"
        arrays[name] = np.ascontiguousarray(v.array)
        return {"const": name}
    if isinstance(v, np.generic):
        return {"np": [v.dtype.str, v.item()]}
    raise CacheFormatError(f"an attribute of type {type(v).__name__} ({v!r:.60})")


def _decode(v: Any, arrays: dict[str, np.ndarray]) -> Any:
    if not isinstance(v, dict):
        return v
    if "t" in v:
        return tuple(_decode(x, arrays) for x in v["t"])
    if "dtype" in v:
        return DType(v["dtype"])
    if "const" in v:
        return Const(arrays[v["const"]])
    if "np" in v:
        return np.dtype(v["np"][0]).type(v["np"][1])
    raise CacheFormatError(f"an attribute encoded as {sorted(v)}")
