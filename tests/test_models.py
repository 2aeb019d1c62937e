"""The model zoo: parameter counts against published ones, FLOPs against the closed form."""

import json
import math
import re

import pytest

import explorer as ex
from explorer.models import ModelConfig, ModelConfigError

ZOO = ex.models.names()
REQUIRED = [
    "gpt2", "gpt2-medium", "gpt2-xl", "gpt3-125m", "gpt3-1.3b", "gpt3-6.7b", "gpt3-13b",
    "gpt3-175b", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b",
    "llama3-405b", "mixtral-8x7b", "bert-base", "bert-large", "pangu-alpha-2.6b",
    "pangu-alpha-13b", "pangu-alpha-200b", "bloom-176b", "megatron-1.7b", "megatron-3.6b",
    "megatron-7.5b", "megatron-18.4b", "megatron-39.1b", "megatron-76.1b", "megatron-145.6b",
    "megatron-310.1b", "megatron-529.6b", "megatron-1008b",
]  # fmt: skip


def test_zoo_has_every_required_model():
    assert set(REQUIRED) <= set(ZOO)


def rounding_tolerance(text: str, value: float) -> float:
    """Half a unit of the last printed digit, relative ("1.7B" -> 0.05e9 / 1.7e9)."""
    m = re.fullmatch(r"([\d.]+)([MB])", text)
    assert m, text
    digits = m.group(1)
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    unit = {"M": 1e6, "B": 1e9}[m.group(2)]
    return 0.5 * 10**-decimals * unit / value


@pytest.mark.parametrize("name", [n for n in REQUIRED])
def test_param_count_matches_published(name):
    cfg = ex.models.load(name)
    assert cfg.published_params and cfg.source, f"{name} must carry its published count"
    got = ex.models.build(cfg, batch=1, seq=min(cfg.max_seq_len, 128)).num_params()
    tol = max(0.005, rounding_tolerance(cfg.published_params_text, cfg.published_params))
    if cfg.param_tolerance:
        assert cfg.note, "a widened tolerance must be explained"
        tol = max(tol, cfg.param_tolerance)
    assert abs(got - cfg.published_params) / cfg.published_params <= tol, (got, tol)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("gpt3-175b", 174.6e9), ("llama2-7b", 6.74e9), ("llama2-70b", 68.98e9),
        ("llama3-8b", 8.03e9), ("llama3-70b", 70.55e9), ("llama3-405b", 405.8e9),
        ("mixtral-8x7b", 46.7e9), ("bert-large", 335e6), ("gpt2", 124.4e6),
        ("bloom-176b", 176.2e9),
    ],
)  # fmt: skip
def test_issue_listed_counts_within_half_percent(name, expected):
    g = ex.models.build(ex.models.load(name), batch=1, seq=64)
    assert abs(g.num_params() - expected) / expected < 0.005


@pytest.mark.parametrize("name", ["megatron-1.7b", "megatron-76.1b", "megatron-1008b"])
def test_megatron_closed_form_params(name):
    cfg = ex.models.load(name)
    l, h, V, s = cfg.num_layers, cfg.hidden_size, cfg.vocab_size, 2048
    closed = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
    got = ex.models.build(cfg, batch=1, seq=64).num_params()
    assert abs(got - closed) / closed < 1e-5  # the final norm's 2h is the only extra


GPT_STYLE = [n for n in REQUIRED if n.startswith(("gpt", "megatron", "pangu"))]


@pytest.mark.parametrize("name", GPT_STYLE)
def test_forward_flops_match_closed_form(name):
    cfg = ex.models.load(name)
    b, s = 2, cfg.max_seq_len
    l, h, V = cfg.num_layers, cfg.hidden_size, cfg.vocab_size
    closed = 24 * b * s * l * h * h * (1 + s / (6 * h)) + 2 * b * s * h * V
    got = ex.models.build(cfg, batch=b, seq=s).flops()
    assert abs(got - closed) / closed < 0.01


def test_layer_scopes_and_structure():
    g = ex.models.build(ex.models.load("llama3-8b"), batch=1, seq=16)
    assert g.scopes(depth=2)[:3] == ("embed", "layers.0", "layers.1")
    assert len([s for s in g.scopes(depth=2) if s.startswith("layers.")]) == 32
    ops = {n.op for n in g.in_scope("layers.0")}
    assert {"rmsnorm", "silu", "mul", "einsum", "softmax"} <= ops
    moe = ex.models.build(ex.models.load("mixtral-8x7b"), batch=1, seq=16)
    assert {"topk_gate", "moe_dispatch", "moe_combine"} <= {n.op for n in moe}


def test_mlp_builder():
    g = ex.models.build(ex.models.load("mlp-small"), batch=4)
    assert g.inputs[0].type.shape == (4, 1024)
    assert g.num_params() == 2 * (1024 * 4096 * 2 + 4096 + 1024)


def test_from_hf_config_llama_and_gpt2(tmp_path):
    llama = {
        "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
        "vocab_size": 128256, "max_position_embeddings": 8192, "hidden_act": "silu",
        "tie_word_embeddings": False,
    }  # fmt: skip
    p = tmp_path / "config.json"
    p.write_text(json.dumps(llama))
    cfg = ex.models.from_hf_config(p, name="llama3-8b-hf")
    g = ex.models.build(cfg, batch=1, seq=32)
    assert g.num_params() == 8_030_261_248
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
            "vocab_size": 50257, "n_positions": 1024}  # fmt: skip
    p.write_text(json.dumps(gpt2))
    assert ex.models.build(ex.models.from_hf_config(p), 1, 16).num_params() == 124_439_808


