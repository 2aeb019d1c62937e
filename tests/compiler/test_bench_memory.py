"""bench/jit.py's peak memory of a call, one method for every column: numpy's and torch's
buffers of the same size read the same peak, call after call (freed buffers leave the RSS
once glibc's mmap threshold is pinned)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not Path("/proc/self/clear_refs").exists():
    pytest.skip("the peak RSS of a call is read from Linux's /proc", allow_module_level=True)

MIB = 2**20


@pytest.fixture(scope="module")
def bench(load_bench_jit):
    mod = load_bench_jit("bench_jit_memory")
    assert mod.pin_malloc()
    return mod


def _numpy_call():
    a = np.ones(8 * MIB // 8)
    return float(a[-1])


def _torch_call():
    t = torch.ones(8 * MIB // 8, dtype=torch.float64)
    return float(t[-1])


def test_numpy_and_torch_buffers_read_the_same_peak_every_call(bench):
    # 8 MiB: under glibc's largest dynamic mmap threshold (32 MiB), so an unpinned heap keeps
    # the freed buffer resident and later calls read about 0
    _torch_call()  # torch's first op initialises its runtime
    peaks = [bench._rss_peak(f) for f in (_numpy_call, _torch_call) * 3]
    for p in peaks:
        assert 7.5 * MIB <= p <= 9 * MIB, [round(q / MIB, 1) for q in peaks]


def test_a_call_without_buffers_reads_almost_nothing(bench):
    assert bench._rss_peak(lambda: 1.0) < 1 * MIB
