"""``scripts/explore.py`` (what ``make explore`` runs) decides its Jupyter flags from the user
and the screen; the real launch is tested in ``tests/browser/test_explore_launch.py``."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "scripts" / "explore.py"


@pytest.fixture(scope="module")
def explore():
    spec = importlib.util.spec_from_file_location("explore_script", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("as_root", [True, False])
@pytest.mark.parametrize("headless", [True, False])
def test_flags_follow_the_user_and_the_screen(explore, as_root, headless):
    cmd = explore.lab_command(Path("/nb"), as_root=as_root, headless=headless,
                              extra=["--ServerApp.port=9999"])  # fmt: skip
    assert cmd[:3] == [sys.executable, "-m", "jupyterlab"]
    assert "--ServerApp.root_dir=/nb" in cmd
    assert ("--allow-root" in cmd) == as_root
    assert ("--no-browser" in cmd) == headless
    assert cmd[-1] == "--ServerApp.port=9999"  # the user's options come last and win


def test_linux_without_a_display_is_headless(explore):
    assert explore.is_headless({}, platform="linux")
    assert explore.is_headless({"TERM": "xterm"}, platform="linux")


def test_no_known_browser_is_headless(explore, monkeypatch):
    def nothing():
        raise explore.webbrowser.Error("could not locate runnable browser")

    monkeypatch.setattr(explore.webbrowser, "get", nothing)
    assert explore.is_headless({"DISPLAY": ":0"}, platform="linux")
    assert explore.is_headless({}, platform="darwin")


def test_a_display_and_a_browser_open_one(explore, monkeypatch):
    monkeypatch.setattr(explore.webbrowser, "get", lambda: object())
    assert not explore.is_headless({"DISPLAY": ":0"}, platform="linux")
    assert not explore.is_headless({"WAYLAND_DISPLAY": "wayland-0"}, platform="linux")
    assert not explore.is_headless({}, platform="darwin")


def test_the_url_comes_from_the_server_file(explore, tmp_path):
    info = {"url": "http://localhost:8890/", "token": "abc", "port": 8890}
    (tmp_path / "jpserver-42.json").write_text(json.dumps(info))
    assert explore.server_info(42, tmp_path) == info
    assert explore.server_info(43, tmp_path) is None
    assert explore.lab_url(info) == "http://localhost:8890/lab?token=abc"
    assert explore.lab_url({"url": "http://h:1/base/", "token": ""}) == "http://h:1/base/lab"


def test_a_missing_folder_is_refused(explore, tmp_path, capsys):
    assert explore.main([str(tmp_path / "nope")]) == 2
    assert "is not a folder" in capsys.readouterr().err
