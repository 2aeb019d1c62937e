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
