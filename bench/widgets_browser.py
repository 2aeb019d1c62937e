"""The browser's side of the real-size views: how long plotly.js in Chromium takes to draw
the figures the views hold (bench/widgets.py times the Python side only; helper-45 found
PipelineView's GPT-3 175B step took Chromium 19-26 s to draw before it drew only the boxes
around its window).

Each figure is the JSON a view holds (`figure.to_json()`), drawn into a 1100 px wide div of
a blank page in headless Chromium (Debian's, software rendering, the browser tier's flags)
with the plotly.js bundled with the Python package: ``Plotly.newPlot`` for a first draw,
``Plotly.react`` for an update, timed in the page around the awaited call (rendering done).
Workloads: PipelineView on GPT-3 175B over 1,024 A100s (dp8 tp8 pp16 interleaved v=2, full
recompute, global batch 1536, 192 microbatches: 33,867 boxes): first draw at the window it
opens on and the update to 96 microbatches; the zoom out from that window to the whole
step (the zoom control or the toolbar's autoscale: boxes narrower than a pixel, drawn as
the overview, ``figures.pipeline.overview_arrays``) and the zoom in from it to 5% of the
step (boxes again); GraphView on
llama3-405b's forward graph (3,916 nodes), collapsed and fully expanded. Medians of
``rounds``; console warnings counted and their texts printed (Chromium's "Multiple readback
operations using getImageData" notice comes from plotly's WebGL text drawing on the software
renderer, not from a figure's data). Printed, never a gate.

Run alone: ``.venv/bin/python bench/widgets_browser.py``; bench/widgets.py runs it last.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import plotly  # noqa: E402

import explorer as ex  # noqa: E402
from widgets import GraphView, PipelineView  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader"]
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
_DRAW = """async ([first, then]) => {
  const g = document.getElementById('g'); Plotly.purge(g);
  const A = JSON.parse(first);
  let t0 = performance.now(); await Plotly.newPlot(g, A.data, A.layout);
  const drawn = performance.now() - t0;
  if (then === null) return [drawn, null];
  const B = JSON.parse(then);
  t0 = performance.now(); await Plotly.react(g, B.data, B.layout);
  return [drawn, performance.now() - t0]; }"""


def figures() -> dict[str, tuple[str, str | None]]:
    """Each workload's figure JSON (and the update's, where it has one)."""
    cfg = ex.models.load("gpt3-175b")
    par = ex.ParallelConfig(dp=8, tp=8, pp=16, microbatch_size=1, schedule="interleaved_1f1b",
                            virtual_stages=2, recompute="full")  # fmt: skip
    pipe = PipelineView(cfg, par, global_batch=1536, seq=2048)
    first = pipe.figure.to_json()
    pipe.controls["zoom"].value = (0, 100)
    whole = pipe.figure.to_json()
    pipe.controls["zoom"].value = (0, 5)
    zoomed = pipe.figure.to_json()
    pipe.controls["microbatches"].value = 96
    update = pipe.figure.to_json()
    g = ex.models.build(ex.models.load("llama3-405b"), batch=1, seq=2048)
    return {
        "pipeline gpt3-175b: first draw + 96 microbatches": (first, update),
        "pipeline gpt3-175b: first draw + zoom out to the whole step": (first, whole),
        "pipeline gpt3-175b: whole step + zoom in to 5%": (whole, zoomed),
        "graph llama3-405b: collapsed": (GraphView(g).figure.to_json(), None),
        "graph llama3-405b: every group open": (
            GraphView(g, collapsed=False).figure.to_json(), None),
    }  # fmt: skip


def browser_draw(rounds: int = 3) -> dict:
    """Draw and update times in Chromium (ms, medians), or why it did not run."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        return {
            "available": False,
            "why": f"playwright is not installed ({e}): make test installs it",
        }
    if not Path(CHROMIUM).exists():
        return {"available": False, "why": f"{CHROMIUM} is missing: apt-get install -y chromium"}
    figs = figures()
    out: dict = {"available": True, "rounds": rounds, "workloads": {}}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        warnings: list[str] = []
        page.on("console", lambda m: warnings.append(m.text) if m.type == "warning" else None)
        page.set_content("<div id=g style='width:1100px'></div>")
        page.add_script_tag(content=PLOTLY_JS.read_text())
        for name, (first, then) in figs.items():
            n0, draws, updates = len(warnings), [], []
            for _ in range(rounds):
                d, u = page.evaluate(_DRAW, [first, then])
                draws.append(d)
                if u is not None:
                    updates.append(u)
            out["workloads"][name] = {
                "draw_ms": statistics.median(draws),
                "update_ms": statistics.median(updates) if updates else None,
                "figure_kb": len(first) / 1024, "console_warnings": len(warnings) - n0,
                "warning_texts": sorted({w[:100] for w in warnings[n0:]}),
            }  # fmt: skip
        browser.close()
    print("Browser side (plotly.js in headless Chromium, software rendering, medians of "
          f"{rounds}):")  # fmt: skip
    for name, w in out["workloads"].items():
        upd = "" if w["update_ms"] is None else f", update {w['update_ms']:.0f} ms"
        print(f"   {name:52s} draw {w['draw_ms']:6.0f} ms{upd} "
              f"({w['figure_kb']:.0f} KB, {w['console_warnings']} warnings)")  # fmt: skip
    for text in sorted({t for w in out["workloads"].values() for t in w["warning_texts"]}):
        print(f"   warning seen: {text}")
    return out


if __name__ == "__main__":
    browser_draw()
