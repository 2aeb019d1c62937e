"""Large weights moved onto huge pages in place (explorer/compiler/huge_pages.py): the
kernel reports the range on huge pages afterwards, the data and the address are kept,
small arrays and repeated views are not asked twice, and ``ex.compile`` collapses a
model's large weights with outputs equal to torch's."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.compiler import huge_pages
from explorer.compiler.huge_pages import HUGE_PAGE, MIN_BYTES, collapse

torch = pytest.importorskip("torch")

needs_thp = pytest.mark.skipif(not huge_pages.supported(),
                               reason="transparent huge pages: Linux with THP not 'never'")  # fmt: skip


class Conv1D(torch.nn.Module):
    """GPT-2's layer: ``x @ w + b`` with ``w`` stored (in, out), so the program's weight is
    the module's own memory."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n_in, n_out) * 0.02)
        self.bias = torch.nn.Parameter(torch.randn(n_out))

    def forward(self, x):
        return torch.nn.functional.gelu(x @ self.weight + self.bias)


def _huge_kib(address: int) -> int:
    """AnonHugePages (KiB) of the mapping of this process that holds ``address``."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(maxsplit=1)[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1])
    return 0


def _probe() -> None:
    """Skips the test where this kernel refuses MADV_COLLAPSE on a fresh torch tensor
    (older than Linux 6.1, or no free huge page)."""
    if collapse([torch.randn(3 << 20).numpy()]) == 0:
        pytest.skip("the kernel refused MADV_COLLAPSE (older than Linux 6.1, or no free huge page)")


def _whole_pages(a: np.ndarray) -> int:
    lo = a.ctypes.data
    return (lo + a.nbytes) // HUGE_PAGE * HUGE_PAGE - (lo + HUGE_PAGE - 1) // HUGE_PAGE * HUGE_PAGE


@needs_thp
def test_a_torch_tensor_is_moved_onto_huge_pages_in_place():
    w = torch.randn(4096, 1024)  # 16 MiB on torch's 4 KiB pages
    a = w.numpy()
    before_data, address = a.copy(), a.ctypes.data
    before = _huge_kib(address)
    moved = collapse([a])
    if moved == 0:
        _probe()
    assert moved == _whole_pages(a) and moved >= 6 * HUGE_PAGE
    assert _huge_kib(address) - before >= moved // 1024  # the kernel's own count
    assert a.ctypes.data == address  # the same memory, not a copy
    np.testing.assert_array_equal(a, before_data)


def test_small_arrays_are_not_asked_and_repeated_views_count_once():
    assert collapse([np.ones(MIN_BYTES // 4 - 1, np.float32)]) == 0
    if not huge_pages.supported():
        return
    a = torch.randn(3 << 20).numpy()  # 12 MiB
    moved = collapse([a, a[: a.size // 2], a.reshape(2, -1)])
    assert moved in (0, _whole_pages(a))  # one range, not three


@needs_thp
def test_compile_moves_a_large_weight_and_outputs_equal_torch():
    import explorer as ex

    torch.manual_seed(0)
    big, small = Conv1D(2048, 1024), Conv1D(64, 32)  # 8 MiB, read in place (x @ w)
    x, xs = torch.randn(1, 2048), torch.randn(1, 64)
    _probe()
    prog = ex.compile(big, (x,), disk_cache="off")
    w = big.weight.detach().numpy()
    assert prog.huge_page_bytes == _whole_pages(w)
    assert _huge_kib(w.ctypes.data) >= prog.huge_page_bytes // 1024
    assert any(np.shares_memory(a, w) for a in prog._template if a is not None)
    with torch.no_grad():
        np.testing.assert_allclose(prog(x).numpy(), big(x).numpy(), rtol=1e-5, atol=1e-5)
    assert ex.compile(small, (xs,), disk_cache="off").huge_page_bytes == 0


def _owner(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def test_blocks_of_a_fused_projection_are_copied_side_by_side_into_one_buffer():
    transformers = pytest.importorskip("transformers")
    from explorer.compiler.torch_io import weights
    from explorer.models.torch_import import from_torch

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128,
                                  n_positions=32, bos_token_id=0, eos_token_id=0)  # fmt: skip
    model = transformers.GPT2LMHeadModel(cfg).eval()
    model.config.use_cache = False
    graph = from_torch(model, (torch.tensor([[1, 5, 9, 3]]),))  # the importer's split blocks
    blocks = {k: v for k, v in weights(graph, model).items() if "c_attn.weight[" in k}
    assert len(blocks) == 2 * 3  # q, k, v columns, 2 layers (the bias's are contiguous views)
    owners = {id(_owner(v)) for v in blocks.values()}
    assert len(owners) == 1  # one buffer, not a copy each
    starts = [v.ctypes.data for v in blocks.values()]
    assert starts == sorted(starts) and all(s % 64 == 0 for s in starts)
    state = dict(model.named_parameters())
    for name, v in blocks.items():
        whole, cut = name[:-1].split("[")
        a, b = (int(x) for x in cut.split(":"))
        assert v.flags.c_contiguous
        np.testing.assert_array_equal(v, state[whole].detach().numpy()[..., a:b])
