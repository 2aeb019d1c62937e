"""Donated inputs (``ex.compile(..., donate=)``, passes/donate.py): an append to a key/value
cache with a free slot is written into the caller's array in place, with the same outputs;
nothing is written without donation; bad positions are refused."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import explorer as ex  # noqa: E402
from explorer.compiler.errors import TorchCompileError  # noqa: E402
from explorer.compiler.passes.donate import write_slice_impl  # noqa: E402


class Append(torch.nn.Module):
    """Attention of one query over a cache of P + 1 slots whose last slot is free:
    ``(q, cache, new) -> (scores, new slot)``, the cache appended to as transformers does."""

    def forward(self, q, cache, new):
        full = torch.cat([cache[:, :, :-1], new], dim=2)
        return q @ full.transpose(-1, -2), full[:, :, -1:]


def _inputs(p=5):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 1, 4, generator=gen)
    cache = torch.cat([torch.randn(1, 2, p, 4, generator=gen), torch.zeros(1, 2, 1, 4)], dim=2)
    return q, cache, torch.randn(1, 2, 1, 4, generator=gen)


def test_a_donated_cache_gets_the_new_slot_written_in_place():
    q, cache, new = _inputs()
    want = Append()(q, cache, new)
    prog = ex.compile(Append(), (q, cache, new), disk_cache="off", donate=(1,))
    assert [s.rule for s in prog.steps if s.pass_name == "donate"] == ["append_in_place"]
    assert "cat" not in [n.op for n in prog.optimized.nodes]
    buf = cache.numpy().copy()
    before = buf[:, :, :-1].copy()
    scores, slot = prog(q.numpy(), buf, new.numpy())
    np.testing.assert_allclose(scores, want[0].numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(slot, new.numpy())
    np.testing.assert_array_equal(buf[:, :, -1:], new.numpy())  # written into the caller's
    np.testing.assert_array_equal(buf[:, :, :-1], before)  # the cached slots untouched
    assert np.shares_memory(slot, buf)  # the output is a view: nothing copied


def test_without_donation_the_callers_array_is_not_written():
    q, cache, new = _inputs()
    prog = ex.compile(Append(), (q, cache, new), disk_cache="off")
    assert "cat" in [n.op for n in prog.optimized.nodes]
    buf = cache.numpy().copy()
    scores, slot = prog(q.numpy(), buf, new.numpy())
    np.testing.assert_array_equal(buf, cache.numpy())
    np.testing.assert_allclose(scores, Append()(q, cache, new)[0].numpy(), rtol=1e-6, atol=1e-6)


def test_a_read_only_donated_array_is_copied_not_written():
    q, cache, new = _inputs()
    prog = ex.compile(Append(), (q, cache, new), disk_cache="off", donate=(1,))
    buf = cache.numpy().copy()
    buf.flags.writeable = False
    _, slot = prog(q.numpy(), buf, new.numpy())
    np.testing.assert_array_equal(slot, new.numpy())
    assert not buf[:, :, -1:].any()


def test_the_reference_impl_copies():
    x = np.zeros((2, 3), np.float32)
    out = write_slice_impl(x, np.ones((2, 1), np.float32), axis=1, start=2)
    assert out[:, 2].tolist() == [1.0, 1.0] and not x.any()


@pytest.mark.parametrize("bad", [1, (5,), (-1,), ("1",), 1.5])
def test_bad_donate_positions_are_refused_with_the_fix(bad):
    q, cache, new = _inputs()
    with pytest.raises(TorchCompileError, match="donate="):
        ex.compile(Append(), (q, cache, new), disk_cache="off", donate=bad)


def test_the_decoder_appends_without_copying_its_cache():
    transformers = pytest.importorskip("transformers")
    from explorer.compiler.torch_decode import Decoder

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64,
                                  bos_token_id=0, eos_token_id=0)  # fmt: skip
    model = transformers.GPT2LMHeadModel(cfg).eval()
    dec = Decoder(model, buckets=(8, 16))
    ids = dec.generate(torch.tensor([[1, 2, 3]]), new_tokens=9)
    want = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=9, do_sample=False)
    assert ids.tolist() == want.tolist()
    for prog in dec.steps.values():
        assert "cat" not in [n.op for n in prog.optimized.nodes]
        assert sum(n.op == "write_slice" for n in prog.optimized.nodes) == 2 * cfg.n_layer
