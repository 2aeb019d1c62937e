"""The fuzzed interfaces: for each, a hypothesis strategy of (mostly bad) inputs and a call.

`outcome(interface, value, folder)` runs one input and returns ``"valid"`` (a result that
passes the object's own validation again) or ``"named"`` (an ``ExplorerError`` subclass with
a message); anything else, a builtin exception, an empty message or a run longer than
``HARD_LIMIT_S``, raises ``AssertionError`` naming the input. The tests in this folder and
``bench/fuzz.py`` both use it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

import explorer as ex
from explorer.cli import main as cli_main

from .corpus import A100, GPT2, LLAMA_HF, MIXTRAL

#: A run longer than this is a hang (hypothesis' deadline only reports after a case ends).
HARD_LIMIT_S = 20

__all__ = ["HARD_LIMIT_S", "INTERFACES", "Interface", "outcome"]

# ----- values -------------------------------------------------------------------------------
INTS = st.one_of(
    st.integers(-3, 70),
    st.sampled_from([0, -1, 2**31, 2**63, 10**12, 10**30]),
)
FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.5, 0.5, 1.0, 1e300, float("nan"), float("inf")]),
)
TEXT = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["", "big", "false", "true", "null", "64", "bf16", "int3", "gelu", "relu",
                     "silu", "swiglu", "decoder", "rmsnorm", "rope", "ä", "\u0000"]),
)  # fmt: skip
SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, TEXT)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6,
)  # fmt: skip


def _mutated(
    base: dict, keys: list[str], extra_keys: list[str], drop: bool = True
) -> st.SearchStrategy[dict]:
    """``base`` with a few fields set to arbitrary JSON values, removed, or added."""
    values = st.one_of(JSON_VALUES, st.just(_DROP)) if drop else JSON_VALUES
    edit = st.tuples(st.sampled_from(keys + extra_keys), values)
    return st.lists(edit, max_size=3).map(lambda edits: _apply(base, edits))


_DROP = object()


def _apply(base: dict, edits: list[tuple[str, Any]]) -> dict:
    out = dict(base)
    for key, value in edits:
        if value is _DROP:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def _dump(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


JUNK_FILES = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"", b"{", b"[" * 5000 + b"]" * 5000, b'{"a": 1, "a": 2}', b"\xff\xfe{}",
                     b"\xef\xbb\xbf{}", b"NaN", b'"text"', b"12"]),
    JSON_VALUES.map(_dump),
)  # fmt: skip

# ----- interfaces ---------------------------------------------------------------------------
MODEL_KEYS = sorted(f.name for f in dataclasses.fields(ex.models.ModelConfig)) + ["published"]
HF_KEYS = sorted(set(LLAMA_HF) | {"n_embd", "n_layer", "n_head", "n_positions", "n_inner",
                                  "num_key_value_heads", "head_dim", "num_local_experts",
                                  "num_experts_per_tok", "max_position_embeddings",
                                  "attention_bias", "mlp_bias", "activation_function",
                                  "_name_or_path", "type_vocab_size"})  # fmt: skip
HF_TYPES = ["llama", "mistral", "mixtral", "gpt2", "bert", "gpt_neox", "t5", "mamba", "qwen2"]
GPT2_HF = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100,
           "n_positions": 64}  # fmt: skip
BERT_HF = {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
           "max_position_embeddings": 64}  # fmt: skip
MIXTRAL_HF = {**LLAMA_HF, "model_type": "mixtral", "num_local_experts": 4}


def _built(cfg: ex.models.ModelConfig) -> ex.models.ModelConfig:
    """A loaded config must validate again and build (at two layers, a short sequence)."""
    assert dataclasses.replace(cfg) == cfg
    small = cfg.replace(num_layers=min(cfg.num_layers, 2))
    seq = None if cfg.arch == "mlp" else min(cfg.max_seq_len, 16)
    graph = ex.models.build(small, batch=2, seq=seq)
    assert graph.num_params() > 0
    return cfg


def _model_file(content: bytes, folder: Path):
    path = folder / "model.json"
    path.write_bytes(content)
    return _built(ex.models.load_file(path))


def _hf_file(content: bytes, folder: Path):
    path = folder / "config.json"
    path.write_bytes(content)
    return _built(ex.models.from_hf_config(folder if content[:1] == b"{" else path))


def _hardware_file(content: bytes, folder: Path):
    path = folder / "hw.json"
    path.write_bytes(content)
    cluster = ex.hardware.load_file(path)
    assert dataclasses.replace(cluster) == cluster
    assert math.isfinite(cluster.bandwidth("intra")) and cluster.chip.memory_bytes > 0
    return cluster


def _model_config(fields: dict, folder: Path):
    return _built(ex.models.ModelConfig(**fields))


def _mesh(spec: tuple, folder: Path):
    axes, hardware, links = spec
    mesh = ex.Mesh(axes, hardware=hardware, links=links)
    assert ex.Mesh(mesh.axes, hardware=mesh.hardware, links=dict(mesh.links)) == mesh
    assert mesh.devices.size == mesh.size and len(mesh.groups(mesh.axis_names[0])) >= 1
    return mesh


def _cli(argv: list[str], folder: Path):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main([a.replace("{tmp}", str(folder)) for a in argv])
    lines = err.getvalue().splitlines()
    assert code in (0, 2), f"exit code {code}: {err.getvalue()}"
    if code == 2:
        assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) > 12, lines
        raise _CliRefused(lines[0])
    assert out.getvalue(), "a successful command prints its result"
    return code


class _CliRefused(Exception):
    """Exit code 2 with one error line: the CLI's form of a named error."""


