"""`Decoder`: a transformers causal LM decoded token by token on the static path, its
key/value cache carried between calls in numpy; every step equals the model's own logits,
greedy decoding equals ``model.generate``, one step program per cache bucket."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from explorer.compiler.errors import TorchCompileError  # noqa: E402
from explorer.compiler.torch_decode import MASKED, Decoder, step_mask  # noqa: E402
from explorer.compiler.torch_program import TOLERANCE  # noqa: E402
from tests.models.spmd_cases import real_model  # noqa: E402

RTOL, ATOL = TOLERANCE["fp32"]


def _ids(vocab: int, length: int, batch: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(3))


def test_step_mask_hides_the_empty_slots_only():
    m = step_mask(2, 3, 5)
    assert m.shape == (2, 1, 1, 6)
    assert (m[..., :3] == 0).all() and (m[..., 3:5] == MASKED).all() and (m[..., 5] == 0).all()


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_every_step_equals_the_models_logits_across_buckets(arch):
    m = real_model(arch)
    ids = _ids(m.config.vocab_size, 12, batch=2)
    with torch.no_grad():
        want = m(ids, use_cache=False).logits.numpy()
    dec = Decoder(m, buckets=(4, 8, 16), batch=2)
    got = [dec.prompt(ids[:, :3])]
    for k in range(3, 12):
        got.append(dec.step(ids[:, k : k + 1]))
    np.testing.assert_allclose(np.concatenate(got, axis=1), want, rtol=RTOL, atol=ATOL)
    assert sorted(dec.steps) == [4, 8, 16]  # cache lengths 3..11 over three buckets
    assert dec.length == 12


def test_greedy_generation_equals_transformers_generate():
    m = real_model("gpt2")
    prompt = _ids(m.config.vocab_size, 5)
    dec = Decoder(m, buckets=(8, 16))
    got = dec.generate(prompt, new_tokens=10)
    with torch.no_grad():
        want = m.generate(prompt, max_new_tokens=10, do_sample=False, min_new_tokens=10)
    assert got.tolist() == want.tolist()
    assert [c.bucket for c in dec.prefill.compiles] == [8]


def test_a_second_prompt_reuses_the_programs_and_restarts_the_cache():
    m = real_model("gpt2")
    dec = Decoder(m, buckets=(8, 16))
    dec.generate(_ids(m.config.vocab_size, 6), new_tokens=4)
    steps = dict(dec.steps)
    prompt = _ids(m.config.vocab_size, 7)
    got = dec.generate(prompt, new_tokens=3)
    with torch.no_grad():
        want = m.generate(prompt, max_new_tokens=3, do_sample=False, min_new_tokens=3)
    assert got.tolist() == want.tolist()
    assert dec.steps == steps and dec.length == 9


def test_misuse_is_refused_with_the_fix():
    m = real_model("gpt2")
    dec = Decoder(m, buckets=(4,))
    with pytest.raises(TorchCompileError, match="call prompt"):
        dec.step(torch.tensor([[1]]))
    with pytest.raises(TorchCompileError, match="a prompt of 5 tokens"):
        dec.prompt(_ids(m.config.vocab_size, 5))
    with pytest.raises(TorchCompileError, match=r"expected integers of shape \[1, tokens\]"):
        dec.prompt(torch.zeros(2, 3, dtype=torch.long))
    dec.prompt(_ids(m.config.vocab_size, 4))
    with pytest.raises(TorchCompileError, match="the cache is full"):
        dec.step(torch.tensor([[1]]))
    with pytest.raises(TorchCompileError, match="ascending distinct"):
        Decoder(m, buckets=(8, 4))
    with pytest.raises(TorchCompileError, match="transformers causal LM"):
        Decoder(torch.nn.Linear(2, 2))
