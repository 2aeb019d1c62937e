"""Generated kernels: fused regions compiled from Python source by numba (LLVM).

The pass ``explorer.compiler.passes.codegen`` chooses per region between a generated
kernel and the numpy path (``cost``), writes the kernel's source (``source``) and records
it as a RewriteStep; ``build`` compiles the source (cached by the source itself, in process
and on disk; by default on a background thread while the numpy kernels serve the first
calls) and wraps it as an executor kernel.
"""

from .build import (
    KernelBuildError,
    cache_dir,
    compile_mode,
    compile_seconds,
    load,
    load_async,
    numba_available,
    wait_compiled,
)
from .cost import Choice, choose
from .op import GENERATED
from .source import UnsupportedRegion, broadcast_split

__all__ = ["choose", "Choice", "numba_available", "load", "load_async", "wait_compiled",
           "compile_mode", "compile_seconds",
           "cache_dir", "KernelBuildError", "GENERATED", "UnsupportedRegion",
           "broadcast_split"]  # fmt: skip