def test_hf_config_missing_field(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    with pytest.raises(ModelConfigError, match="'num_hidden_layers' is missing"):
        ex.models.from_hf_config(p)


def test_unknown_model_lists_close_matches():
    with pytest.raises(ModelConfigError, match="Did you mean.*gpt3-175b"):
        ex.models.load("gpt3-175")


def test_malformed_json(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"name": "x", "arch": "decoder",')
    with pytest.raises(ModelConfigError, match=r"bad.json: malformed JSON at line 1"):
        ex.models.load_file(p)


def test_incomplete_json_names_the_field(tmp_path):
    p = tmp_path / "inc.json"
    p.write_text(json.dumps({"name": "x", "arch": "decoder", "num_layers": 2}))
    with pytest.raises(ModelConfigError, match="inc.json: field 'hidden_size' is missing"):
        ex.models.load_file(p)
    p.write_text(json.dumps({"name": "x", "arch": "decoder", "num_layers": "2",
                             "hidden_size": 8}))  # fmt: skip
    with pytest.raises(ModelConfigError, match="'num_layers' is '2'; expected an integer"):
        ex.models.load_file(p)
    p.write_text(json.dumps({"name": "x", "arch": "decoder", "num_layer": 2}))
    with pytest.raises(ModelConfigError, match="unknown field 'num_layer'.*'num_layers'"):
        ex.models.load_file(p)


def test_heads_must_divide_hidden():
    with pytest.raises(ModelConfigError, match="num_heads=7 does not divide hidden_size=64"):
        ModelConfig(name="t", arch="decoder", hidden_size=64, num_layers=1, num_heads=7,
                    vocab_size=10)  # fmt: skip
    with pytest.raises(ModelConfigError, match="num_kv_heads=3 does not divide num_heads=4"):
        ModelConfig(name="t", arch="decoder", hidden_size=64, num_layers=1, num_heads=4,
                    num_kv_heads=3, vocab_size=10)  # fmt: skip
    with pytest.raises(ModelConfigError, match="'norm' is 'batchnorm'"):
        ModelConfig(name="t", arch="decoder", hidden_size=64, num_layers=1, num_heads=4,
                    vocab_size=10, norm="batchnorm")  # fmt: skip


def test_seq_longer_than_position_table():
    with pytest.raises(ModelConfigError, match="seq=2048 exceeds max_seq_len=1024"):
        ex.models.build(ex.models.load("gpt2"), batch=1, seq=2048)


def test_numeric_forward_of_a_tiny_model_runs():
    """Every op impl composes: run a tiny GPT and a tiny MoE forward with numpy."""
    import numpy as np

    from explorer.ir import get

    for cfg in [
        ModelConfig(name="t", arch="decoder", hidden_size=16, num_layers=2, num_heads=4,
                    vocab_size=32, max_seq_len=8, dtype="fp32"),
        ModelConfig(name="m", arch="decoder", hidden_size=16, num_layers=1, num_heads=4,
                    num_kv_heads=2, vocab_size=32, max_seq_len=8, norm="rmsnorm",
                    activation="swiglu", position="rope", num_experts=4, experts_top_k=2,
                    dtype="fp32"),
    ]:  # fmt: skip
        g = ex.models.build(cfg, batch=2, seq=8)
        rng = np.random.default_rng(0)
        vals = {}
        for n in g:
            if n.is_source:
                if n.type.dtype.is_float:
                    vals[n.name] = rng.normal(size=n.type.shape) * 0.2
                else:
                    hi = 8 if n.name == "positions" else cfg.vocab_size
                    vals[n.name] = rng.integers(0, hi, size=n.type.shape)
                if n.name == "positions":
                    vals[n.name] = np.arange(8)
            else:
                vals[n.name] = get(n.op).impl(*(vals[a] for a in n.inputs), **n.attr_dict)
                assert vals[n.name].shape == n.type.shape, n.name
        loss = float(vals[g.outputs[0]])
        assert math.isfinite(loss) and 0 < loss < 10


def test_hf_config_fields_are_accounted_for(tmp_path):
    """Metadata accepted, unread architecture fields refused naming
    from_hf, unknown fields refused unless strict=False, which lists them on the result."""
    llama = {
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
        "architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16", "bos_token_id": 1,
        "eos_token_id": 2, "transformers_version": "4.40.0", "rope_theta": 500000.0,
        "rope_scaling": None, "rms_norm_eps": 1e-5,
    }  # fmt: skip
    assert ex.models.from_hf_config(llama).note == ""
    with pytest.raises(ModelConfigError, match=r"'num_local_experts' is 8; it changes the "
                       r"architecture.*from_hf"):  # fmt: skip
        ex.models.from_hf_config({**llama, "num_local_experts": 8})
    with pytest.raises(ModelConfigError, match=r"'num_key_value_heads' is 2.*gpt2 reader"):
        ex.models.from_hf_config({"model_type": "gpt2", "n_embd": 64, "n_layer": 2,
                                  "n_head": 4, "vocab_size": 100, "n_positions": 32,
                                  "num_key_value_heads": 2})  # fmt: skip
    with pytest.raises(ModelConfigError, match=r"unknown field 'my_new_knob'.*strict=False"):
        ex.models.from_hf_config({**llama, "my_new_knob": 3})
    cfg = ex.models.from_hf_config({**llama, "my_new_knob": 3}, strict=False)
    assert cfg.note == "from_hf_config ignored unknown fields: my_new_knob"
    mistral = {**llama, "model_type": "mistral", "sliding_window": 4096}
    assert ex.models.from_hf_config(mistral).num_layers == 2
