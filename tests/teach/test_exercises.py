"""Every exercise of every concept notebook: its true answer is accepted, a typical wrong
answer is recognised and explained; the truths of the simple kinds equal an independent
computation from the textbook formulas; bad answers are refused with a reason."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import explorer as ex
from explorer.teach import (
    EXERCISE_KINDS,
    Exercise,
    Mistake,
    TeachError,
    all_exercises,
    kinds,
    notebook_exercises,
    parse_number,
)

ALL = all_exercises()
BY_KEY = {q.key: q for q in ALL}
MIB, GIB = 2**20, 2**30


def test_at_least_forty_exercises_over_every_concept_notebook():
    assert len(ALL) >= 40
    assert len(BY_KEY) == len(ALL), "exercise keys repeat"
    for nb in ("02", "03", "04", "06", "08"):
        qs = notebook_exercises(nb)
        assert len(qs) >= 5, nb
        assert all(q.notebook == nb and q.key.startswith(nb) for q in qs)
    used = {q.kind for q in ALL}
    assert used == set(EXERCISE_KINDS), set(EXERCISE_KINDS) - used


@pytest.mark.parametrize("q", ALL, ids=lambda q: q.key)
def test_right_answer_accepted_and_a_typical_wrong_one_explained(q: Exercise):
    assert q.question and q.hint and q.worked and q.given
    right = q.check(q.answer_text)
    assert right.right, (q.key, right)
    assert right.mistake is None and right.message.startswith("right")
    assert q.mistakes, f"{q.key} lists no typical wrong answer"
    for m in q.mistakes:
        v = q.check(m.value if q.is_choice else q.format_value(float(m.value)))
        assert not v.right, (q.key, m)
        assert v.mistake == m.name, (q.key, m, v)
        assert m.why in v.message
    if not q.is_choice:
        # an answer far from every typical mistake is wrong, with how far, and no guessed why
        truth = float(q.truth)
        far = truth + 6.3 * abs(truth) + 1.0
        v = q.check(far)
        assert not v.right and v.mistake is None and "too high" in v.message
        assert v.relative_error == pytest.approx((far - truth) / abs(truth))


def test_the_worked_answer_shows_the_truth():
    for q in ALL:
        if q.is_choice:
            assert q.truth in q.worked or q.kind == "redistribution", q.key
        else:
            numbers = [float(x) for x in re.findall(r"-?\d+\.?\d*(?:e[-+]?\d+)?",
                                                    q.worked.replace(",", ""))]  # fmt: skip
            assert any(x == pytest.approx(float(q.truth), rel=2e-3) for x in numbers), (
                q.key,
                q.worked,
            )


# --- truths against the textbook formulas -----------------------------------------------------
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_memory_is_16_bytes_per_parameter_sharded_by_stage(stage):
    p, dp = 6.7e9, 8
    q = kinds.zero_memory(p, dp, stage)
    w = 2 * p / (dp if stage >= 3 else 1)
    g = 2 * p / (dp if stage >= 2 else 1)
    o = 12 * p / (dp if stage >= 1 else 1)
    assert q.truth == pytest.approx((w + g + o) / GIB)
    assert q.check((w + g) / GIB).mistake == "forgot the optimizer states"


@pytest.mark.parametrize("n", [2, 4, 8, 64])
def test_collective_bytes_are_the_ring_formulas(n):
    s = 96 * MIB
    ar = kinds.collective_bytes("all-reduce", s, n)
    assert ar.truth == pytest.approx(2 * (n - 1) / n * s / MIB)
    for kind in ("all-gather", "reduce-scatter", "all-to-all"):
        assert kinds.collective_bytes(kind, s, n).truth == pytest.approx((n - 1) / n * s / MIB)
    if n > 2:  # n = 2: counting once gives S, the same number as "the whole buffer"
        assert ar.check((n - 1) / n * s / MIB).mistake == "counted the all-reduce once"


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 1), (4, 8, 2), (8, 48, 4), (16, 64, 4)])
def test_bubble_is_p_minus_1_over_v_of_the_step(p, m, v):
    schedule = "1f1b" if v == 1 else "interleaved_1f1b"
    q = kinds.bubble(schedule, p, m, v)
    b = (p - 1) / v
    assert q.truth == pytest.approx(100 * b / (m + b))
    if v > 1:
        assert q.check(100 * (p - 1) / (m + p - 1)).mistake == (
            "forgot that virtual stages shrink the bubble"
        )


def test_bubble_equals_the_simulated_timeline_of_uniform_stages():
    sched = ex.training.build_schedule("1f1b", pp=4, microbatches=8)
    timeline = ex.training.simulate_schedule(sched, forward_s=1.0, backward_s=2.0)
    q = kinds.bubble("1f1b", 4, 8)
    assert q.truth == pytest.approx(100 * timeline.bubble_fraction())


def test_activations_are_korthikanti_per_layer():
    s, b, h, a = 2048, 1, 12288, 96
    sbh = s * b * h
    none = kinds.activation_memory(s, b, h, a, layers=3, recompute="none")
    assert none.truth == pytest.approx(3 * sbh * (34 + 5 * a * s / h) / GIB)
    sel = kinds.activation_memory(s, b, h, a, layers=3, recompute="selective")
    assert sel.truth == pytest.approx(3 * sbh * 34 / GIB)
    full = kinds.activation_memory(s, b, h, a, layers=3, recompute="full")
    assert full.truth == pytest.approx(3 * sbh * 2 / GIB)
    assert none.check(sel.truth).mistake == "used the 'selective' policy"
    tp = kinds.activation_memory(s, b, h, a, tp=8, recompute="none")
    assert tp.truth == pytest.approx(sbh * (10 + 24 / 8 + 5 * a * s / h / 8) / GIB)


def test_tp_allreduce_is_two_ring_allreduces_of_the_activation():
    cfg = ex.models.load("gpt3-6.7b")
    q = kinds.tp_allreduce(cfg, 1, 2048, 4)
    act = 2048 * cfg.hidden_size * 2  # bf16
    assert q.truth == pytest.approx(2 * 2 * 3 / 4 * act / MIB)
    assert q.check(2 * 3 / 4 * act / MIB).mistake == "counted half the traffic"
    assert q.check(2 * act / MIB).mistake == "sent the whole activation per all-reduce"


def test_collective_time_is_alpha_beta():
    hw = ex.hardware.load("a100-80g")
    s, n = 64 * MIB, 4
    q = kinds.collective_time("all-reduce", s, n)
    bw, alpha = hw.intra_node_bandwidth_bytes_per_s, hw.intra_node_latency_s
    assert q.truth == pytest.approx(1e6 * (2 * (n - 1) * alpha + 2 * (n - 1) / n * s / bw))


def test_model_params_equal_the_built_graph():
    cfg = ex.models.load("gpt3-6.7b")
    q = BY_KEY["02-params"]
    assert q.truth == pytest.approx(ex.models.build(cfg, batch=1, seq=8).num_params() / 1e9)


def test_fastest_layout_is_the_fastest_simulated_one_that_fits():
    q = BY_KEY["06-fastest-1.3b"]
    configs = [ex.ParallelConfig(dp=8), ex.ParallelConfig(dp=4, tp=2),
               ex.ParallelConfig(dp=2, tp=2, pp=2, microbatch_size=1)]  # fmt: skip
    times = [ex.simulate("gpt3-1.3b", c, hardware="a100-80g", global_batch=64, seq=2048)
             .step_time_s for c in configs]  # fmt: skip
    assert q.truth == "ABC"[int(np.argmin(times))]
    assert [label for label, _ in q.given] == ["A", "B", "C"]


def test_mfu_is_flops_over_time_devices_and_peak():
    q = BY_KEY["08-mfu-1.3b"]
    given = dict(q.given)
    flops = float(given["model FLOPs per step (forward + backward)"])
    peak = float(given["peak per device"].split()[0]) * 1e12
    t = float(given["step time"].split()[0])
    assert q.truth == pytest.approx(100 * flops / (t * int(given["devices"]) * peak), rel=1e-3)


def test_redistribution_answers_of_the_lesson():
    """Notebook 02's layout changes: what the lesson teaches each one needs."""
    expected = {"02-move-partial-whole": "all-reduce", "02-move-partial-seq": "reduce-scatter",
                "02-move-seq-whole": "all-gather", "02-move-whole-hidden": "none (a local slice)",
                "02-move-seq-hidden": "all-to-all"}  # fmt: skip
    assert {k: BY_KEY[k].truth for k in expected} == expected
    v = BY_KEY["02-move-partial-seq"].check("All-Reduce")
    assert not v.right and "half the bytes" in v.message


