"""JupyterLab + Debian's Chromium for the browser tests: the server, the browser, and the
checks run in the page (what Chromium holds, not what Python holds).

JupyterLab runs on 127.0.0.1 with a random token, isolated config dirs and a temporary root
holding a copy of the notebooks; every process started here is stopped at the end (the
server's process group and the kernels it started, SIGKILL after 10 s).
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
from contextlib import contextmanager
from pathlib import Path

from pagelog import PageLog

ROOT = Path(__file__).parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
    "--enable-unsafe-swiftshader",  # keeps WebGL (Scattergl) on a software renderer
]  # fmt: skip
STOP_GRACE_S = 10.0
LAB_START_TIMEOUT_S = 60.0
VIEWPORT = {"width": 1440, "height": 900}  # a laptop screen, the judge


class LabError(RuntimeError):
    """JupyterLab or Chromium could not start; the message says why."""


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


@contextmanager
def jupyterlab(tmp: Path, notebooks: Path = ROOT / "notebooks") -> Iterator[dict]:
    """A JupyterLab server on 127.0.0.1 serving a copy of ``notebooks`` (a dict of facts)."""
    root = tmp / "root"
    shutil.copytree(notebooks, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    env = dict(os.environ)
    for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                     ("JUPYTERLAB_SETTINGS_DIR", "settings"),
                     ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"), ("IPYTHONDIR", "ipython")):  # fmt: skip
        (tmp / sub).mkdir(exist_ok=True)
        env[var] = str(tmp / sub)
    # Every cell stays in the DOM (no windowing), so off-screen figures render and are found.
    tracker = tmp / "settings" / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True, exist_ok=True)
    (tracker / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    # No "get notified about Jupyter news?" toast over the screenshots.
    apputils = tmp / "settings" / "@jupyterlab" / "apputils-extension"
    apputils.mkdir(parents=True, exist_ok=True)
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
                raise LabError(f"JupyterLab exited with {proc.returncode} before it was ready:\n"
                               + (tmp / "lab.log").read_text()[-3000:])  # fmt: skip
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() - t0 > LAB_START_TIMEOUT_S:
                raise LabError(f"JupyterLab did not answer /api/status within "
                               f"{LAB_START_TIMEOUT_S} s:\n" + (tmp / "lab.log").read_text()[-3000:])  # fmt: skip
            time.sleep(0.2)
        yield {"base": base, "token": token, "root": root, "log": tmp / "lab.log",
               "start_s": time.monotonic() - t0, "kernels": kernels}  # fmt: skip
    finally:
        kernels += [k for k in _children(proc.pid) if k not in kernels]
        _stop(proc, kernels)
        log.close()


@contextmanager
def chromium() -> Iterator:
    """Debian's Chromium through Playwright (LabError with the reason when it cannot start)."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        raise LabError(f"{CHROMIUM} is missing: the browser test needs Debian's Chromium; "
                       "install it with `apt-get install -y chromium` (`make test` does it)")  # fmt: skip
    pw = sync_playwright().start()
    try:
        try:
            b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        except Exception as e:  # noqa: BLE001  (any launch error means the same to the user)
            raise LabError(f"Chromium ({CHROMIUM}) could not start under Playwright: {e}\n"
                           "Check that `chromium --headless --no-sandbox --dump-dom "
                           "about:blank` works on this machine.") from e  # fmt: skip
        yield b
        b.close()
    finally:
        pw.stop()


# --- in the page ----------------------------------------------------------------------------
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

# Every plotly plot in the notebook: its traces and how many hold data. A plot inside a hidden
# tab (display: none up the tree) is reported with visible=false.
PLOTS = f"""() => Array.from({NB}.node.querySelectorAll('.js-plotly-plot')).map((gd, i) => {{
  // An array, a typed array, or plotly's base64 form {{dtype, bdata}} (sent by updates from
  // Python, kept as is in gd.data and decoded into gd._fullData).
  const filled = (v) => !!v && (v.length > 0 || (typeof v.bdata === 'string' && v.bdata.length > 0));
  const has = (t) => ['x', 'y', 'z', 'values', 'lat', 'a', 'r'].some(k => filled(t[k]));
  const traces = gd.data || [];
  const full = gd._fullData || [];
  const title = gd.querySelector('.gtitle');
  const cell = gd.closest('.jp-CodeCell');
  const cells = Array.from({NB}.node.querySelectorAll('.jp-CodeCell'));
  return {{index: i, cell: cells.indexOf(cell), traces: traces.length,
           with_data: traces.filter((t, k) => has(t) || (full[k] && has(full[k]))).length,
           x_kind: traces.length ? Object.prototype.toString.call(traces[0].x) +
             (traces[0].x && traces[0].x.bdata !== undefined ? ' bdata' : '') : '',
           visible: gd.offsetParent !== null,
           title: title ? title.textContent : '',
           width: Math.round(gd.getBoundingClientRect().width),
           drawn_width: gd._fullLayout ? Math.round(gd._fullLayout.width) : null,
           autosize: !!(gd._fullLayout && gd._fullLayout.autosize)}};
}})"""

