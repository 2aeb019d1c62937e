"""plan_training, scaling_curve and the plan subcommand."""

import json

import pytest

import explorer as ex
from explorer.cli import main
from explorer.training import SearchSpace, TrainingPlanError


@pytest.fixture(scope="module")
def gpt2_plan():
    return ex.plan_training("gpt2", devices=8, hardware="a100-80g", global_batch=64, seq=512)


def test_plan_is_fastest_that_fits_with_reasons(gpt2_plan):
    p = gpt2_plan
    assert p.sim.fits and p.config.devices == 8 and p.searched + p.pruned > 50
    assert p.alternatives and all(a.fits for a in p.alternatives)
    assert all(a.step_time_s >= p.sim.step_time_s * (1 - 1e-9) for a in p.alternatives)
    assert all(a.reason.startswith(("slower by", "as fast")) for a in p.alternatives)
    d = json.loads(p.to_json())
    assert d["config"]["dp"] * d["config"]["tp"] * d["config"]["pp"] == 8
    assert d["sim"]["memory"]["runtime_context"] > 0


@pytest.mark.usefixtures("stack_2021")  # unfused attention: some layouts do not fit
def test_over_memory_alternatives_say_by_how_much():
    p = ex.plan_training("gpt3-13b", devices=8, hardware="a100-80g", global_batch=64, seq=2048,
                         space=SearchSpace(microbatch_sizes=(1, 2)))  # fmt: skip
    assert p.over_memory and all("over memory by" in a.reason for a in p.over_memory)
    assert all(a.step_time_s < p.sim.step_time_s for a in p.over_memory)


def test_model_that_fits_nowhere_gets_minimum_and_device_count():
    with pytest.raises(TrainingPlanError) as e:
        ex.plan_training("gpt3-175b", devices=8, hardware="a100-80g", global_batch=16, seq=2048)
    msg = str(e.value)
    assert "minimum memory per device" in msg and "GiB" in msg
    assert "smallest device count that would fit is 64" in msg


@pytest.mark.parametrize("kw, words", [
    # more than a100-80g's 8,192 chips extends the profile; 9,000 fails on the batch alone
    (dict(devices=9000), ["factorisation of 9000 devices", "global batch 64"]),
    (dict(devices=17, global_batch=64), ["17 devices", "pp=17 > 12 layers", "dp=17"]),
    (dict(devices=0), ["devices=0"]),
])  # fmt: skip
def test_bad_devices_and_batch(kw, words):
    args = dict(hardware="a100-80g", global_batch=64, seq=512) | kw
    with pytest.raises(TrainingPlanError) as e:
        ex.plan_training("gpt2", **args)
    for w in words:
        assert w in str(e.value)


@pytest.mark.usefixtures("stack_2021")  # the scaling set on the 2021 physics
def test_scaling_curve_weak_and_strong():
    weak = ex.scaling_curve("gpt2", "a100-80g", [8, 16, 32], global_batch=64, seq=512)
    assert [p.global_batch for p in weak.points] == [64, 128, 256]
    assert weak.points[0].linearity == 1.0 and all(p.fits for p in weak.points)
    assert all(0 < p.linearity <= 1.0 + 1e-9 for p in weak.points)
    strong = ex.scaling_curve("gpt2", "a100-80g", [8, 16], global_batch=64, seq=512,
                              mode="strong")  # fmt: skip
    assert [p.global_batch for p in strong.points] == [64, 64]
    assert "linear" in strong.table()
    gpt3 = ex.scaling_curve("gpt3-175b", "a100-80g", [8], global_batch=16, seq=2048)
    assert not gpt3.points[0].fits and "smallest device count" in gpt3.points[0].note


def test_cli_plan_text_json_and_error(capsys):
    args = ["plan", "gpt2", "--devices", "8", "--hardware", "a100-80g", "--global-batch", "64",
            "--seq", "512"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "chosen: dp" in out and "alternatives" in out and "runtime_context" in out
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["devices"] == 8
    assert main(["plan", "gpt2", "--devices", "17", "--global-batch", "64", "--seq", "512"]) == 2
    assert "error: no dp x tp x pp" in capsys.readouterr().err
