"""``python -m explorer diff``: two configurations side by side, in text and JSON; a
configuration it cannot read exits with code 2 and names the word."""

import json

from explorer.cli import main

JOB = ["--devices", "8", "--global-batch", "64", "--seq", "512"]


def test_diff_text_and_json(capsys):
    assert main(["diff", "gpt2", "dp8", "dp4 tp2", *JOB]) == 0
    out = capsys.readouterr().out
    assert "tp: 1 -> 2" in out and "b - a" in out
    assert main(["diff", "gpt2", "dp8", "dp4 tp2", *JOB, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["b"].startswith("dp4 x tp2")
    assert abs(sum(d["terms"].values()) - d["total"]) < 1e-9


def test_diff_against_the_plan_and_a_bad_word(capsys):
    assert main(["diff", "gpt2", "plan", "tp2", *JOB]) == 0
    assert "x tp2" in capsys.readouterr().out
    assert main(["diff", "gpt2", "dp8", "dp4 foo", *JOB]) == 2
    assert "'foo'" in capsys.readouterr().err


def test_why_not_answers_with_the_verdict(capsys):
    assert main(["why-not", "gpt2", "dp4 tp2", *JOB]) == 0
    out = capsys.readouterr().out
    assert out.startswith("why not dp4 tp2? slower:") and "b - a" in out
    assert main(["why-not", "gpt2", "tp5", *JOB, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "invalid"


def test_plan_robustness_flag(capsys):
    assert main(["plan", "gpt2", *JOB]) == 0
    assert "robustness: not scanned" in capsys.readouterr().out
    assert main(["plan", "gpt2", *JOB, "--robustness"]) == 0
    out = capsys.readouterr().out
    assert "robustness: robust" in out or "robustness: fragile" in out