def test_layout_exercises_use_the_lessons_dim_letters():
    """One notation: notebook 02's layouts name batch/sequence/hidden B/S/H and 03's tiny MLP
    tokens/hidden T/H, as the lessons draw them; the worked answer uses the same letters."""
    q = BY_KEY["02-move-seq-hidden"]
    assert "fp32[B, S_tp, H]" in q.question and "fp32[B, S, H_tp]" in q.question
    assert "S = sequence" in q.question and "[A" not in q.question
    assert q.worked.startswith("fp32[B, S_tp, H] -> all-to-all(tp)")
    b = BY_KEY["03-bytes-allgather"]
    assert b.question.startswith("bf16[T_dp, H_tp] -> all-gather -> bf16[T_dp, H]")
    assert "T_dp" in b.worked


def test_layout_exercise_refuses_dims_that_do_not_fit_the_tensor():
    mesh = ex.Mesh({"tp": 2}, hardware="a100-80g")
    t = ex.ir.TensorType((4, 8), "fp32")
    src, dst = ex.sharding.Layout((("tp",), ())), ex.sharding.Layout(((), ()))
    with pytest.raises(TeachError, match="one \\(letter, name\\) pair per dim"):
        kinds.redistribution(src, dst, t, mesh, dims=(("t", "tokens"),))
    with pytest.raises(TeachError, match="dims="):
        kinds.redistribution(src, dst, t, mesh, dims=(("tok", "tokens"), ("h", "hidden")))


