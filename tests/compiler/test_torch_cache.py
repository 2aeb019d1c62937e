"""ex.compile's disk cache (explorer.compiler.torch_cache): a second process builds the
program from the stored entry without torch.export (both torch.export and the make_fx
fallback raise in it), equal to torch within 1e-5; a changed weight, input shape or option
is another key (traced again); a corrupted entry is traced again with its reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import explorer as ex  # noqa: E402
from explorer.compiler.errors import TorchCompileError  # noqa: E402
from explorer.compiler.torch_cache import CacheEvent, cache_dir, entry_path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# The child: one seeded MLP (torch classes only: the same code in every process), compiled
# with the options of argv; prints what the cache did and the largest error against torch.
CHILD = textwrap.dedent(
    """
    import json, sys
    import torch
    import explorer as ex
    opts = json.loads(sys.argv[1])
    if opts.pop("no_trace", False):
        import torch.fx.experimental.proxy_tensor as pt

        def refuse(*a, **k):
            raise RuntimeError("torch.export called in the loading process")

        torch.export.export = refuse
        pt.make_fx = refuse
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    m.eval()
    for p in m.parameters():
        p.requires_grad_(False)
    m[0].weight[0, 0] += opts.pop("bump", 0.0)
    x = torch.randn(opts.pop("batch", 2), 8)
    prog = ex.compile(m, (x,), **opts)
    err = float((prog(x) - m(x)).abs().max())
    ev = prog.cache
    print(json.dumps({"kind": ev.kind, "key": ev.key, "reason": ev.reason, "err": err}))
    """
)


def _child(cache: Path, **opts) -> dict:
    env = {**os.environ, "EXPLORER_COMPILE_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(opts)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_loads_without_torch_export_and_equals_torch(tmp_path):
    first = _child(tmp_path)
    assert first["kind"] == "miss" and first["err"] <= 1e-5
    second = _child(tmp_path, no_trace=True)
    assert second == {**second, "kind": "hit", "key": first["key"]}
    assert second["err"] <= 1e-5
    # a changed weight, shape or option is another key: with tracing refused it fails
    for change in ({"bump": 0.5}, {"batch": 3}, {"level": "O1"}):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps({"no_trace": True, **change})],
            capture_output=True, text=True, cwd=ROOT, timeout=300,
            env={**os.environ, "EXPLORER_COMPILE_CACHE": str(tmp_path), "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        assert out.returncode != 0, change
        assert "TorchCompileError" in out.stderr, change
        assert "torch.export called in the loading process" in out.stderr, change


def test_changed_weight_recompiles_and_structure_mode_reads_weights_fresh(tmp_path):
    base = _child(tmp_path)
    bumped = _child(tmp_path, bump=0.5)
    assert bumped["kind"] == "miss" and bumped["key"] != base["key"]
    assert bumped["err"] <= 1e-5
    s1 = _child(tmp_path, disk_cache="structure")
    s2 = _child(tmp_path, disk_cache="structure", bump=0.5, no_trace=True)
    assert s1["kind"] == "miss" and s2["kind"] == "hit" and s2["key"] == s1["key"]
    assert s2["err"] <= 1e-5  # the stored graph, the module's new weights


def _mlp():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def test_corrupted_entry_is_traced_again_with_its_reason_and_rewritten():
    m, x = _mlp(), torch.randn(3, 4)
    first = ex.compile(m, (x,))
    assert first.cache.kind == "miss" and Path(first.cache.path).exists()
    Path(first.cache.path).write_bytes(b"not a zip file")
    again = ex.compile(m, (x,))
    assert again.cache.kind == "corrupt" and again.cache.key == first.cache.key
    assert "not an .npz archive" in again.cache.reason and str(again.cache).startswith(
        "disk cache corrupt"
    )
    assert torch.allclose(again(x), m(x), rtol=1e-5, atol=1e-5)
    assert ex.compile(m, (x,)).cache.kind == "hit"
    raw = Path(first.cache.path).read_bytes()
    Path(first.cache.path).write_bytes(raw[: len(raw) // 2])  # truncated
    cut = ex.compile(m, (x,))
    assert cut.cache.kind == "corrupt" and cut.cache.reason
    assert torch.allclose(cut(x), m(x), rtol=1e-5, atol=1e-5)


def test_entry_of_another_key_is_corrupt_not_loaded():
    m, x = _mlp(), torch.randn(2, 4)
    a = ex.compile(m, (x,))
    b = ex.compile(m, (torch.randn(5, 4),))
    assert a.cache.key != b.cache.key
    Path(b.cache.path).write_bytes(Path(a.cache.path).read_bytes())  # a's graph under b's key
    c = ex.compile(m, (torch.randn(5, 4),))
    assert c.cache.kind == "corrupt" and "key" in c.cache.reason
    assert c(torch.ones(5, 4)).shape == (5, 2)


def test_off_neither_reads_nor_writes(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_COMPILE_CACHE", str(tmp_path / "c"))
    prog = ex.compile(_mlp(), (torch.randn(2, 4),), disk_cache="off")
    assert prog.cache == CacheEvent("off")
    assert not (tmp_path / "c").exists()
    assert cache_dir() == tmp_path / "c"


def test_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("EXPLORER_COMPILE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "parallel-explorer" / "compile"
    assert entry_path("abc").parent == cache_dir()


def test_function_closing_over_an_unknown_object_is_traced_and_not_stored():
    class Scale:
        k = 2.0

    s = Scale()
    prog = ex.compile(lambda x: x * s.k, (torch.ones(2),))
    assert prog.cache.kind == "unstored" and "Scale" in prog.cache.reason
    assert torch.equal(prog(torch.ones(2)), torch.full((2,), 2.0))


def test_bad_disk_cache_option_is_a_project_error():
    with pytest.raises(TorchCompileError, match="disk_cache='yes'"):
        ex.compile(_mlp(), (torch.randn(2, 4),), disk_cache="yes")
