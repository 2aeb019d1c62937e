"""The tour in a real browser: JupyterLab + Debian's Chromium driven by Playwright.

It proves what nbclient cannot: the plotly FigureWidgets and ipywidgets render in the page,
and a slider moved in the page reaches the kernel, re-plans and redraws a figure.

JupyterLab runs on 127.0.0.1 with a random token, isolated config dirs and a temporary root
holding a copy of the notebooks; every process started here is stopped at the end (the
server's process group and the kernels it started, SIGKILL after 10 s). Screenshots go to
``test-artifacts/``. Chromium is ``/usr/bin/chromium`` (``make test`` installs it with
apt-get); when it cannot start the test fails with the reason, it never skips.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
    "--enable-unsafe-swiftshader",  # keeps WebGL (Scattergl) on a software renderer
]  # fmt: skip
NOTEBOOK = "01_tour.ipynb"
STOP_GRACE_S = 10.0
LAB_START_TIMEOUT_S = 60.0
RUN_ALL_TIMEOUT_S = 150.0
MIN_FIGURES = 5  # the tuner's cost bars, the graph, the mesh and its tensor and ring figures
TUNER_SLIDER = "alpha_compute"

pytestmark = pytest.mark.browser


# --- processes ----------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc): the kernels the server started, which run in
    their own sessions and so outlive a kill of the server's process group."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _kill_groups(pgids: list[int], sig: int) -> None:
    for g in pgids:
        try:
            os.killpg(g, sig)
        except ProcessLookupError:
            pass


def _stop(proc: subprocess.Popen, kernels: list[int]) -> None:
    """SIGTERM the server's group and the kernels' groups; SIGKILL what is left after 10 s."""
    groups = [proc.pid, *kernels]
    _kill_groups(groups, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and any(Path(f"/proc/{k}").exists() for k in kernels):
        time.sleep(0.2)
    _kill_groups(groups, signal.SIGKILL)
    proc.wait(timeout=STOP_GRACE_S)


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[dict]:
    """A JupyterLab server on 127.0.0.1 serving a temporary copy of ``notebooks/``."""
    tmp = tmp_path_factory.mktemp("lab")
    root = tmp / "root"
    shutil.copytree(ROOT / "notebooks", root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    env = dict(os.environ)
    for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                     ("JUPYTERLAB_SETTINGS_DIR", "settings"),
                     ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"), ("IPYTHONDIR", "ipython")):  # fmt: skip
        (tmp / sub).mkdir()
        env[var] = str(tmp / sub)
    # Every cell stays in the DOM (no windowing), so off-screen figures render and are found.
    tracker = tmp / "settings" / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    # No "get notified about Jupyter news?" toast over the screenshots.
    apputils = tmp / "settings" / "@jupyterlab" / "apputils-extension"
    apputils.mkdir(parents=True)
    (apputils / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))
    port, token = _free_port(), secrets.token_hex(16)
    cmd = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.expose_app_in_browser=True",
    ]  # fmt: skip
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log = (tmp / "lab.log").open("w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    kernels: list[int] = []
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited with {proc.returncode} before it was ready:\n"
                            + (tmp / "lab.log").read_text()[-3000:], pytrace=False)  # fmt: skip
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() - t0 > LAB_START_TIMEOUT_S:
                pytest.fail(f"JupyterLab did not answer /api/status within {LAB_START_TIMEOUT_S} s:\n"
                            + (tmp / "lab.log").read_text()[-3000:], pytrace=False)  # fmt: skip
            time.sleep(0.2)
        info = {"base": base, "token": token, "root": root, "log": tmp / "lab.log",
                "start_s": time.monotonic() - t0, "kernels": kernels}  # fmt: skip
        yield info
    finally:
        kernels += [k for k in _children(proc.pid) if k not in kernels]
        _stop(proc, kernels)
        log.close()


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium through Playwright; a start failure fails the test with its reason."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: the browser test needs Debian's Chromium; install it "
                    "with `apt-get install -y chromium` (`make test` does it)", pytrace=False)  # fmt: skip
    pw = sync_playwright().start()
    try:
        try:
            b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        except Exception as e:  # noqa: BLE001  (any launch error means the same to the user)
            pytest.fail(f"Chromium ({CHROMIUM}) could not start under Playwright: {e}\n"
                        "Check that `chromium --headless --no-sandbox --dump-dom about:blank` "
                        "works on this machine.", pytrace=False)  # fmt: skip
        yield b
        b.close()
    finally:
        pw.stop()


# --- page helpers ---------------------------------------------------------------------------
NB = "window.jupyterapp.shell.currentWidget"

KERNEL_READY = f"""() => {{
  const w = window.jupyterapp && {NB};
  const s = w && w.sessionContext;
  const k = s && s.session && s.session.kernel;
  return !!(k && s.isReady && k.connectionStatus === 'connected' && k.status === 'idle');
}}"""

PROMPTS = f"""() => Array.from({NB}.node.querySelectorAll('.jp-CodeCell .jp-InputPrompt'))
  .map(p => p.textContent.trim())"""

OUTPUT_ERRORS = f"""() => {{
  const errs = [];
  for (const cell of {NB}.content.model.cells) {{
    if (cell.type !== 'code') continue;
    for (const o of cell.outputs.toJSON()) {{
      if (o.output_type === 'error') errs.push(o.ename + ': ' + o.evalue);
    }}
  }}
  return errs;
}}"""

FIGURES_RENDERED = f"""(n) => {{
  const plots = Array.from({NB}.node.querySelectorAll('.js-plotly-plot'));
  const drawn = plots.filter(gd => gd.data && gd.data.length && gd.querySelector('.main-svg'));
  const sliders = {NB}.node.querySelectorAll('.widget-slider .noUi-handle').length;
  return drawn.length >= n && sliders > 0;
}}"""

# The cost figure sits in the same HBox as the tuner's sliders (controls left, figure right).
TUNER_FIGURE = """(handle) => {
  const box = handle.closest('.widget-hbox');
  const gd = box && box.querySelector('.js-plotly-plot');
  const title = gd && gd.querySelector('.gtitle');
  return {y: ((gd && gd.data) || []).map(t => Array.from(t.y || [])),
          title: title ? title.textContent : ''};
}"""


def _numbered(prompts: list[str]) -> bool:
    return bool(prompts) and all(p.strip("[]: ").isdigit() for p in prompts)


def test_tour_renders_and_a_tuner_slider_replans(lab, browser):
    ARTIFACTS.mkdir(exist_ok=True)
    timings = {"lab_start_s": round(lab["start_s"], 1)}
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(30_000)
    console_errors: list[str] = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    try:
        t0 = time.monotonic()
        page.goto(f"{lab['base']}/lab/tree/{NOTEBOOK}?reset&token={lab['token']}")
        page.wait_for_function(KERNEL_READY, timeout=60_000)
        timings["page_to_idle_kernel_s"] = round(time.monotonic() - t0, 1)

        # Run all; retry once if nothing was queued (the command can race the kernel start).
        t0 = time.monotonic()
        for _ in range(2):
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            try:
                page.wait_for_function(
                    f"() => ({PROMPTS})().some(p => p.includes('*') || /\\d/.test(p))",
                    timeout=5_000,
                )  # fmt: skip
                break
            except Exception:  # noqa: BLE001  (Playwright's TimeoutError: queue again)
                continue
        else:
            pytest.fail("notebook:run-all-cells queued no cell twice in a row")
        page.wait_for_function(
            f"() => ({PROMPTS})().every(p => /^\\[\\d+\\]:?$/.test(p))",
            timeout=RUN_ALL_TIMEOUT_S * 1000,
        )  # fmt: skip
        timings["run_all_s"] = round(time.monotonic() - t0, 1)
        assert _numbered(page.evaluate(PROMPTS))
        errors = page.evaluate(OUTPUT_ERRORS)
        assert not errors, f"{NOTEBOOK} raised in the browser's kernel: {errors}"

        t0 = time.monotonic()
        page.wait_for_function(FIGURES_RENDERED, arg=MIN_FIGURES, timeout=60_000)
        timings["figures_rendered_s"] = round(time.monotonic() - t0, 1)
        nplots = page.evaluate(f"() => {NB}.node.querySelectorAll('.js-plotly-plot').length")
        assert nplots >= MIN_FIGURES, f"only {nplots} plotly figures in the page"
        page.screenshot(path=str(ARTIFACTS / "tour_after_run.png"))

        # Move the tuner's alpha_compute slider one step: focus the handle, ArrowRight.
        slider = page.locator(".jp-Notebook .widget-slider").filter(
            has=page.locator(".widget-label", has_text=TUNER_SLIDER)
        )  # fmt: skip
        assert slider.count() == 1, f"expected one {TUNER_SLIDER!r} slider, found {slider.count()}"
        handle = slider.locator(".noUi-handle")
        readout = slider.locator(".widget-readout")
        handle.scroll_into_view_if_needed()
        tuner_box = slider.locator("xpath=ancestor::div[contains(@class,'widget-vbox')][2]")
        before_value = readout.inner_text()
        try:  # plotly draws asynchronously after the widget view exists
            page.wait_for_function(f"(h) => ({TUNER_FIGURE})(h).y.some(y => y.length)",
                                   arg=handle.element_handle())  # fmt: skip
        except Exception:  # noqa: BLE001
            pytest.fail("the CostTuner's cost figure never drew its bars: "
                        f"{handle.evaluate(TUNER_FIGURE)}", pytrace=False)  # fmt: skip
        before = handle.evaluate(TUNER_FIGURE)
        page.screenshot(path=str(ARTIFACTS / "cost_tuner_before.png"))
        t0 = time.monotonic()
        handle.focus()
        page.keyboard.press("ArrowRight")
        page.wait_for_function(
            "([el, v]) => el.textContent.trim() !== v", arg=[readout.element_handle(),
                                                             before_value],
        )  # fmt: skip
        page.wait_for_function(
            f"""([h, b]) => {{
              const now = ({TUNER_FIGURE})(h);
              return JSON.stringify(now.y) !== JSON.stringify(b.y) || now.title !== b.title;
            }}""",
            arg=[handle.element_handle(), before],
            timeout=30_000,
        )  # fmt: skip
        timings["slider_to_redraw_s"] = round(time.monotonic() - t0, 2)
        after = handle.evaluate(TUNER_FIGURE)
        after_value = readout.inner_text()
        assert after_value != before_value, "the slider's readout did not move"
        assert after["y"] != before["y"], "the cost bars did not change after the re-plan"
        assert after["title"] != before["title"], "the cost figure's title did not change"
        assert "→" in after["title"], f"title should compare before → after: {after['title']!r}"
        page.screenshot(path=str(ARTIFACTS / "cost_tuner_after.png"))
        if tuner_box.count():
            tuner_box.first.screenshot(path=str(ARTIFACTS / "cost_tuner.png"))
        # The dashboard (StrategyExplorer, the tour's last view) for the README.
        dash = page.locator(".jp-CodeCell").filter(has_text="StrategyExplorer(").last
        dash_out = dash.locator(".jp-OutputArea-output").last
        dash_out.scroll_into_view_if_needed()
        assert dash_out.locator(".js-plotly-plot").count() >= 1, "the dashboard drew no figure"
        dash_out.screenshot(path=str(ARTIFACTS / "dashboard.png"))
    finally:
        page.screenshot(path=str(ARTIFACTS / "tour_last.png"))
        (ARTIFACTS / "browser_timings.json").write_text(json.dumps(timings, indent=2))
        page.close()
    print("browser timings:", timings, "console errors:", console_errors[:5])


def test_html_report_draws_every_figure_offline(browser, tmp_path):
    """The report opens from a file with the network off and plotly draws all five figures."""
    from widgets.report import write_report

    ARTIFACTS.mkdir(exist_ok=True)
    path = tmp_path / "report.html"
    write_report(path, "gpt2", 4, global_batch=8, seq=256)
    context = browser.new_context(offline=True, viewport={"width": 1300, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(path.as_uri())
        page.wait_for_function(
            "() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
            ".filter(gd => gd.data && gd.data.length && gd.querySelector('.main-svg')).length === 5",
            timeout=30_000,
        )  # fmt: skip
        titles = page.evaluate(
            "() => Array.from(document.querySelectorAll('.js-plotly-plot .gtitle'))"
            ".map(t => t.textContent)"
        )  # fmt: skip
        assert any("gpt2" in t for t in titles), titles
        page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=False)
    finally:
        context.close()
    assert not errors, f"JavaScript errors in the report: {errors}"