# The index of the code cell holding an element (-1 outside any cell).
_CELL_OF = f"""const cellOf = (el) => Array.from({NB}.node.querySelectorAll('.jp-CodeCell'))
  .indexOf(el.closest('.jp-CodeCell'));"""

# Readouts and labels whose text does not fit (the "3.16 shows 3").
CLIPPED = f"""() => {{
  {_CELL_OF}
  const out = [];
  for (const el of {NB}.node.querySelectorAll(
        '.widget-readout, .widget-label, .widget-button, .widget-toggle-button, button.jupyter-button')) {{
    if (el.offsetParent === null) continue;  // hidden (another tab, a collapsed pane)
    if (el.scrollWidth > el.clientWidth + 1)
      out.push({{cell: cellOf(el), cls: el.className, text: el.textContent.trim().slice(0, 60),
                scroll: el.scrollWidth, client: el.clientWidth}});
  }}
  return out;
}}"""

# Output areas (or anything inside them) that scroll sideways.
SIDEWAYS = f"""() => {{
  {_CELL_OF}
  const out = [];
  for (const area of {NB}.node.querySelectorAll('.jp-OutputArea-output')) {{
    for (const el of [area, ...area.querySelectorAll('*')]) {{
      if (el.offsetParent === null && el !== area) continue;
      const ox = getComputedStyle(el).overflowX;
      if ((ox === 'auto' || ox === 'scroll') && el.scrollWidth > el.clientWidth + 1)
        out.push({{cell: cellOf(el), cls: String(el.className).slice(-40),
                  text: el.textContent.trim().slice(0, 60), scroll: el.scrollWidth,
                  client: el.clientWidth}});
    }}
  }}
  return out;
}}"""


WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

# Installed in every page before it loads (``context.add_init_script``): anywidget models whose
# front end gave up starting (anywidget rejects a model whose module has not loaded and
# initialized within 2 s; from then on the model drops every message from the kernel).
# anywidget's 2 s is ``AbortSignal.timeout(2000)`` in its runtime (labextension 528.*.js); in
# this browser it is 60 s. On the 2-core test machine, with a second pytest worker beside
# Chromium, a plotly FigureWidget's module (widgetbundle.js, 5 MB) took longer than 2 s to start
# in one of 18 notebook runs and that notebook's figure stayed empty: a machine-load limit of
# anywidget's, not a fault of the views under test. Those that still give up are counted.
WATCH_ANYWIDGET = """
const __timeout = AbortSignal.timeout.bind(AbortSignal);
AbortSignal.timeout = (ms) => __timeout(ms === 2000 ? 60000 : ms);
window.__anywidgetFailures = 0;
window.addEventListener('unhandledrejection', (e) => {
  if (String(e.reason).includes('[anywidget] Failed to initialize model'))
    window.__anywidgetFailures += 1;
});
"""
ANYWIDGET_FAILURES = "() => window.__anywidgetFailures || 0"

# The notebook's ipywidgets manager has attached to its kernel and restored (the comm target is
# registered and its first comm_info round trip is done): a Run All before that point races
# the manager's own start. The manager is reached through the renderer factory it registers.
WIDGETS_READY = f"""() => {{
  const w = {NB};
  if (!w || !w.content || !w.sessionContext.session) return false;
  const rm = w.content.rendermime, mime = '{WIDGET_MIME}';
  if (rm.preferredMimeType({{[mime]: {{}}}}, 'any') !== mime) return false;
  if (!w.__widgetManager) {{
    const r = rm.createRenderer(mime);
    r._manager.promise.then(m => {{ w.__widgetManager = m; r.dispose(); }});
    return false;
  }}
  const m = w.__widgetManager;
  return m.restoredStatus && m.kernel === w.sessionContext.session.kernel;
}}"""

