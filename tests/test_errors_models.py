"""Model and Hugging Face loaders: what is accepted, besides what is refused (tests/fuzz)."""

import json

import pytest

import explorer as ex
from explorer.models import ModelConfigError
from explorer.models.hf_config import SUPPORTED

GPT2_HF = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100,
           "n_positions": 64}  # fmt: skip


def test_hf_config_from_a_folder_and_from_a_dict_agree(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(GPT2_HF))
    from_dir = ex.models.from_hf_config(tmp_path, name="g")
    assert from_dir == ex.models.from_hf_config(tmp_path / "config.json", name="g")
    assert from_dir == ex.models.from_hf_config(dict(GPT2_HF), name="g")


@pytest.mark.parametrize("act, expected", [("relu", "relu"), ("gelu_new", "gelu")])
def test_hf_activation_is_read_not_guessed(act, expected):
    cfg = ex.models.from_hf_config({**GPT2_HF, "activation_function": act})
    assert cfg.activation == expected
    bert = {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 1,
            "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
            "max_position_embeddings": 64, "hidden_act": act}  # fmt: skip
    assert ex.models.from_hf_config(bert).activation == expected


def test_hf_unknown_type_names_every_supported_one():
    with pytest.raises(ModelConfigError) as info:
        ex.models.from_hf_config({"model_type": "qwen2"})
    assert all(t in str(info.value) for t in SUPPORTED)


def test_load_reads_paths_and_zoo_names_alike(tmp_path, monkeypatch):
    src = ex.models.datasets_dir() / "models" / "gpt2.json"
    (tmp_path / "x.json").write_text(src.read_text())
    monkeypatch.chdir(tmp_path)
    assert ex.models.load("x.json") == ex.models.load("gpt2")
    assert ex.models.load(str(tmp_path / "x.json")) == ex.models.load("gpt2")
    with pytest.raises(ModelConfigError, match="not a .json file"):
        ex.models.load(str(tmp_path / "x"))


def test_utf8_with_bom_is_read(tmp_path):
    src = ex.models.datasets_dir() / "models" / "gpt2.json"
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + src.read_bytes())
    assert ex.models.load_file(path) == ex.models.load("gpt2")


def test_size_limit_can_be_raised(monkeypatch):
    monkeypatch.setattr("explorer.models.config.MAX_LAYERS", 12)  # gpt2 has 12
    with pytest.raises(ModelConfigError, match="MAX_LAYERS=12"):
        ex.models.load("gpt2").replace(num_layers=13)
    monkeypatch.setattr("explorer.models.config.MAX_LAYERS", 13)
    cfg = ex.models.load("gpt2").replace(num_layers=13)
    assert ex.models.build(cfg, seq=8).num_params() > 0


def test_plan_training_with_a_million_layers_is_refused_up_front():
    # It used to ask numpy for 931 GiB in the pipeline partitioner.
    with pytest.raises(ModelConfigError, match="num_layers=1,000,000.*MAX_LAYERS"):
        ex.plan_training(ex.models.load("gpt2").replace(num_layers=10**6), devices=8,
                         global_batch=8, seq=128)  # fmt: skip
