"""`make explore`'s launch path for real: ``scripts/explore.py`` starts JupyterLab as the
user running the tests (root here, as in a container), without a display, prints the URL to
open, and that URL serves the lab page. The server is stopped at the end (its process group,
SIGKILL after 10 s)."""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

from lab import _children, _free_port, _stop

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "explore.py"
READY_TIMEOUT_S = 120.0
URL = re.compile(r"^\s+(http://\S+/lab\?token=\S+)\s*$")


def _lines(stream, q: queue.Queue) -> None:
    for line in iter(stream.readline, ""):
        q.put(line)
    q.put(None)


def test_explore_prints_a_url_that_serves_jupyterlab(tmp_path):
    root = tmp_path / "root"
    shutil.copytree(ROOT / "notebooks", root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                     ("JUPYTERLAB_SETTINGS_DIR", "settings"),
                     ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"), ("IPYTHONDIR", "ipython")):  # fmt: skip
        (tmp_path / sub).mkdir()
        env[var] = str(tmp_path / sub)
    port = _free_port()
    cmd = [sys.executable, str(SCRIPT), str(root), "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", "--LabApp.news_url=None",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]  # fmt: skip
    log = (tmp_path / "lab.log").open("w")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=log, text=True,
                            start_new_session=True, cwd=tmp_path)  # fmt: skip
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    out: list[str] = []
    try:
        url = None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while url is None and time.monotonic() < deadline:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                break
            out.append(line)
            m = URL.match(line)
            url = m.group(1) if m else None
        assert url, (f"explore.py printed no URL within {READY_TIMEOUT_S} s (exit "
                     f"{proc.poll()}):\n{''.join(out)}\n" + (tmp_path / "lab.log").read_text()[-3000:])  # fmt: skip
        assert "Running as root is not recommended" not in (tmp_path / "lab.log").read_text()
        parts = urllib.parse.urlsplit(url)
        token = urllib.parse.parse_qs(parts.query)["token"][0]
        assert parts.port == port and token
        base = f"{parts.scheme}://{parts.netloc}"
        with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=10) as r:
            assert r.status == 200
        with urllib.request.urlopen(url, timeout=30) as r:  # the printed URL itself
            assert r.status == 200
            assert "JupyterLab" in r.read().decode()
        with urllib.request.urlopen(f"{base}/api/contents/01_tour.ipynb?token={token}",
                                    timeout=10) as r:  # fmt: skip
            assert r.status == 200  # it serves the folder it was given
        # Headless here: the server was told not to look for a browser; as root, allowed to be.
        server = _children(proc.pid)
        assert server, "explore.py runs JupyterLab as its child"
        argv = Path(f"/proc/{server[0]}/cmdline").read_bytes().split(b"\0")
        assert b"--no-browser" in argv
        assert (b"--allow-root" in argv) == (os.geteuid() == 0)
    finally:
        kernels = [k for s in _children(proc.pid) for k in _children(s)]
        _stop(proc, kernels)
        log.close()
    # SIGTERM to the group: the server shuts down cleanly and the script exits 0.
    assert proc.returncode == 0, (proc.returncode, (tmp_path / "lab.log").read_text()[-2000:])