# Run All finished: no cell queued or running, the kernel idle, and every code cell numbered
# (or a cell failed, which stops the run: its error output tells why).
RUN_DONE = f"""() => {{
  const w = {NB};
  const prompts = ({PROMPTS})();
  if (prompts.some(p => p.includes('*')) || w.sessionContext.session.kernel.status !== 'idle')
    return false;
  if (prompts.every(p => /^\\[\\d+\\]:?$/.test(p))) return true;
  return ({OUTPUT_ERRORS})().length > 0;
}}"""

# Every output of every code cell, as nbformat dicts (stream text, text/plain, widget views).
OUTPUTS = f"""() => {{
  const out = [];
  for (const cell of {NB}.content.model.cells) {{
    if (cell.type === 'code') out.push(...cell.outputs.toJSON());
  }}
  return out;
}}"""

# Code run in the notebook's kernel from the page (not a cell: nothing is added to the notebook
# and the execution count does not move); returns its status and the text it printed.
EXECUTE = f"""async (code) => {{
  const kernel = {NB}.sessionContext.session.kernel;
  const future = kernel.requestExecute({{code, silent: false, store_history: false}});
  let text = '';
  const errors = [];
  future.onIOPub = (msg) => {{
    const t = msg.header.msg_type;
    if (t === 'stream') text += msg.content.text;
    else if (t === 'error') errors.push(msg.content.ename + ': ' + msg.content.evalue);
  }};
  const reply = await future.done;
  return {{status: reply.content.status, text, errors}};
}}"""

# The plotly figures the page must draw: each FigureWidget (a model holding _widget_data)
# inside the widget views the notebook's outputs hold, counted once per place it is shown.
EXPECTED_PLOTS = f"""async () => {{
  const w = {NB};
  const m = w.__widgetManager;
  const ids = [];
  for (const cell of w.content.model.cells) {{
    if (cell.type !== 'code') continue;
    for (const o of cell.outputs.toJSON())
      if (o.data && o.data['{WIDGET_MIME}']) ids.push(o.data['{WIDGET_MIME}'].model_id);
  }}
  const count = (model) => {{
    if (!model || !model.attributes) return 0;
    if ('_widget_data' in model.attributes) return 1;
    return (model.get('children') || []).reduce((n, k) => n + count(k), 0);
  }};
  let n = 0;
  for (const id of ids) n += count(await m.get_model(id));
  return n;
}}"""


class LabPage:
    """One Chromium page holding JupyterLab, in which notebooks are opened one at a time:
    JupyterLab starts once (seconds of plugin start-up per page otherwise). Opening a notebook
    closes the one open before and shuts its kernel down. A page that crashed or was closed is
    replaced by a fresh one at the next ``open``.

    ``log`` holds the page's console from its first line (a line marks each notebook opened);
    ``anywidget_failures()`` counts those of the notebook open now (see ``WATCH_ANYWIDGET``).
    """

    def __init__(self, browser, lab: dict) -> None:
        self.browser, self.lab = browser, lab
        self.context = self.page = None
        self.log = PageLog()
        self.current: str | None = None
        self._failures_before = 0

    def _start(self) -> None:
        if self.context is not None:
            self.context.close()
        self.context = self.browser.new_context(viewport=VIEWPORT)
        self.context.add_init_script(WATCH_ANYWIDGET)
        self.page = self.log.watch(self.context.new_page())
        self.page.set_default_timeout(30_000)
        self.page.goto(f"{self.lab['base']}/lab?reset&token={self.lab['token']}")
        self.page.wait_for_function("() => !!window.jupyterapp", timeout=60_000)
        self.page.evaluate("() => window.jupyterapp.restored")
        self.current = None

    def open(self, name: str, timeout_s: float = 60.0):
        """Open notebook ``name`` (a path under the server's root); return the page once its
        kernel is idle and its widget manager is ready."""
        if self.page is None or self.page.is_closed() or self.log.crashed:
            self.log.crashed = False
            self._start()
        self.close_current()
        self.log.lines.append(f"--- {name} opened ---")
        self.page.evaluate(
            "(path) => { window.jupyterapp.commands.execute("
            "'docmanager:open', {path, factory: 'Notebook'}); }", name,
        )  # fmt: skip
        self.page.wait_for_function(f"(p) => !!{NB} && !!{NB}.context && {NB}.context.path === p",
                                    arg=name, timeout=timeout_s * 1000)  # fmt: skip
        self.page.wait_for_function(KERNEL_READY, timeout=timeout_s * 1000)
        self.page.wait_for_function(WIDGETS_READY, timeout=timeout_s * 1000)
        self.current = name
        self._failures_before = self.page.evaluate(ANYWIDGET_FAILURES)
        return self.page

    def anywidget_failures(self) -> int:
        return self.page.evaluate(ANYWIDGET_FAILURES) - self._failures_before

    def close_current(self) -> None:
        """Close the notebook open now (its outputs are not saved) and shut its kernel down."""
        if self.current is None:
            return
        self.current = None
        self.page.evaluate(
            f"""async () => {{
              const w = {NB};
              if (!w || !w.sessionContext) return;
              await w.sessionContext.shutdown();
              w.dispose();
            }}"""
        )  # fmt: skip

    def close(self) -> None:
        if self.context is not None:
            try:
                self.close_current()
            except Exception:  # noqa: BLE001  (a crashed page: the server stops its kernels)
                pass
            self.context.close()
            self.context = self.page = None


