"""Compile generated kernel modules with numba and wrap them as executor kernels.

A module's source is its structural key: the in-process table maps the source's hash to
the compiled function, and on disk the source is written once to
``$EXPLORER_CODEGEN_CACHE`` (default ``~/.cache/parallel-explorer/codegen``) as
``k_<hash>.py`` and imported from there, so numba's own cache (``cache=True``, beside the
file) serves later processes: a kernel is compiled once per machine, not once per run.

``compile_seconds()`` reports the time spent compiling or loading in this process.
Measured (bench/jit.py, 2 shared cores, quiet): the small GPT's 9 kernels (3 sources: layer
norm, softmax, bias + GELU) compile cold in 3.7 s and load from the disk cache in a new
process in 0.66 s (numba's import included); 5.3 s and 2.6 s at a load average of 11.

Compilation runs in the background by default (``EXPLORER_NUMBA_COMPILE=background``):
``load_async`` queues a kernel for one worker thread, started after the program's run, and
the executor runs the region's numpy kernel until it is ready, so a first call never waits
for numba (``kernels.py``);
``wait_compiled()`` blocks until every kernel asked for is ready.
``EXPLORER_NUMBA_COMPILE=sync`` compiles on the first call instead.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from pathlib import Path

import numpy as np

from ..errors import CompilerError

__all__ = ["numba_available", "numba_threads", "load", "load_async", "loaded", "wait_compiled",
           "has_queued", "start_queued",
           "compile_mode", "elementwise_kernel", "rows_kernel", "cache_dir", "compile_seconds",
           "KernelBuildError"]  # fmt: skip

_LOCK = threading.Lock()  # guards the tables below (held briefly, never while compiling)
_LOADED: dict[str, Callable] = {}
_PENDING: dict[str, Future] = {}  # kernels handed to the worker (failed ones stay here)
_QUEUED: list[tuple[str, str, Future]] = []  # asked for, not yet handed to the worker
_JOBS: queue.SimpleQueue = queue.SimpleQueue()  # (future, source, entry) for the worker
# one daemon thread, made on the first background compile: a process may exit while it
# compiles (the source and numba's cache files are written by rename: never half written)
_WORKER: list[threading.Thread] = []
_SECONDS: list[float] = [0.0]
_COMPILE = threading.Lock()  # one compilation at a time (numba's compiler is not reentrant)
MODES = ("background", "sync")
# numba's default "workqueue" threading layer must not be entered by two threads at once:
# parallel kernels take this lock (serial kernels release the GIL and run concurrently).
_PARALLEL = threading.Lock()


class KernelBuildError(CompilerError):
    """numba could not compile a generated kernel (the source is in the message)."""


def numba_available() -> bool:
    """numba is importable and not switched off by ``EXPLORER_NO_NUMBA=1``."""
    if os.environ.get("EXPLORER_NO_NUMBA", "") not in ("", "0"):
        return False
    return importlib.util.find_spec("numba") is not None


def numba_threads() -> int:
    """Threads a parallel kernel runs on: numba's ``NUMBA_NUM_THREADS``, read from its config
    once numba is imported and computed as numba computes it before (the environment
    variable, else the CPUs this process may run on): choosing a backend must not import
    numba, which took 0.6-1.9 s of a first call here (the worker imports it later)."""
    mod = sys.modules.get("numba")
    if mod is not None and hasattr(mod, "config"):
        return int(mod.config.NUMBA_NUM_THREADS)
    env = os.environ.get("NUMBA_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity on this platform: numba counts the CPUs
        return max(1, os.cpu_count() or 1)


def cache_dir() -> Path:
    env = os.environ.get("EXPLORER_CODEGEN_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "parallel-explorer" / "codegen"


def compile_seconds() -> float:
    """Seconds this process spent compiling (or loading from numba's cache) kernels."""
    return _SECONDS[0]


def compile_mode() -> str:
    """``EXPLORER_NUMBA_COMPILE``: ``background`` (default) or ``sync``."""
    mode = os.environ.get("EXPLORER_NUMBA_COMPILE", "") or "background"
    if mode not in MODES:
        raise KernelBuildError(
            f"EXPLORER_NUMBA_COMPILE={mode!r} is not a compile mode; expected one of "
            f"{', '.join(MODES)} (unset means background)"
        )
    return mode


def _key(source: str) -> str:
    return hashlib.sha1(source.encode()).hexdigest()[:16]


def loaded(source: str) -> Callable | None:
    """The compiled kernel of ``source`` if this process has it, else None (never waits)."""
    with _LOCK:
        return _LOADED.get(_key(source))


def load(source: str, entry: str) -> Callable:
    """The compiled function ``entry`` of the module ``source`` (compiled once per source
    per process; numba's disk cache makes later processes load it instead)."""
    key = _key(source)
    with _LOCK:
        fn = _LOADED.get(key)
    if fn is not None:
        return fn
    with _COMPILE:
        with _LOCK:
            fn = _LOADED.get(key)
        if fn is not None:  # another thread compiled it meanwhile
            return fn
        t0 = time.perf_counter()
        path = cache_dir() / f"k_{key}.py"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():  # written once: numba's cache keys on the file's mtime
                tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
                tmp.write_text(source)
                os.replace(tmp, path)
            name = f"explorer_codegen_k_{key}"
            spec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            sys.modules[name] = mod
            spec.loader.exec_module(mod)  # type: ignore[union-attr]  (compiles: eager sig)
        except Exception as e:  # noqa: BLE001  (numba's typing errors have many classes)
            raise KernelBuildError(
                f"numba could not compile the generated kernel {entry} ({type(e).__name__}: "
                f"{str(e)[:400]}); source:\n{source}\nrun with backend='numpy' to avoid it"
            ) from e
        fn = getattr(mod, entry)
        with _LOCK:
            _LOADED[key] = fn
            _SECONDS[0] += time.perf_counter() - t0
        return fn


def load_async(source: str, entry: str) -> Future:
    """A future of ``load(source, entry)``, to be compiled on the background worker thread
    (one per process; a source asked for twice is compiled once) once ``start_queued()``
    runs: the executor calls it after a program's run, so that compiling does not compete
    for the GIL with the call that asked (a 4M-element call measured 56 ms alone and 330 ms
    beside numba's compiler). A failed compilation stays failed: its future holds the
    KernelBuildError."""
    key = _key(source)
    with _LOCK:
        fut = _PENDING.get(key)
        if fut is not None:
            return fut
        fut = Future()
        fn = _LOADED.get(key)
        if fn is not None:
            fut.set_result(fn)
            return fut
        _PENDING[key] = fut
        _QUEUED.append((source, entry, fut))
    return fut


def has_queued() -> bool:
    """Whether kernels wait for ``start_queued()`` (one list check: called every run)."""
    return bool(_QUEUED)


def start_queued() -> None:
    """Hand the kernels ``load_async`` queued to the worker thread."""
    with _LOCK:
        jobs = list(_QUEUED)
        _QUEUED.clear()
        if jobs and not _WORKER:
            worker = threading.Thread(target=_work, name="explorer-numba", daemon=True)
            worker.start()
            _WORKER.append(worker)
    for source, entry, fut in jobs:
        _JOBS.put((fut, source, entry))


def _work() -> None:
    while True:
        fut, source, entry = _JOBS.get()
        if not fut.set_running_or_notify_cancel():
            continue
        try:
            fut.set_result(load(source, entry))
        except BaseException as e:  # noqa: BLE001  (handed to the future's reader)
            fut.set_exception(e)


def wait_compiled(timeout: float | None = None) -> bool:
    """Start the queued kernels and block until every kernel handed to the background
    worker is compiled (or failed); False if ``timeout`` seconds passed first."""
    start_queued()
    with _LOCK:
        futures = list(_PENDING.values())
    return not wait_futures(futures, timeout=timeout).not_done


def _locked(fn: Callable, parallel: bool) -> Callable:
    if not parallel:
        return fn

    def run(*args):
        with _PARALLEL:
            fn(*args)

    return run


def elementwise_kernel(fn: Callable, parallel: bool, out_shape: tuple[int, ...], split: int,
                       kinds: Sequence[str], out_dtype: np.dtype) -> Callable[..., np.ndarray]:  # fmt: skip
    """``kernel(*arrays, out=None)`` running ``fn`` over 2-D views of the arrays (``out``
    must be C-contiguous: the memory plan's buffers and fresh arrays are)."""
    rows, cols = math.prod(out_shape[:split]), math.prod(out_shape[split:])
    views = [{"full": (rows, cols), "row": (1, cols), "col": (rows, 1), "scalar": (1, 1)}[k]
             for k in kinds]  # fmt: skip
    run = _locked(fn, parallel)
    flat = (rows, cols)
    contiguous = np.ascontiguousarray

    def k_generated(*xs, out=None):
        o = np.empty(out_shape, out_dtype) if out is None else out
        run(*[contiguous(x.reshape(v)) for x, v in zip(xs, views, strict=True)], o.reshape(flat))
        return o

    return k_generated


def rows_kernel(fn: Callable, parallel: bool, out_shape: tuple[int, ...],
                extra: tuple = ()) -> Callable[..., np.ndarray]:  # fmt: skip
    """``kernel(x, *vectors, out=None)`` for a row-wise kernel (softmax, norms): ``x`` and
    ``out`` as ``(rows, d)``, each vector (gain, bias) as ``(1, d)``; ``extra`` scalars
    follow ``out``."""
    d = out_shape[-1] if out_shape else 1
    flat = (math.prod(out_shape[:-1]), d)
    run = _locked(fn, parallel)
    contiguous = np.ascontiguousarray

    def k_rows(x, *vs, out=None):
        o = np.empty(out_shape, np.float32) if out is None else out
        run(contiguous(x.reshape(flat)), *[contiguous(v.reshape(1, d)) for v in vs],
            o.reshape(flat), *extra)  # fmt: skip
        return o

    return k_rows
