"""Real runs: PyTorch profiler (Kineto) traces read, classified and broken down.

``load_kineto`` reads one trace file per rank (or a folder of them) in one incremental pass
(``stream``); ``breakdown`` splits each rank's steps into compute, exposed and overlapped
communication and idle time, per kernel category (``classify``); ``gemm_table`` lists the
GEMMs by shape with the FLOP/s they reached; ``side_by_side`` puts a measured step next to
the simulator's predicted step; ``link_fit`` fits each link level's latency and bandwidth
to the collectives timed (``ex.training.kernel_efficiency``: the GEMM and attention
efficiency to the kernels); ``cpu_runs`` makes real traces on CPU (DDP, FSDP2 over gloo).
``explorer.training.MeasuredRun.from_trace`` turns a trace into a run ``calibrate`` fits.
(``explorer.trace`` is the compiler's own trace.)

>>> import explorer as ex
>>> t = ex.traces.load_kineto(ex.traces.vendored("nccl_data.json.gz"))
>>> print(t)
rank 0 of 2 (nccl, gpu): 3774 kernels, 14388 CPU ops, 3 steps, 21 collectives
"""

from .breakdown import Breakdown, StepBreakdown, axis_of, breakdown
from .classify import CATEGORIES, Category, classify_name, collective_kind
from .errors import TraceFormatError, TracesError
from .events import Activity, Collective, KinetoTrace, ProcessGroup, RankTrace, Step
from .kineto import load_kineto, load_rank, trace_files, vendored
from .links import LinkFit, LinkFits, link_fit
from .matmuls import GemmRow, gemm_dims, gemm_table
from .side_by_side import TRACKS, Lane, SideBySide, Slice, side_by_side

__all__ = [
    "load_kineto", "load_rank", "breakdown", "Breakdown", "StepBreakdown", "axis_of", "trace_files", "vendored", "KinetoTrace", "RankTrace",
    "Activity", "Collective", "ProcessGroup", "Step", "Category", "CATEGORIES",
    "classify_name", "collective_kind", "side_by_side", "SideBySide", "gemm_table", "GemmRow", "gemm_dims", "Lane", "Slice", "TRACKS", "TracesError", "TraceFormatError",
    "link_fit", "LinkFit", "LinkFits",
]  # fmt: skip