MODEL_FILES = st.one_of(
    _mutated(GPT2, MODEL_KEYS, ["hiden_size", "_comment"]).map(_dump),
    _mutated(MIXTRAL, MODEL_KEYS, ["experts"]).map(_dump),
    JUNK_FILES,
)
HF_FILES = st.one_of(
    st.sampled_from([LLAMA_HF, MIXTRAL_HF, GPT2_HF, BERT_HF]).flatmap(
        lambda base: _mutated(base, HF_KEYS, ["model_type"])
    ).map(_dump),
    st.builds(lambda t, d: _dump({**d, "model_type": t}), st.sampled_from(HF_TYPES),
              st.sampled_from([LLAMA_HF, GPT2_HF, BERT_HF])),
    JUNK_FILES,
)  # fmt: skip


def _hw_edits() -> st.SearchStrategy[dict]:
    chip_keys = ["name", "peak_tflops", "memory_gib", "memory_gb", "memory_bandwidth_gb_per_s"]
    cluster_keys = sorted(A100["cluster"])
    part = st.sampled_from(["top", "chip", "cluster"])
    edit = st.tuples(part, st.sampled_from(chip_keys + cluster_keys + ["name", "source", "x"]),
                     st.one_of(JSON_VALUES, st.just(_DROP)))  # fmt: skip

    def apply(edits):
        top = {**A100, "chip": dict(A100["chip"]), "cluster": dict(A100["cluster"])}
        for where, key, value in edits:
            target = top if where == "top" else top[where]
            if not isinstance(target, dict):
                continue
            if value is _DROP:
                target.pop(key, None)
            else:
                target[key] = value
        return top

    return st.lists(edit, max_size=3).map(apply)


HW_FILES = st.one_of(_hw_edits().map(_dump), JUNK_FILES)
# Keyword arguments of ModelConfig: every value may be wrong (a missing or unknown keyword
# is Python's own TypeError of any call, so the keywords themselves stay right).
PLAUSIBLE = st.one_of(st.integers(1, 64).map(lambda n: 16 * n), st.integers(1, 4),
                      st.booleans(), st.sampled_from(["gelu", "relu", "swiglu", "rmsnorm",
                                                      "rope", "none", "fp16", "encoder", "mlp"]),
                      st.floats(0, 0.9))  # fmt: skip
MODEL_CONFIGS = st.lists(
    st.tuples(st.sampled_from(MODEL_KEYS[:-1]), st.one_of(PLAUSIBLE, PLAUSIBLE, JSON_VALUES)),
    max_size=3,
).map(lambda edits: _apply({k: v for k, v in GPT2.items() if k != "published"}, edits))
AXIS_NAMES = st.one_of(st.sampled_from(["dp", "tp", "pp", "ep"]), TEXT, INTS)
MESH_SIZES = st.one_of(st.integers(1, 9), INTS, FLOATS, st.booleans(), TEXT)
GOOD_AXES = st.dictionaries(st.sampled_from(["dp", "tp", "pp"]), st.integers(1, 8),
                            min_size=1, max_size=3)  # fmt: skip
