"""The published runs of today's stacks (issue 24, item 7): the stack files of
``datasets/published`` load as `MeasuredRun` values with their role, stack, precision and
knobs; a row the simulator cannot take is skipped with its reason; a malformed cell is
refused naming the file, the row and the column; the models the rows use are in the zoo."""

from __future__ import annotations

import csv
import math
import shutil

import pytest

import explorer as ex
from explorer.training import CalibrationError, MeasuredRun
from explorer.training.calibration.measured import (
    MEASURED_COLUMNS,
    STACK_COLUMNS,
    load_measured_rows,
    measured_datasets,
)
from explorer.training.calibration.published import (
    FLOP_CONVENTIONS,
    flops_per_step,
    measured_params,
    megatron2024_flops_per_step,
    published_runs,
)
from explorer.training.calibration.stack_rows import AC_MODES, precision_supported

A100 = {"where": lambda row: row["hardware"] == "a100-80g"}  # torchtitan's fully given rows


@pytest.fixture(scope="module")
def a100_runs():
    return published_runs("torchtitan_2024_perf", **A100)


def test_stack_files_are_listed_apart_from_the_paper_tables():
    stacks, papers = measured_datasets("stacks"), measured_datasets()
    assert len(stacks) == 12 and not set(stacks) & set(papers)
    assert set(measured_datasets("all")) == set(stacks) | set(papers)
    assert "megatron_2021_table2" in papers
    with pytest.raises(CalibrationError, match="which='new'"):
        measured_datasets("new")  # type: ignore[arg-type]
    rows = [r for name in stacks for r in load_measured_rows(name)]
    assert len(rows) == 220
    assert {r["role"] for r in rows} == {"fit", "check"}


def test_tokens_per_s_gives_the_step_time(a100_runs):
    raw = [r for r in load_measured_rows("torchtitan_2024_perf") if A100["where"](r)]
    assert len(a100_runs) == len(raw) == 8
    for run, row in zip(a100_runs, raw, strict=True):
        tps, gpus = float(row["tokens_per_s_per_gpu"]), int(row["gpus"])
        want = int(row["global_batch"]) * int(row["seq"]) / (tps * gpus)
        assert math.isclose(run.step_time_s, want, rel_tol=1e-12)
        assert run.tokens_per_s_per_gpu == tps and run.config.devices == gpus
        assert "step time from" in run.source and "tokens/s/GPU" in run.source


def test_roles_stack_precision_and_knobs_are_read(a100_runs):
    raw = [r for r in load_measured_rows("torchtitan_2024_perf") if A100["where"](r)]
    assert [r.role for r in a100_runs] == [r["role"] for r in raw]
    assert {r.stack for r in a100_runs} == {"torchtitan"}
    assert {r.dataset for r in a100_runs} == {"torchtitan_2024_perf"}
    assert {r.precision for r in a100_runs} == {"bf16"}
    run = a100_runs[0]
    assert run.knobs_dict["attention"].startswith("F.scaled_dot_product_attention")
    assert run.mfu_percent is not None and run.mfu_percent > 0


def test_activation_checkpointing_maps_to_recompute_policies(a100_runs):
    by_mode = {r.ac_mode: r for r in a100_runs}
    layer = by_mode["selective-layer"]
    assert layer.config.recompute == "per_layer"
    assert layer.config.recompute_num_layers == layer.cfg.num_layers // 2  # every second block
    assert by_mode["selective-op"].config.recompute == "selective"
    assert AC_MODES["full"][0] == "full" and AC_MODES["not stated"][0] is None


def test_measured_run_keeps_the_new_fields_through_json(a100_runs):
    run = a100_runs[0]
    back = MeasuredRun.from_dict(run.as_dict())
    assert back == run and back.knobs == run.knobs and back.role == run.role == "check"
    with pytest.raises(CalibrationError, match="role='maybe'"):
        MeasuredRun("gpt2", ex.ParallelConfig(dp=2), "a100-80g", 16, 512, 0.2, role="maybe")
    with pytest.raises(CalibrationError, match="precision='fp4'"):
        MeasuredRun("gpt2", ex.ParallelConfig(dp=2), "a100-80g", 16, 512, 0.2, precision="fp4")


def test_measured_params_follow_the_run(a100_runs):
    p = measured_params(a100_runs[0])
    assert isinstance(p, ex.training.TrainingParams)
    if precision_supported():
        assert p.precision == "bf16"


# ----- rows in a file of our own (EXPLORER_DATASETS points at a copy) --------------------------
GOOD = dict(
    dataset="mine", model="llama3-8b", hardware="a100-80g", gpus="8", dp="8", tp="1", pp="1",
    cp="1", sp="", zero="3", microbatch_size="1", schedule="1f1b", virtual_stages="",
    recompute="", global_batch="16", seq="2048", step_time_s="", tflops_per_gpu="",
    flops_convention="", source="a test", note="", role="check", stack="torchtitan",
    stack_version="", precision="bf16", fp8_recipe="", ep="", tokens_per_s_per_gpu="2000",
    mfu_percent="", memory_gib="40.5", ac_mode="full", sharding="FSDP2", knobs="compile=true",
)  # fmt: skip


