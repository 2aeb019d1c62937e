"""Every traced transformers architecture of tests/models (tiny configs, seeded real
weights) compiled with ``ex.compile``: its static run has a kernel in the compiler's
table for every op, and both runs equal torch's forward at the fp32 tolerance (rtol 1e-5,
atol 1e-5; 5.4e-6 at most over the 31 architectures, measured). Slow tier: 31 traces."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import explorer as ex  # noqa: E402
from explorer.compiler.errors import TorchCompileError  # noqa: E402
from explorer.compiler.kernels import BUILDERS  # noqa: E402
from explorer.compiler.torch_program import TOLERANCE  # noqa: E402
from tests.models.hf_cases import MODEL_TYPES  # noqa: E402
from tests.models.spmd_cases import example_inputs, real_model  # noqa: E402


@pytest.mark.parametrize("mt", MODEL_TYPES)
def test_architecture_static_and_eager_equal_torch(mt):
    m = real_model(mt)
    args, kwargs = example_inputs(mt, m.config)
    kwargs = {k: v for k, v in kwargs.items() if k != "use_cache"}  # compile turns it off
    prog = ex.compile(m, args, kwargs)
    missing = sorted({n.op for n in prog.optimized.ops if n.op not in BUILDERS} - {"constant"})
    assert not missing, f"{mt}: ops without a kernel: {missing}"
    v = prog.verify(*args, **kwargs)
    assert v.ok, (mt, v)


def test_cache_kept_on_is_a_project_error_naming_the_fix():
    m = real_model("gpt2")
    (ids,), _ = example_inputs("gpt2", m.config)
    with pytest.raises(TorchCompileError, match="use_cache=False") as e:
        ex.compile(m, (ids,), {"use_cache": True})
    assert "GPT2LMHeadModel" in str(e.value)


def test_bf16_model_within_its_tolerance():
    m = real_model("llama").to(torch.bfloat16)
    (ids,), _ = example_inputs("llama", m.config)
    prog = ex.compile(m, (ids,))
    assert prog.tolerance == TOLERANCE["bf16"]
    assert prog(ids).logits.dtype == torch.bfloat16
    assert prog.verify(ids).ok
