"""``ex.compile(..., buckets=...)``: one program per bucket of sequence lengths, calls of any
length padded to their bucket and cut back, equal to torch at the length given; compiles
and recompiles recorded with their reason; modules that padding would change refused."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import explorer as ex  # noqa: E402
from explorer.compiler.errors import TorchCompileError  # noqa: E402
from explorer.compiler.torch_buckets import BucketedProgram, bucket_of  # noqa: E402
from tests.models.spmd_cases import real_model  # noqa: E402


def _ids(vocab: int, length: int, batch: int = 1, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed + length)
    return torch.randint(0, vocab, (batch, length), generator=gen)


@pytest.fixture(scope="module")
def gpt2():
    m = real_model("gpt2")
    return m, ex.compile(m, (_ids(m.config.vocab_size, 5),), buckets=(8, 16))


def test_bucket_of_picks_the_smallest_that_holds_the_length():
    assert [bucket_of(n, (8, 16)) for n in (1, 8, 9, 16, 17)] == [8, 8, 16, 16, None]


@pytest.mark.parametrize("length", [3, 8, 11, 16])
def test_every_length_equals_torch_on_both_runs(gpt2, length):
    m, prog = gpt2
    ids = _ids(m.config.vocab_size, length)
    got = prog(ids)
    assert got.logits.shape == (1, length, m.config.vocab_size)
    v = prog.verify(ids)
    assert v.ok, v


def test_one_compile_per_bucket_and_the_reason_of_each(gpt2):
    m, prog = gpt2
    for n in (2, 7, 12, 15, 4):
        prog(_ids(m.config.vocab_size, n))
    assert sorted(prog.programs) == [8, 16]
    assert [c.bucket for c in prog.compiles] == [8, 16]
    assert prog.compiles[0].reason == "the example's length"
    assert "bucket 16 not compiled yet (compiled: 8)" in prog.compiles[1].reason
    assert prog.seq_inputs == ("input_ids",)


def test_a_bucket_below_the_examples_length_compiles_from_the_example_cut():
    m = real_model("gpt2")
    prog = ex.compile(m, (_ids(m.config.vocab_size, 12),), buckets=(8, 16))
    v = prog.verify(_ids(m.config.vocab_size, 5))
    assert v.ok, v
    assert [c.bucket for c in prog.compiles] == [16, 8]


def test_a_new_bucket_is_a_recompile_event_in_the_trace():
    m = real_model("gpt2")
    prog = ex.compile(m, (_ids(m.config.vocab_size, 4),), buckets=(4, 8))
    with ex.trace.record("calls") as t:
        prog(_ids(m.config.vocab_size, 3))  # bucket 4: compiled already
        prog(_ids(m.config.vocab_size, 6))  # bucket 8: compiled now
    kinds = [e for e in t.trace.events if e.kind in ("compile", "recompile")]
    assert [e.kind for e in kinds] == ["recompile"]
    assert "length 6: bucket 8 not compiled yet (compiled: 4)" in kinds[0].detail
    assert kinds[0].dur_us == pytest.approx(prog.compiles[-1].ms * 1e3)


def test_eager_trace_of_a_padded_call_runs_the_bucket_ops(gpt2):
    m, prog = gpt2
    prog.run_eager(_ids(m.config.vocab_size, 6))
    ops = [e for e in prog.last_trace.events if e.kind == "op"]
    assert len(ops) == len(prog.programs[8].graph.ops)


def test_numpy_in_numpy_out_cut_to_the_length(gpt2):
    m, prog = gpt2
    ids = _ids(m.config.vocab_size, 6)
    got = prog(ids.numpy())
    assert isinstance(got.logits, np.ndarray) and got.logits.shape[1] == 6
    with torch.no_grad():
        want = m(ids, use_cache=False).logits.numpy()
    np.testing.assert_allclose(got.logits, want, rtol=1e-5, atol=1e-5)


def test_llama_buckets_equal_torch():
    m = real_model("llama")
    prog = ex.compile(m, (_ids(m.config.vocab_size, 6),), buckets=(8, 16))
    for n in (6, 13):
        v = prog.verify(_ids(m.config.vocab_size, n))
        assert v.ok, (n, v)


class _MaskedEncoder(torch.nn.Module):
    """One bidirectional attention layer whose keys are masked by ``mask`` (1 = a token)."""

    def __init__(self, vocab: int = 32, dim: int = 16) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, vocab)

    def forward(self, ids, mask):
        q, k, v = self.qkv(self.embed(ids)).chunk(3, dim=-1)
        scores = q @ k.transpose(1, 2) / 4.0 + (1.0 - mask[:, None, :].float()) * -1e9
        return self.out(scores.softmax(-1) @ v)


def test_an_encoder_without_mask_is_refused():
    m = real_model("bert")
    with pytest.raises(TorchCompileError, match="padding the sequence from 6 to 9 changes"):
        ex.compile(m, (_ids(m.config.vocab_size, 6),), buckets=(8,))


def test_an_encoder_with_its_mask_as_input_equals_torch():
    torch.manual_seed(0)
    m = _MaskedEncoder().eval()
    ids = _ids(32, 6, batch=2)
    prog = ex.compile(m, (ids, torch.ones_like(ids)), buckets=(8, 16))
    assert prog.seq_inputs == ("ids", "mask")
    for n in (6, 11):
        ids_n = _ids(32, n, batch=2)
        mask = torch.ones_like(ids_n)
        mask[1, n - 2 :] = 0  # the second row's own padding, kept by the call
        v = prog.verify(ids_n, mask)
        assert v.ok, (n, v)
    assert sorted(prog.programs) == [8, 16]


def test_length_over_the_last_bucket_is_refused_with_the_fix(gpt2):
    m, prog = gpt2
    with pytest.raises(TorchCompileError, match="length 17 is over the largest bucket 16"):
        prog(_ids(m.config.vocab_size, 17))


def test_sequence_inputs_of_two_lengths_are_refused():
    torch.manual_seed(0)
    ids = _ids(32, 6)
    prog = ex.compile(_MaskedEncoder().eval(), (ids, torch.ones_like(ids)), buckets=(8,))
    with pytest.raises(TorchCompileError, match=r"lengths \[5, 6\]"):
        prog(ids, torch.ones(1, 5, dtype=ids.dtype))


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"buckets": (16, 8)}, "ascending distinct"),
        ({"buckets": ()}, "ascending distinct"),
        ({"buckets": (0, 8)}, "ascending distinct"),
        ({"buckets": (2, 4)}, "length 5 is over the largest bucket 4"),
        ({"buckets": (8,), "seq_dim": 2}, "no tensor input has a dim 2"),
        ({"buckets": (8,), "seq_dim": -1}, "seq_dim=-1"),
    ],
)
def test_bad_buckets_are_refused_before_tracing(kw, match, monkeypatch):
    m = real_model("gpt2")
    traced = []
    monkeypatch.setattr(BucketedProgram, "_compile", lambda *a: traced.append(a))
    with pytest.raises(TorchCompileError, match=match):
        ex.compile(m, (_ids(m.config.vocab_size, 5),), buckets=kw.pop("buckets"), **kw)
    assert traced == []


def test_default_sdpa_attention_is_traced_as_eager_and_restored():
    cfg = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32)
    torch.manual_seed(0)
    m = transformers.GPT2LMHeadModel(cfg).eval()
    assert m.config._attn_implementation == "sdpa"
    ids = _ids(64, 7)
    prog = ex.compile(m, (ids,))
    assert m.config._attn_implementation == "sdpa"
    assert any("attention traced as 'eager'" in n and "sdpa" in n for n in prog.notes)
    v = prog.verify(ids)  # torch runs its sdpa attention: the same function
    assert v.ok, v
