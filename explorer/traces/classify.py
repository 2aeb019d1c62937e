"""What a profiled kernel or op is: its category, and for a collective its kind, size and
dtype in the planner's conventions.

Categories (`Category`): ``matmul``, ``attention`` (fused attention kernels), ``norm``
(normalisation), ``elementwise`` (pointwise, reductions, softmax, activations), ``optimizer``,
``memcpy`` (copies and memsets), ``communication`` (collectives) and ``other``; a rank's idle
time is what no category covers (`explorer.traces.breakdown`). A GPU kernel is classified by
its own name first (``ncclKernel_AllReduce...``, ``ampere_sgemm...``, ``flash_fwd...``), then by
the name of the CPU op that launched it (``aten::mm`` launching a CUTLASS kernel).

Collective sizes follow `explorer.hardware.collectives`: ``S`` is the all-reduced buffer,
the gathered OUTPUT of an all-gather, the INPUT of a reduce-scatter, the per-device buffer of
an all-to-all, the message of a send/recv.

>>> classify_name("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn")
'matmul'
>>> classify_name("void at::native::vectorized_elementwise_kernel<4, ...>")
'elementwise'
>>> collective_kind("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, ...)")
'all-gather'
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Literal, get_args

__all__ = [
    "Category",
    "CATEGORIES",
    "COMPUTE_CATEGORIES",
    "CollectiveName",
    "classify_name",
    "collective_kind",
    "dtype_name",
    "dtype_bytes",
    "nelems",
]

Category = Literal[
    "matmul", "attention", "norm", "elementwise", "optimizer", "memcpy", "communication",
    "other",
]  # fmt: skip
CATEGORIES: tuple[str, ...] = get_args(Category)
# What counts as compute when a rank's step is split into compute / communication / idle.
COMPUTE_CATEGORIES: tuple[str, ...] = tuple(c for c in CATEGORIES if c != "communication")

CollectiveName = Literal[
    "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send/recv", "broadcast",
    "reduce", "gather", "scatter", "barrier",
]  # fmt: skip

# (category, pattern) in the order they are tried: the first match wins, so the specific
# patterns (communication, attention, optimizer) come before the generic ones.
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (cat, re.compile(pat, re.IGNORECASE))
    for cat, pat in (
        # FSDP's hooks that issue a collective or wait for it (on CPU, their self time is
        # the wait); the c10d ops and the backends' own slices.
        (
            "communication",
            r"^nccl|^rccl|^gloo:|^c10d::|record_param_comms|^nccl:|"
            r"^FSDP::(all_gather|post_backward_reduce|backward_prefetch)(\s|$)|"
            r"^FSDP::.*_wait",
        ),  # fmt: skip
        (
            "memcpy",
            r"^memcpy|^memset|^aten::(copy_|_to_copy|to|clone|contiguous)$|"
            r"nchwtonhwc|nhwctonchw|catarraybatchedcopy",
        ),  # fmt: skip
        ("attention", r"flash|fmha|attention|sdpa|_efficient_attention|\bmha_|cudnn.*mha"),
        ("optimizer", r"multi_tensor_apply|adam|^optimizer\.|sgd|lamb|_foreach_|fused_adam"),
        (
            "norm",
            r"layer_?norm|rms_?norm|batch_?norm|group_?norm|bn_fw|bn_bw|"
            r"native_layer_norm|normalization|rowwisemoments|gammabetabackward|"
            r"layernormforward|layernormbackward",
        ),  # fmt: skip
        (
            "matmul",
            r"(?<!fb)gemm|cublas|cutlass|xmma|wgmma|nvjet|matmul|^aten::(mm|addmm|bmm|baddbmm|"
            r"linear|_scaled_mm)$|^(addmm|mm|bmm)backward|^ampere_.*(s|h)(16|884)|"
            r"kernel_mma|hgemm|sgemm|dgemm|convolution|wgrad|dgrad|fprop_implicit",
        ),  # fmt: skip
        (
            "elementwise",
            r"elementwise|reduce_kernel|softmax|gelu|relu|silu|dropout|"
            r"^aten::(add|add_|mul|mul_|sub|div|div_|pow|square|mean|sum|fill_|"
            r"zero_|exp|tanh|sigmoid|where|neg|sqrt|rsqrt|cat|stack|index|gather|"
            r"scatter|embedding|cross_entropy|nll_loss|log_softmax|clamp)|"
            r"backward0$|triton_poi|triton_red|triton_per|fill_kernel|cat_kernel|"
            r"index_kernel|vectorized|unrolled|pointwise",
        ),  # fmt: skip
    )
)

# Names that say nothing about the work (wrappers, autograd plumbing): their time is
# attributed by the enclosing or enclosed op (`breakdown`).
_GENERIC = re.compile(
    r"^autograd::engine::evaluate_function|^aten::(t|transpose|view|as_strided|expand|detach|"
    r"reshape|empty|empty_like|empty_strided|resolve_conj|resolve_neg|result_type|"
    r"ones_like|zeros_like|alias|select|slice|unsqueeze|squeeze|permute)$|^detach$|"
    r"^profilerstep#|^torch::autograd::accumulategrad$|^DistributedDataParallel",
    re.IGNORECASE,
)


@lru_cache(maxsize=65536)
def classify_name(name: str) -> str | None:
    """The `Category` a kernel or op name says, or None when the name is generic (a view,
    an autograd wrapper) or unknown: the caller then looks at the op around it or at the op
    that launched the kernel."""
    if _GENERIC.search(name):
        return None
    for cat, pat in _RULES:
        if pat.search(name):
            return cat
    return None


# Collective names as NCCL kernels, c10d ops, gloo annotations and Kineto's "Collective
# name" argument spell them, to the planner's names.
_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pat, re.IGNORECASE))
    for kind, pat in (
        ("reduce-scatter", r"reduce_?scatter|reducescatter"),
        ("all-gather", r"all_?gather|allgather"),
        ("all-reduce", r"all_?reduce|allreduce"),
        ("all-to-all", r"all_?to_?all|alltoall"),
        ("send/recv", r"send_?recv|sendrecv|\bsend|\brecv|_send|_recv|recv_|send_"),
        ("broadcast", r"broadcast"),
        ("barrier", r"barrier"),
        ("gather", r"gather"),
        ("scatter", r"scatter"),
        ("reduce", r"reduce"),
    )
)


@lru_cache(maxsize=4096)
def collective_kind(name: str) -> str | None:
    """The `CollectiveName` in a kernel, op or ``Collective name`` string, or None."""
    for kind, pat in _KINDS:
        if pat.search(name):
            return kind
    return None


_DTYPES = {
    "float": "float32", "float32": "float32", "c10::float": "float32", "fp32": "float32",
    "double": "float64", "float64": "float64",
    "half": "float16", "float16": "float16", "c10::half": "float16", "fp16": "float16",
    "bfloat16": "bfloat16", "c10::bfloat16": "bfloat16", "bf16": "bfloat16",
    "char": "int8", "int8": "int8", "int8_t": "int8", "byte": "uint8", "uint8": "uint8",
    "unsigned char": "uint8", "int": "int32", "int32": "int32", "long": "int64",
    "int64": "int64", "long int": "int64", "bool": "bool",
    "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
}  # fmt: skip
_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int8": 1, "uint8": 1,
          "int32": 4, "int64": 8, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}  # fmt: skip


def dtype_name(text: object) -> str | None:
    """A profiler's dtype spelling (``Float``, ``c10::BFloat16``, ``float``) as a numpy-style
    name (``float32``, ``bfloat16``), or None when unknown (``TensorList``, ``""``).

    >>> dtype_name("BFloat16"), dtype_name("TensorList")
    ('bfloat16', None)
    """
    if not isinstance(text, str):
        return None
    return _DTYPES.get(text.strip().lower())


def dtype_bytes(dtype: str | None) -> int | None:
    """Bytes per element of a `dtype_name`, or None."""
    return None if dtype is None else _BYTES.get(dtype)


def nelems(dims: object) -> int | None:
    """Elements of one profiler "Input Dims" entry: a shape (``[64, 64]``) or a tensor list
    (``[[2048], [32]]``, summed); None for a scalar's ``[]`` or anything else.

    >>> nelems([64, 64]), nelems([[2048], [32]]), nelems([])
    (4096, 2080, None)
    """
    if not isinstance(dims, list) or not dims:
        return None
    if all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        return math.prod(dims)
    if all(isinstance(d, list) for d in dims):
        parts = [nelems(d) if d else 1 for d in dims]
        return None if any(p is None for p in parts) else sum(parts)
    return None