MESHES = st.tuples(
    st.one_of(
        GOOD_AXES,
        GOOD_AXES,
        st.dictionaries(AXIS_NAMES, MESH_SIZES, max_size=3),
        st.lists(st.tuples(AXIS_NAMES, MESH_SIZES), max_size=3),
        SCALARS,
    ),
    st.sampled_from([None, "a100-80g", "tpu-v4", "nope", 3]),
    st.one_of(st.none(), st.dictionaries(AXIS_NAMES, st.sampled_from(["intra", "inter", "x"]),
                                         max_size=2)),
)  # fmt: skip
CLI_VALUES = st.one_of(INTS.map(str), TEXT, st.sampled_from(["1", "2", "8", "16", "-0", "1e3"]))
CLI_MODELS = st.sampled_from(["gpt2", "mlp-small", "gpt2-xl", "llama2-7", "", "{tmp}/none.json",
                              "{tmp}", "/abs/stem", "x.json"])  # fmt: skip


@st.composite
def cli_argvs(draw) -> list[str]:
    cmd = draw(st.sampled_from(["summary", "ir", "plan", "report", "models", "hardware", "nope"]))
    argv = [cmd]
    if cmd in ("models", "hardware"):
        return argv + draw(st.lists(st.sampled_from(["--json", "--debugx"]), max_size=1))
    if cmd == "nope":
        return argv
    argv.append(draw(CLI_MODELS))
    options = {
        "summary": ["--batch", "--seq", "--json"],
        "ir": ["--batch", "--seq", "--lines"],
        "plan": ["--devices", "--global-batch", "--seq", "--top", "--hardware", "--json"],
        "report": ["--devices", "--global-batch", "--layers", "--hardware", "-o"],
    }[cmd]
    for opt in draw(st.lists(st.sampled_from(options), max_size=4, unique=True)):
        if opt == "--json":
            argv.append(opt)
        elif opt == "--hardware":
            argv += [opt, draw(st.sampled_from(["a100-80g", "h100-sxm", "nope", ""]))]
        elif opt == "-o":  # never a writable file: a report run is the widgets' concern
            argv += [opt, draw(st.sampled_from(["{tmp}", "{tmp}/missing/r.html", "/proc/r.html"]))]
        else:
            argv += [opt, draw(CLI_VALUES)]
    if cmd == "plan":  # keep successful plans small: gpt2-sized models on a few devices
        argv += ["--devices", draw(st.sampled_from(["1", "2", "8", "0"])), "--global-batch", "8"]
    if cmd == "report" and "-o" not in argv:
        argv += ["-o", "{tmp}"]
    return argv


@dataclass(frozen=True)
class Interface:
    name: str
    inputs: st.SearchStrategy
    call: Callable[[Any, Path], Any]


INTERFACES: dict[str, Interface] = {
    i.name: i
    for i in (
        Interface("model_loader", MODEL_FILES, _model_file),
        Interface("hf_config", HF_FILES, _hf_file),
        Interface("hardware_loader", HW_FILES, _hardware_file),
        Interface("model_config", MODEL_CONFIGS, _model_config),
        Interface("mesh", MESHES, _mesh),
        Interface("cli", cli_argvs(), _cli),
    )
}


def outcome(interface: Interface, value: Any, folder: Path) -> str:
    """``"valid"`` or ``"named"``; a builtin exception or a hang raises ``AssertionError``."""

    def hang(signum, frame):
        raise TimeoutError(f"ran over {HARD_LIMIT_S} s")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(HARD_LIMIT_S)
    try:
        interface.call(value, folder)
        return "valid"
    except _CliRefused:
        return "named"
    except ex.ExplorerError as e:
        assert str(e).strip(), f"{interface.name}: {type(e).__name__} without a message"
        return "named"
    except Exception as e:
        raise AssertionError(
            f"{interface.name}: {type(e).__name__}: {e} escaped for input {value!r}"
        ) from e
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def fuzz_outcomes(interface: Interface, examples: int, folder: Path, fuzz: Any) -> list[str]:
    """Drive ``interface`` with ``examples`` generated inputs under the hypothesis settings
    ``fuzz``; return each input's outcome (see :func:`outcome`)."""
    from hypothesis import given, settings

    seen: list[str] = []

    @settings(fuzz, max_examples=examples)
    @given(interface.inputs)
    def run(value):
        seen.append(outcome(interface, value, folder))

    run()
    return seen
