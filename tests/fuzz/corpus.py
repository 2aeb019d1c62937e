"""Bad inputs that reach models, hardware and the CLI, kept as regressions.

Each `Case` runs one call on files it writes under a temporary folder and expects a named
error (an ``ExplorerError`` subclass) whose message contains every string in ``says``: the
file and the offending value. Each `CliCase` is an argument list for ``explorer.cli.main``
that must exit with code 2 and one line on stderr containing ``says``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import explorer as ex
from explorer.hardware import HardwareError, MeshError
from explorer.ir import IRError
from explorer.models import ModelConfigError

ROOT = Path(__file__).resolve().parents[2]
GPT2 = json.loads((ROOT / "datasets/models/gpt2.json").read_text())
MIXTRAL = json.loads((ROOT / "datasets/models/mixtral-8x7b.json").read_text())
A100 = json.loads((ROOT / "datasets/hardware/a100-80g.json").read_text())
LLAMA_HF = {
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
    "hidden_act": "silu", "tie_word_embeddings": False,
}  # fmt: skip
DEEP = "[" * 100_000 + "]" * 100_000


@dataclass(frozen=True)
class Case:
    """One bad input: ``run(folder)`` must raise ``error`` with ``says`` in its message."""

    name: str
    run: Callable[[Path], Any]
    error: type[ex.ExplorerError]
    says: tuple[str, ...]


@dataclass(frozen=True)
class CliCase:
    name: str
    argv: tuple[str, ...]
    says: tuple[str, ...]


def write(folder: Path, name: str, content: Any) -> Path:
    """``content`` (bytes, text, or a value dumped as JSON) into ``folder/name``."""
    path = folder / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_text(json.dumps(content))
    return path


def model_file(content: Any, name: str = "model.json") -> Callable[[Path], Any]:
    return lambda d: ex.models.load_file(write(d, name, content))


def hf_file(content: Any, name: str = "config.json") -> Callable[[Path], Any]:
    return lambda d: ex.models.from_hf_config(write(d, name, content))


def hw_file(content: Any, name: str = "hw.json") -> Callable[[Path], Any]:
    return lambda d: ex.hardware.load_file(write(d, name, content))


def _hw(**chip) -> dict:
    return {**A100, "chip": {**A100["chip"], **chip}}


CASES: tuple[Case, ...] = (
    # Model JSON: path, folder, encoding, depth, top-level type, field types.
    Case("model directory", lambda d: ex.models.load_file(d), ModelConfigError,
         ("is a directory",)),
    Case("model missing file", lambda d: ex.models.load_file(d / "nope.json"), ModelConfigError,
         ("nope.json", "no such file")),
    Case("model non-utf8", model_file(b'{"name": "caf\xe9"}', "latin.json"), ModelConfigError,
         ("latin.json", "0xe9", "UTF-8")),
    Case("model nested 100k deep", model_file(DEEP, "deep.json"), ModelConfigError,
         ("deep.json", "100000 levels", "MAX_JSON_DEPTH")),
    Case("model is a list", model_file([], "list.json"), ModelConfigError,
         ("list.json", "a list")),
    Case("model is null", model_file(None, "null.json"), ModelConfigError,
         ("null.json", "null")),
    Case("capacity_factor 'big'", model_file({**MIXTRAL, "capacity_factor": "big"}, "cf.json"),
         ModelConfigError, ("cf.json", "capacity_factor", "'big'")),
    Case("capacity_factor NaN", model_file({**MIXTRAL, "capacity_factor": float("nan")},
                                           "nan.json"),
         ModelConfigError, ("nan.json", "capacity_factor", "nan")),
    Case("dtype int3 at load", model_file({**GPT2, "dtype": "int3"}, "int3.json"),
         ModelConfigError, ("int3.json", "dtype", "'int3'")),
    Case("unknown model field", model_file({**GPT2, "hiden_size": 8}, "typo.json"),
         ModelConfigError, ("typo.json", "'hiden_size'")),
    Case("duplicate key", model_file('{"name": "a", "name": "b"}', "dup.json"),
         ModelConfigError, ("dup.json", "'name'", "twice")),
    Case("load /abs/stem", lambda d: ex.models.load(str(ROOT / "datasets/models/gpt2")),
         ModelConfigError, ("datasets/models/gpt2", "not a .json file")),
    # Hugging Face config.json.
    Case("hf directory without config", lambda d: ex.models.from_hf_config(d), ModelConfigError,
         ("without a config.json",)),
    Case("hf non-utf8", hf_file(b'{"model_type": "ll\xe9ma"}'), ModelConfigError,
         ("config.json", "0xe9")),
    Case("hf nested 100k deep", hf_file(DEEP), ModelConfigError, ("config.json", "100000")),
    Case("hf is a list", hf_file([1, 2]), ModelConfigError, ("config.json", "a list")),
    Case("hf is null", hf_file(None), ModelConfigError, ("config.json", "null")),
    Case("hf gpt_neox", hf_file({**LLAMA_HF, "model_type": "gpt_neox"}), ModelConfigError,
         ("config.json", "'gpt_neox'", "llama, mistral, mixtral, gpt2, bert")),
    Case("hf mamba", hf_file({"model_type": "mamba", "d_model": 768}), ModelConfigError,
         ("'mamba'", "not supported")),
    Case("hf t5", hf_file({"model_type": "t5", "d_model": 512, "num_layers": 6}),
         ModelConfigError, ("'t5'", "not supported")),
    Case("hf hidden_act relu in a gated MLP", hf_file({**LLAMA_HF, "hidden_act": "relu"}),
         ModelConfigError, ("config.json", "hidden_act", "'relu'")),
    Case("hf tie_word_embeddings 'false'", hf_file({**LLAMA_HF, "tie_word_embeddings": "false"}),
         ModelConfigError, ("config.json", "tie_word_embeddings", "'false'")),
    Case("hf num_local_experts null",
         hf_file({**LLAMA_HF, "model_type": "mixtral", "num_local_experts": None}),
         ModelConfigError, ("config.json", "num_local_experts", "None")),
    Case("hf hidden_size a string", hf_file({**LLAMA_HF, "hidden_size": "64"}),
         ModelConfigError, ("config.json", "hidden_size", "'64'")),
    # Hardware JSON.
    Case("hardware directory", lambda d: ex.hardware.load_file(d), HardwareError,
         ("is a directory",)),
    Case("hardware non-utf8", hw_file(b'{"name": "\xff"}', "bin.json"), HardwareError,
         ("bin.json", "0xff")),
    Case("hardware nested 100k deep", hw_file(DEEP, "deep.json"), HardwareError,
         ("deep.json", "100000")),
    Case("hardware memory 'big'", hw_file(_hw(memory_gib="big"), "mem.json"), HardwareError,
         ("mem.json", "chip.memory_gib", "'big'")),
    Case("hardware figure overflowing", hw_file(_hw(memory_gib=1e300), "huge.json"),
         HardwareError, ("huge.json", "chip.memory_gib", "1e+300")),
    # Sizes that cannot be built.
    Case("num_layers=10**12",
         lambda d: ex.models.build(ex.models.load("gpt2").replace(num_layers=10**12)),
         ModelConfigError, ("num_layers=1,000,000,000,000", "MAX_LAYERS")),
    Case("num_layers=10**6",
         lambda d: ex.models.build(ex.models.load("gpt2").replace(num_layers=10**6)),
         ModelConfigError, ("num_layers=1,000,000", "MAX_LAYERS")),
    Case("Mesh with 10**12 devices", lambda d: ex.Mesh({"dp": 10**6, "tp": 10**6}), MeshError,
         ("1,000,000,000,000 devices", "MAX_DEVICES")),
    Case("MoE capacity_factor inf",
         lambda d: ex.models.load("mixtral-8x7b").replace(capacity_factor=float("inf")),
         ModelConfigError, ("capacity_factor", "inf")),
    Case("TensorType dtype int3", lambda d: ex.TensorType((2,), "int3"), IRError, ("'int3'",)),
)  # fmt: skip

CLI_CASES: tuple[CliCase, ...] = (
    CliCase("--global-batch 0", ("plan", "gpt2", "--devices", "8", "--global-batch", "0"),
            ("--global-batch", "0")),
    CliCase("--lines -5", ("ir", "gpt2", "--lines", "-5"), ("--lines", "-5")),
    CliCase("--top 0", ("plan", "gpt2", "--devices", "8", "--global-batch", "8", "--top", "0"),
            ("--top", "0")),
    CliCase("--layers 0", ("report", "gpt2", "--devices", "4", "--layers", "0"),
            ("--layers", "0")),
    CliCase("--batch x", ("summary", "gpt2", "--batch", "x"), ("--batch", "'x'")),
    CliCase("unknown model", ("summary", "llama2-7"), ("argument model", "'llama2-7'")),
    CliCase("unknown hardware",
            ("plan", "gpt2", "--devices", "8", "--global-batch", "8", "--hardware", "h100x"),
            ("--hardware", "'h100x'")),
    CliCase("summary dir/x.json missing", ("summary", "nowhere/x.json"),
            ("argument model", "nowhere/x.json")),
)  # fmt: skip


# ex.F / Tensor ops: bad axes, ids, p, dtypes and boolean masks.
def _x23():
    import numpy as np

    return ex.tensor(np.arange(6.0).reshape(2, 3))


def _ops_cases() -> tuple[Case, ...]:
    import numpy as np

    from explorer.compiler import F
    from explorer.compiler.errors import ShapeError

    x = _x23
    return (
        Case("softmax axis=5 on 2-D", lambda d: F.softmax(x(), axis=5), ShapeError,
             ("axis=5", "ndim=2", "[-2, 2)")),
        Case("sum axis=9 on 2-D", lambda d: F.sum(x(), axis=9), ShapeError,
             ("axis=9", "ndim=2", "[-2, 2)")),
        Case("embedding id -1", lambda d: F.embedding(ex.tensor(np.array([-1])), x()),
             ShapeError, ("id -1", "[0, 2)")),
        Case("dropout p=1.5", lambda d: F.dropout(x(), p=1.5), ShapeError, ("p=1.5", "[0, 1)")),
        Case("complex array", lambda d: ex.tensor(np.array([1j])), ShapeError, ("complex128",)),
        Case("string array", lambda d: ex.tensor(np.array(["a"])), ShapeError, ("<U1",)),
        Case("x[x > 2] eager", lambda d: x()[x() > 2], ShapeError,
             ("boolean-mask", "depend on the data", "where")),
        # found by bench/fuzz.py: numpy's take_along_axis ValueError escaped
        Case("cross_entropy scalar label", lambda d: F.cross_entropy(x(), 0), ShapeError,
             ("labels are int64[]", "need labels of shape (2,)")),
        Case("cross_entropy scalar label under jit",
             lambda d: ex.jit(lambda t: F.cross_entropy(t, 0), capture="trace")(x()),
             ShapeError, ("need labels of shape (2,)",)),
    )  # fmt: skip


CASES = CASES + _ops_cases()
