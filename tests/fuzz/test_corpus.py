"""Bad inputs for models, hardware and the CLI: each gets a named error."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.cli import main

from .corpus import CASES, CLI_CASES


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_raises_a_named_error(case, tmp_path):
    with pytest.raises(ex.ExplorerError) as info:
        case.run(tmp_path)
    assert isinstance(info.value, case.error), type(info.value)
    message = str(info.value)
    for text in case.says:
        assert text in message, (text, message)


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.name for c in CLI_CASES])
def test_bad_cli_argument_is_one_line_naming_it(case, capsys):
    assert main(list(case.argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    for text in case.says:
        assert text in err, (text, err)
