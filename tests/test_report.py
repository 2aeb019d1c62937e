"""``python -m explorer report``: one standalone HTML page, drawn by the widgets' builders,
with every config-controlled text escaped."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import explorer as ex
from explorer.cli import main

pytest.importorskip("plotly")  # the notebook extra; `make test` installs it

from widgets.figures import memory_figure, pipeline_figure  # noqa: E402
from widgets.report import build_report, escape_figure, scaling_counts  # noqa: E402

ROOT = Path(__file__).parents[1]
EVIL = 'gpt2<script>alert("pwned")</script>'
JOB = {"devices": 4, "global_batch": 8, "seq": 256}


@pytest.fixture(scope="module")
def report():
    return build_report("gpt2", **JOB)


@pytest.fixture(scope="module")
def evil_report():
    cfg = ex.models.load("gpt2").replace(name=EVIL, published_params=None)
    return build_report(cfg, **JOB)


def test_report_is_one_standalone_page(report):
    page = report.html
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count("plotly.js v") == 1, "plotly.js must be inlined exactly once"
    assert not re.search(r"<script[^>]+src=", page), "no external script: it opens offline"
    assert page.count("Plotly.newPlot") == 5
    for key in ("graph", "mesh", "memory", "pipeline", "scaling"):
        assert f"<section id='{key}'>" in page and f'id="fig-{key}"' in page
    assert str(report.plan.config) in page  # the plan summary
    assert "tok/s/dev" in page  # the scaling table


def test_report_uses_the_widget_builders(report):
    figs = dict(report.figures)
    assert [k for k, _ in report.figures] == ["graph", "mesh", "memory", "pipeline", "scaling"]
    sim = report.plan.sim
    assert figs["memory"].to_json() == memory_figure(sim).to_json()
    assert figs["pipeline"].to_json() == pipeline_figure(sim).to_json()
    assert figs["graph"].data[1].name == "nodes" and len(figs["graph"].data[1].x) > 0
    assert len(figs["scaling"].data[0].x) == len(scaling_counts(JOB["devices"]))


def test_config_names_are_escaped_in_html_and_figures(evil_report):
    page = evil_report.html
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in page  # title, h1, summary
    # Only our own script tags: plotly's config and plotly.js once, then one per figure.
    assert len(re.findall(r"<script\b", page)) == 2 + 5
    graph_title = dict(evil_report.figures)["graph"].layout.title.text
    assert "&lt;script&gt;" in graph_title and "<script>" not in graph_title
    for _, fig in evil_report.figures:
        assert "<script>" not in json.dumps(fig.to_plotly_json(), default=str)


def test_escape_figure_keeps_the_builders_markup():
    import plotly.graph_objects as go

    fig = go.Figure(go.Scatter(x=[0], y=[0], name="a<b>", hovertext=["<b>a<b></b><br>x"]),
                    layout={"title": "<b>a<b></b>"})  # fmt: skip
    out = escape_figure(fig, ["a<b>"])
    assert out.data[0].name == "a&lt;b&gt;"
    assert out.data[0].hovertext == ("<b>a&lt;b&gt;</b><br>x",)
    assert out.layout.title.text == "<b>a&lt;b&gt;</b>"


def test_cli_report_from_a_zoo_name(tmp_path, capsys):
    out = tmp_path / "report.html"
    args = ["report", "gpt2", "--devices", "4", "--global-batch", "8", "--seq", "256"]
    assert main([*args, "-o", str(out)]) == 0
    assert out.stat().st_size > 1e6 and "Plotly.newPlot" in out.read_text()
    assert "wrote" in capsys.readouterr().out


def test_cli_report_from_a_json_file_escapes_its_name(tmp_path):
    raw = json.loads((ROOT / "datasets" / "models" / "gpt2.json").read_text())
    raw.pop("published", None)
    raw["name"] = EVIL
    cfg_path = tmp_path / "evil.json"
    cfg_path.write_text(json.dumps(raw))
    out = tmp_path / "evil.html"
    assert main(["report", str(cfg_path), "--devices", "4", "--global-batch", "8",
                 "--seq", "256", "-o", str(out)]) == 0  # fmt: skip
    page = out.read_text()
    assert "<script>alert" not in page and "&lt;script&gt;alert" in page


def test_cli_report_says_what_is_missing_without_the_notebook_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "widgets.report", None)  # import now raises ImportError
    assert main(["report", "gpt2", "--devices", "4", "-o", "unused.html"]) == 2
    err = capsys.readouterr().err
    assert "notebook extra" in err and "pip install" in err
    assert not Path("unused.html").exists()


def test_cli_report_unknown_model_is_a_clear_error(capsys):
    assert main(["report", "gpt-nope", "--devices", "4", "-o", "unused.html"]) == 2
    assert "unknown model 'gpt-nope'" in capsys.readouterr().err


def test_the_core_and_its_cli_do_not_import_plotly():
    code = ("import sys, explorer, explorer.cli; "
            "bad = [m for m in ('plotly', 'ipywidgets', 'widgets') if m in sys.modules]; "
            "assert not bad, bad")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_the_page_names_its_stack_and_plans_with_it(report):
    assert f"stack {ex.stacks.DEFAULT_STACK} (the default)" in report.html
    other = build_report("gpt2", stack="megatron-lm-2021", counts=(4,), **JOB)
    assert "stack megatron-lm-2021;" in other.html
    want = ex.plan_training("gpt2", stack="megatron-lm-2021", **JOB)
    assert other.plan.sim.step_time_s == want.sim.step_time_s


def test_the_plan_section_compares_the_chosen_plan_with_the_runner_up(report):
    """The diff's text form in the report: the chosen plan against the next best, its step
    time split into terms (issue 29)."""
    import explorer as ex

    alt = report.plan.alternatives[0].config
    d = ex.diff(report.plan, alt)
    assert f"Against the runner-up ({alt})" in report.html
    first = html.escape(d.text().splitlines()[1])
    assert first in report.html and "terms, largest first" in report.html
