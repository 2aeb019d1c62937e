"""ex.diff of training plans and plan.why_not: the terms sum to the step-time difference,
configurations typed as text are read (or refused by name), and a configuration that does
not fit is answered with its memory row."""

import pytest

import explorer as ex
from explorer.diff import DiffError
from explorer.training.planning.diff import parse_config


@pytest.fixture(scope="module")
def plan():
    return ex.plan_training("gpt3-13b", devices=64, hardware="a100-80g", global_batch=256,
                            seq=2048)  # fmt: skip


def test_terms_sum_to_the_step_time_difference(plan):
    for alt in plan.alternatives[:3]:
        d = ex.diff(plan, alt.config)
        assert d.total == pytest.approx(d.b.step_time_s - plan.sim.step_time_s, abs=1e-12)
        assert sum(v for _, v in d.terms) == pytest.approx(d.total, abs=1e-9)
        mags = [abs(v) for _, v in d.terms]
        assert mags == sorted(mags, reverse=True)
        assert d.b.step_time_s == pytest.approx(alt.step_time_s, rel=1e-9)  # same model


def test_rows_name_what_differs(plan):
    d = ex.diff(plan, "tp8")
    names = {(r.group, r.name) for r in d.rows}
    assert ("layout", "tp") in names
    assert d.b.config.tp == 8 and d.b.config.devices == plan.config.devices
    assert "tp" in d.text() and d.as_dict()["b"] == str(d.b.config)


def test_parse_config_reads_the_printed_form():
    c = ex.ParallelConfig(dp=32, tp=4, pp=8, sp=True, microbatch_size=2,
                          schedule="interleaved_1f1b", virtual_stages=4, zero=1)  # fmt: skip
    assert ex.ParallelConfig(**parse_config(str(c))) == c
    assert parse_config("dp16xtp8 pp1") == {"dp": 16, "tp": 8, "pp": 1}


@pytest.mark.parametrize("bad", ["dp16 foo", "", 3, {"dq": 2}])
def test_parse_errors_are_named(bad):
    with pytest.raises(ex.training.errors.ParallelConfigError):
        parse_config(bad)


def test_why_not_over_memory_names_the_memory_row(plan):
    w = plan.why_not({"dp": 64, "tp": 1, "pp": 1, "zero": 0, "recompute": "none"})
    assert w.verdict == "over memory"
    row, value = w.memory_row
    rows = dict(w.diff.b.memory.rows())
    assert value == max(rows.values()) and rows[row] == value
    assert row in w.reason and not w.diff.b.fits


def test_why_not_slower_is_the_diff(plan):
    w = plan.why_not(plan.alternatives[0].config)
    assert w.verdict == "slower"
    assert w.diff.total == pytest.approx(plan.alternatives[0].step_time_s
                                         - plan.sim.step_time_s, rel=1e-6)  # fmt: skip
    assert plan.why_not(plan.config).verdict == "chosen"


def test_why_not_names_the_rule_broken(plan):
    w = plan.why_not("tp5")  # 40 heads: tp 5 divides them, but not the 64 devices
    assert w.verdict == "invalid" and "devices" in w.reason
    w = plan.why_not("tp3 dp1")
    assert w.verdict == "invalid"
    w = plan.why_not("tp16")  # dp filled in (4), but 16 does not divide the 40 heads
    assert w.verdict == "invalid" and "heads" in w.reason and w.diff is None


def test_diff_refuses_mixed_and_mismatched_plans(plan):
    g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    sp = ex.search(g, ex.Mesh({"tp": 2}, hardware="a100-80g"), "dynamic_programming")
    with pytest.raises(DiffError):
        ex.diff(sp, plan)
    other = ex.plan_training("gpt3-13b", devices=32, hardware="a100-80g", global_batch=256,
                             seq=2048)  # fmt: skip
    with pytest.raises(ex.TrainingError, match="device"):
        ex.diff(plan, other)


def test_pipeline_device_rows_hold_the_layers_and_memory(plan):
    alt = next((a for a in plan.alternatives if a.config.pp != plan.config.pp), None)
    other = alt.config if alt is not None else "pp2"
    d = ex.diff(plan, other)
    rows = [r for r in d.rows if r.group.startswith("pipeline devices")]
    assert rows
    for r in rows:
        first = int(r.name.split()[-1].split("-")[0])
        for side, sim in (("a", d.a), ("b", d.b)):
            text = getattr(r, side)
            if text == "no stage":
                assert first >= sim.config.pp
                continue
            layers = int(text.split()[0])
            counts = sim.partition.layer_counts()
            assert layers == sum(counts[first :: sim.config.pp])


def test_why_not_names_the_constraint_a_config_breaks():
    """A configuration outside a constrained search is answered by the constraint it breaks
    (with what it would cost without it), not by a diff that looks like a lost race."""
    import explorer as ex

    plan = ex.plan_training("gpt2", devices=8, global_batch=64, seq=512,
                            constraints=[ex.Bound("tp", max=1)])  # fmt: skip
    w = plan.why_not("dp4 tp2")
    assert w.verdict == "forbidden" and "Bound('tp', max=1)" in w.reason
    assert w.diff is not None and ("slower" in w.reason) == (w.diff.total > 0)
    assert plan.why_not(str(plan.config)).verdict == "chosen"
    assert plan.as_dict()["constraints"] == ["Bound('tp', max=1)"]
    assert "constraints honoured: Bound('tp', max=1)" in plan.report(robust=False)
    free = ex.plan_training("gpt2", devices=8, global_batch=64, seq=512)
    assert free.why_not("dp4 tp2").verdict in ("slower", "faster")
    assert "constraints" not in free.as_dict()
