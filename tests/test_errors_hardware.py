"""Hardware loader and Mesh limits (the bad inputs themselves are in tests/fuzz/corpus.py)."""

import json

import pytest

import explorer as ex
from explorer.hardware import HardwareError, MeshError
from explorer.hardware.catalog import _scale


def test_scaling_exponent_form_figures():
    # repr(1e-05) is '1e-05': pasting another exponent after it used to be a ValueError.
    assert _scale(1e-05, 9) == 10000.0 and _scale(5, -6) == 5e-06


def test_chip_errors_name_the_file(tmp_path):
    raw = json.loads((ex.hardware.catalog.datasets_dir() / "hardware/a100-80g.json").read_text())
    raw["chip"]["name"] = ""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(HardwareError, match=r"bad\.json: field 'chip\.name'"):
        ex.hardware.load_file(path)


def test_mesh_device_limit_can_be_raised(monkeypatch):
    monkeypatch.setattr("explorer.hardware.mesh.MAX_DEVICES", 8)
    with pytest.raises(MeshError, match="MAX_DEVICES=8"):
        ex.Mesh({"dp": 4, "tp": 4})
    assert ex.Mesh({"dp": 2, "tp": 4}).size == 8