@pytest.fixture
def own_file(tmp_path, monkeypatch):
    """Write rows to ``datasets/published/mine.csv`` of a datasets copy (models and
    hardware shared with the checkout)."""
    real = ex.models.datasets_dir()
    root = tmp_path / "datasets"
    (root / "published").mkdir(parents=True)
    for sub in ("models", "hardware"):
        (root / sub).symlink_to(real / sub)
    monkeypatch.setenv("EXPLORER_DATASETS", str(root))

    def write(*rows: dict) -> None:
        with (root / "published" / "mine.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, MEASURED_COLUMNS + STACK_COLUMNS)
            w.writeheader()
            w.writerows(rows)

    yield write
    shutil.rmtree(root / "published")


def test_a_row_of_our_own_loads_with_memory(own_file):
    own_file(GOOD)
    (run,) = published_runs("mine")
    assert math.isclose(run.step_time_s, 16 * 2048 / (2000 * 8))
    assert run.memory_bytes == 40.5 * 2**30 and run.role == "check"
    assert run.config.recompute == "full" and run.knobs == (("compile", "true"),)


def test_unknown_hardware_and_model_are_skipped_with_their_reason(own_file):
    own_file(GOOD, {**GOOD, "hardware": "tpu-v9x"}, {**GOOD, "model": "nope-7b"})
    skipped: list[str] = []
    runs = published_runs("mine", skipped=skipped)
    assert len(runs) == 1 and len(skipped) == 2
    assert "row 3" in skipped[0] and "no hardware profile 'tpu-v9x'" in skipped[0]
    assert "row 4" in skipped[1] and "no model config 'nope-7b'" in skipped[1]
    with pytest.raises(CalibrationError, match="no hardware profile 'tpu-v9x'"):
        published_runs("mine", skip_unsupported=False)


def test_fp8_rows_are_skipped_until_precision_exists(own_file):
    own_file({**GOOD, "precision": "fp8"})
    skipped: list[str] = []
    runs = published_runs("mine", skipped=skipped)
    if precision_supported():
        assert runs[0].precision == "fp8" and not skipped
        assert measured_params(runs[0]).precision == "fp8"
    else:
        assert not runs and "precision fp8" in skipped[0]


@pytest.mark.parametrize(
    "column, value, words",
    [("tp", "eight", "'tp': 'eight' is not an int"),
     ("role", "train", "'role': 'train' is not one of"),
     ("tokens_per_s_per_gpu", "-3", "'tokens_per_s_per_gpu': '-3' is not a finite number"),
     ("gpus", "16", "'gpus': 16 GPUs but dp x tp x pp x cp = 8 x 1 x 1 x 1"),
     ("ac_mode", "sometimes", "'ac_mode': 'sometimes' is not a known"),
     ("knobs", "compile", "'knobs': 'compile' is not key=value")],
)  # fmt: skip
def test_a_malformed_row_names_file_row_and_column(own_file, column, value, words):
    own_file(GOOD, {**GOOD, column: value})
    with pytest.raises(CalibrationError) as e:
        published_runs("mine")  # skip_unsupported does not hide a malformed cell
    assert "datasets/published/mine.csv, row 3, column" in str(e.value)
    assert words in str(e.value)


def test_a_row_without_a_measurement_is_refused(own_file):
    own_file({**GOOD, "tokens_per_s_per_gpu": ""})
    with pytest.raises(CalibrationError, match="row 2, column 'step_time_s': no measurement"):
        published_runs("mine")


# ----- FLOP conventions and the zoo ---------------------------------------------------------
def test_every_convention_the_stack_rows_name_is_known_with_a_source():
    named = {r["flops_convention"] for n in measured_datasets("stacks")
             for r in load_measured_rows(n)} - {""}  # fmt: skip
    assert named == {"megatron2024", "nemo2407", "nemo2403", "megatron_bridge", "nemo_automodel"}
    for name in named:
        assert FLOP_CONVENTIONS[name].source and FLOP_CONVENTIONS[name].formula


def test_megatron2024_by_hand():
    cfg = ex.models.load("llama3-8b")  # GQA 8 of 32 heads, SwiGLU 14336, vocab 128256
    h, l, s, V = 4096, 32, 8192, 128256
    by_hand = 12 * s * l * h * h * ((1 + 8 / 32 + s / h) + 14336 / h * 1.5 + V / (2 * l * h))
    assert math.isclose(megatron2024_flops_per_step(cfg, 1, s), by_hand)
    assert flops_per_step("nemo2407", cfg, 2, s) == 2 * megatron2024_flops_per_step(cfg, 1, s)
    with pytest.raises(ex.training.TrainingError, match="no closed form"):
        flops_per_step("megatron_bridge", cfg, 1, s)


def test_every_model_the_stack_rows_use_is_in_the_zoo():
    used = {r["model"] for n in measured_datasets("stacks") for r in load_measured_rows(n)}
    for name in sorted(used):
        assert ex.models.load(name).name == name
    extra = set(ex.models.names(runs=True)) - set(ex.models.names())
    assert "qwen3-235b-a22b" in extra and "llama3-8b" not in extra


@pytest.mark.parametrize("name", sorted(set(ex.models.names(runs=True)) - set(ex.models.names())))
def test_run_models_count_their_published_parameters(name):
    cfg = ex.models.load(name)
    assert cfg.published_params and cfg.source and cfg.note
    text = cfg.published_params_text
    decimals = len(text[:-1].split(".")[1]) if "." in text else 0
    tol = max(0.005, 0.5 * 10**-decimals * 1e9 / cfg.published_params, cfg.param_tolerance or 0)
    assert abs(cfg.num_params() / cfg.published_params - 1) <= tol, (cfg.num_params(), tol)