def run_all(page, timeout_s: float) -> float:
    """Run every cell (JupyterLab's Run All); wait until the run is over. Returns the seconds
    taken."""
    t0 = time.monotonic()
    enabled = page.evaluate(
        "() => { const c = window.jupyterapp.commands, id = 'notebook:run-all-cells';"
        "  if (!c.isEnabled(id)) return false; c.execute(id); return true; }"
    )  # fmt: skip
    if not enabled:
        raise LabError("notebook:run-all-cells is not enabled on the open notebook")
    page.wait_for_function(f"() => ({PROMPTS})().some(p => p.includes('*') || /\\d/.test(p))",
                           timeout=30_000)  # fmt: skip
    page.wait_for_function(RUN_DONE, timeout=timeout_s * 1000)
    return time.monotonic() - t0


def execute(page, code: str) -> dict:
    """Run ``code`` in the open notebook's kernel (see ``EXECUTE``)."""
    return page.evaluate(EXECUTE, code)


def wait_for_plots(page, expected: int, timeout_s: float = 60.0) -> list[dict]:
    """Wait until the page holds ``expected`` plots and every visible one has a trace with
    data and, when autosized, is drawn at the width of its element; return them. With no plot
    expected there is nothing to wait for; on a timeout the caller asserts on what is there."""
    if expected > 0:
        try:
            page.wait_for_function(
                f"(n) => {{ const p = ({PLOTS})(); return p.length >= n && "
                "p.filter(x => x.visible).every(x => x.with_data > 0 && "
                "(!x.autosize || Math.abs(x.drawn_width - x.width) <= 2)); }",
                arg=expected, timeout=timeout_s * 1000, polling=100,
            )  # fmt: skip
        except Exception:  # noqa: BLE001  (Playwright's TimeoutError: the caller asserts)
            pass
    return page.evaluate(PLOTS)


def misfit_plots(plots: list[dict]) -> list[dict]:
    """Visible autosized plots drawn narrower or wider than their element (plotly's 700 px
    fallback when it drew before the page gave it a width)."""
    return [p for p in plots if p["visible"] and p["autosize"]
            and abs((p["drawn_width"] or 0) - p["width"]) > 2]  # fmt: skip


def run_cells(lab: dict, lab_page: LabPage, page_log, name: str, cells: list[str],
              timeout_s: float = 180.0):  # fmt: skip
    """Write ``cells`` as notebook ``name`` in the server's root, open it and run it all; the
    page, once no output holds an error (a view's test then checks what it drew)."""
    import nbformat

    ARTIFACTS.mkdir(exist_ok=True)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}  # fmt: skip
    nbformat.write(nb, lab["root"] / name)
    page_log.lines = lab_page.log.lines
    page = lab_page.open(name)
    run_all(page, timeout_s)
    assert not page.evaluate(OUTPUT_ERRORS)
    return page


def check_plots_drawn(page, lab_page: LabPage, expected: int) -> list[dict]:
    """The page holds ``expected`` plots, each drawn with data and fitting its cell, and no
    text is cut and nothing scrolls sideways; returns the plots."""
    held = page.evaluate(EXPECTED_PLOTS)
    assert held == expected, f"the views hold {held} figures, expected {expected}"
    plots = wait_for_plots(page, expected)
    # anywidget models that never started (their module did not load within 2 s) drop every
    # update from the kernel: named when the plots are wrong
    why = {"anywidget models that failed to start": lab_page.anywidget_failures()}
    assert len(plots) >= expected and all(p["with_data"] > 0 for p in plots), (plots, why)
    assert not misfit_plots(plots), (plots, why)
    assert not page.evaluate(CLIPPED), page.evaluate(CLIPPED)
    assert not page.evaluate(SIDEWAYS), page.evaluate(SIDEWAYS)
    return plots
