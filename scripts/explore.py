"""Open JupyterLab on the notebooks: what `make explore` runs.

Works the same for root and other users, with or without a display:
- as root (a container, a cloud VM) it passes ``--allow-root``, without which Jupyter stops with
  "Running as root is not recommended" and exit 2;
- with no display (no DISPLAY / WAYLAND_DISPLAY on Linux) or no browser Python can start it
  passes ``--no-browser``;
- once the server answers, it prints the URL to open, token included, on one line of its own.

Jupyter's own log goes to stderr as usual. Ctrl-C (or SIGTERM) stops the server. Arguments after
the folder are passed to ``jupyter lab`` as they are, e.g.
``python scripts/explore.py notebooks --ServerApp.ip=0.0.0.0 --ServerApp.port=9999``
(``make explore JUPYTER_ARGS="--ServerApp.ip=0.0.0.0"``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import webbrowser
from pathlib import Path

READY_TIMEOUT_S = 120.0  # a cold start on a loaded 2-core machine takes ~10 s


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def is_headless(environ: dict | None = None, platform: str = sys.platform) -> bool:
    """True when no browser can be shown: Linux without a display, or no browser known to
    Python's ``webbrowser`` (a bare container)."""
    env = os.environ if environ is None else environ
    if platform.startswith("linux") and not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
        return True
    try:
        webbrowser.get()
    except webbrowser.Error:
        return True
    return False


def lab_command(
    root: Path, *, as_root: bool, headless: bool, extra: list[str] | tuple[str, ...] = ()
) -> list[str]:
    """The ``jupyter lab`` command line for this user and this screen."""
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={root}"]
    if as_root:
        cmd.append("--allow-root")
    if headless:
        cmd.append("--no-browser")
    return cmd + list(extra)


def _runtime_dir() -> Path:
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir())


def server_info(pid: int, runtime_dir: Path) -> dict | None:
    """The facts (url, port, token) a Jupyter server wrote for itself, once it has."""
    path = runtime_dir / f"jpserver-{pid}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def lab_url(info: dict) -> str:
    """The URL to open: the lab page with the token."""
    base = info["url"].rstrip("/")
    token = info.get("token") or ""
    return f"{base}/lab" + (f"?token={token}" if token else "")


def _answers(info: dict) -> bool:
    base = info["url"].rstrip("/")
    token = info.get("token") or ""
    try:
        with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def wait_ready(proc: subprocess.Popen, runtime_dir: Path, timeout_s: float) -> dict | None:
    """The server's facts once ``/api/status`` answers; None if it exited or timed out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        info = server_info(proc.pid, runtime_dir)
        if info and _answers(info):
            return info
        time.sleep(0.25)
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", nargs="?", default="notebooks", help="folder to serve")
    args, extra = p.parse_known_args(argv)
    root = Path(args.root).resolve()
    if not root.is_dir():
        print(f"explore: {root} is not a folder", file=sys.stderr)
        return 2
    cmd = lab_command(root, as_root=is_root(), headless=is_headless(), extra=extra)
    runtime_dir = _runtime_dir()
    # Ctrl-C reaches the server too (same process group): it stops itself and we wait for it.
    # A handler, not SIG_IGN: an ignored signal would stay ignored in the server after exec.
    signal.signal(signal.SIGINT, lambda _sig, _frame: None)
    proc = subprocess.Popen(cmd)

    def _forward(sig, _frame):
        proc.send_signal(sig)

    signal.signal(signal.SIGTERM, _forward)
    signal.signal(signal.SIGHUP, _forward)
    info = wait_ready(proc, runtime_dir, READY_TIMEOUT_S)
    if info is None:
        if proc.poll() is None:
            print(f"explore: JupyterLab did not answer within {READY_TIMEOUT_S:.0f} s "
                  "(its log is above); stopping it", file=sys.stderr)  # fmt: skip
            proc.terminate()
        rc = proc.wait()
        print(f"explore: JupyterLab exited with {rc} before it was ready: {' '.join(cmd)}",
              file=sys.stderr)  # fmt: skip
        return rc or 1
    print(f"\nJupyterLab is running. Open this URL in a browser:\n\n    {lab_url(info)}\n\n"
          "Stop it with Ctrl-C.\n", flush=True)  # fmt: skip
    rc = proc.wait()
    # Jupyter exits 0 on Ctrl-C / SIGTERM; anything else is its failure.
    return 0 if rc in (0, -signal.SIGTERM, -signal.SIGINT) else rc


if __name__ == "__main__":
    sys.exit(main())
