"""The command line."""

import json

from explorer.cli import main


def test_summary_json(capsys):
    assert main(["summary", "gpt2", "--seq", "64", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["params"] == 124_439_808 and info["published_params"] == 124_439_808


def test_ir_and_lists(capsys):
    assert main(["ir", "llama2-7b", "--seq", "8", "--lines", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("graph llama2-7b {") and "more nodes" in out
    assert main(["hardware"]) == 0
    assert "a100-80g" in capsys.readouterr().out


def test_unknown_model_is_one_clear_error(capsys):
    assert main(["summary", "llama2-7"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: argument model: unknown model 'llama2-7'") and "llama2-7b" in err


def _no_report_command(monkeypatch):
    """The report's module cannot load: an error about it means the output check came late."""
    import sys

    monkeypatch.setitem(sys.modules, "widgets.report", None)


def test_report_output_is_checked_before_any_work(tmp_path, monkeypatch, capsys):
    _no_report_command(monkeypatch)
    base = ["report", "gpt2", "--devices", "4"]
    for out, why in ((tmp_path, "is a directory"),
                     (tmp_path / "missing" / "r.html", "does not exist")):  # fmt: skip
        assert main([*base, "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: argument -o/--output: "), err
        assert str(out) in err and why in err and "notebook extra" not in err
    monkeypatch.setattr("explorer.cli.os.access", lambda path, mode: False)  # as for non-root
    assert main([*base, "-o", str(tmp_path / "r.html")]) == 2
    assert "is not writable" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


def test_unexpected_error_is_one_line_and_debug_shows_the_traceback(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("explorer.cli.models.build", broken)
    assert main(["summary", "gpt2"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "RuntimeError: boom" in err and "--debug" in err
    assert main(["summary", "gpt2", "--debug"]) == 1
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_a_model_file_path_works_for_summary(tmp_path, capsys):
    path = tmp_path / "mine.json"
    path.write_text((ex_root() / "datasets/models/gpt2.json").read_text())
    assert main(["summary", str(path), "--seq", "16"]) == 0
    assert "parameters 124,439,808" in capsys.readouterr().out


def ex_root():
    from pathlib import Path

    return Path(__file__).resolve().parents[1]


def test_python_dash_m_exit_codes_in_a_real_process():
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "explorer", "ir", "gpt2", "--lines", "-5"],
                         capture_output=True, text=True, cwd=ex_root())  # fmt: skip
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.splitlines() == [
        "error: argument --lines: -5 is not > 0; give a positive integer "
        "(see `python -m explorer ir --help`)"
    ]


def test_plan_takes_a_stack_and_refuses_an_unknown_one(capsys):
    import explorer as ex

    base = ["plan", "gpt2", "--devices", "8", "--global-batch", "16", "--seq", "512", "--json"]
    assert main([*base, "--stack", "megatron-lm-2021"]) == 0
    old = json.loads(capsys.readouterr().out)
    assert main(base) == 0
    default = json.loads(capsys.readouterr().out)
    want = ex.plan_training("gpt2", devices=8, global_batch=16, seq=512, stack="megatron-lm-2021")
    assert old["sim"]["step_time_s"] == want.sim.step_time_s
    assert (
        default["sim"]["step_time_s"]
        == ex.plan_training("gpt2", devices=8, global_batch=16, seq=512).sim.step_time_s
    )
    assert main([*base, "--stack", "nope"]) == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err