# --- answers that cannot be read ------------------------------------------------------------
def test_parse_number_reads_typed_answers():
    assert parse_number("1,024 MiB", "MiB") == 1024.0
    assert parse_number("8.6%", "%") == 8.6
    assert parse_number(" 1e3 ", "us") == 1000.0
    assert parse_number(np.float32(2.5)) == 2.5
    assert parse_number(np.int64(3)) == 3.0


@pytest.mark.parametrize("bad", ["abc", "", "12 GiB", True, None, [1], "1.2.3", "nan"])
def test_bad_answers_are_refused_with_a_reason(bad):
    q = kinds.collective_bytes("all-reduce", 64 * MIB, 8)
    with pytest.raises(TeachError, match="answer") as info:
        q.check(bad)
    assert isinstance(info.value, ex.ExplorerError)
    assert "type" in str(info.value)


def test_a_choice_not_offered_is_refused():
    q = BY_KEY["02-move-partial-whole"]
    with pytest.raises(TeachError, match="not one of the choices"):
        q.check("broadcast")
    with pytest.raises(TeachError):
        q.check(3)
    assert q.check("  ALL-reduce ").right


def test_exercise_validates_its_own_values():
    with pytest.raises(TeachError, match="kind"):
        Exercise("k", "guess", "q?", (), "", 1.0, (), "h", "w")  # type: ignore[arg-type]
    with pytest.raises(TeachError, match="not one of its choices"):
        Exercise("k", "redistribution", "q?", (), "", "x", (), "h", "w", choices=("a", "b"))
    with pytest.raises(TeachError, match="finite"):
        Exercise("k", "mfu", "q?", (), "%", math.inf, (), "h", "w")
    # a "mistake" that would be counted right is dropped, and so is a repeated one
    q = Exercise("k", "mfu", "q?", (), "%", 10.0,
                 (Mistake("close", 10.1, "."), Mistake("a", 20.0, "."), Mistake("b", 20.05, ".")),
                 "h", "w")  # fmt: skip
    assert [m.name for m in q.mistakes] == ["a"]


def test_generators_refuse_bad_inputs():
    with pytest.raises(TeachError, match="ZeRO stage"):
        kinds.zero_memory(1e9, 8, 4)
    with pytest.raises(TeachError, match="dp"):
        kinds.zero_memory(1e9, True, 1)
    with pytest.raises(TeachError, match="recompute"):
        kinds.activation_memory(2048, 1, 1024, 16, recompute="some")
    with pytest.raises(TeachError, match="notebook"):
        notebook_exercises("01")


def test_prediction_error_is_the_uncalibrated_estimate_against_the_measurement():
    """Notebook 08's table: estimate with TrainingParams() over the measured step, minus 1."""
    for q, r in zip(notebook_exercises("08")[2:], ex.training.published_runs("mtnlg_2022"),
                    strict=True):  # fmt: skip
        t = ex.training.estimate(r.cfg, r.config, r.hardware, r.global_batch, r.seq,
                                 ex.training.TrainingParams()).step_time_s  # fmt: skip
        assert q.truth == pytest.approx(100 * (t / r.step_time_s - 1))
        assert q.check(-float(q.truth)).mistake == "flipped the sign"
