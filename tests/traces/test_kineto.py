"""explorer.traces: reading the vendored real Kineto traces, checked against an independent
whole-file parse (json + gzip) of the same files; malformed, truncated and foreign files."""

from __future__ import annotations

import gzip
import json
import re
import shutil

import pytest

import explorer as ex
from explorer.traces import TraceFormatError, TracesError, load_kineto, vendored

FILES = ("sampled_rank-0.json.gz", "sampled_rank-1.json.gz", "nccl_data.json.gz",
         "cpu_only_rank-34.json.gz")  # fmt: skip


def _raw(name):
    return json.load(gzip.open(vendored(name)))


@pytest.fixture(scope="module")
def loaded():
    return {name: load_kineto(vendored(name)) for name in FILES}


@pytest.mark.parametrize("name", FILES)
def test_metadata_and_counts_match_a_whole_file_parse(name, loaded):
    raw = _raw(name)
    r = loaded[name].ranks[0]
    info = raw["distributedInfo"]
    assert (r.rank, r.world_size, r.backend) == (info["rank"], info["world_size"], info["backend"])
    assert len(r.groups) == len(info.get("pg_config", []))
    events = raw["traceEvents"]
    assert r.events == len(events)
    gpu = [
        e
        for e in events
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    assert len(r.kernels) == len(gpu)
    assert r.device == ("gpu" if gpu else "cpu")
    steps = sorted(int(m.group(1)) for e in events
                   if (m := re.match(r"ProfilerStep#(\d+)$", e.get("name", ""))) and e.get("ph") == "X")  # fmt: skip
    assert [s.number for s in r.steps] == steps
    # kernels are linked to the CPU op with their External id
    ops = {e["args"]["External id"]: e["name"] for e in events
           if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}  # fmt: skip
    for k in r.kernels:
        if k.external_id in ops:
            assert k.op == ops[k.external_id]


def test_nccl_collectives_carry_kind_size_dtype_and_group(loaded):
    r = loaded["nccl_data.json.gz"].ranks[0]
    raw = [e for e in _raw("nccl_data.json.gz")["traceEvents"]
           if e.get("cat") == "kernel" and e["name"].startswith("nccl")]  # fmt: skip
    assert len(r.collectives) == len(raw)
    for a, e in zip(r.collectives, sorted(raw, key=lambda e: e["ts"]), strict=True):
        args = e["args"]
        c = a.collective
        assert c.nelems == args["In msg nelems"]  # all-reduce / broadcast: the input
        assert c.group_ranks == tuple(json.loads(args["Process Group Ranks"]))
        assert c.group_size == args["Group size"]
        assert ex.traces.collective_kind(args["Collective name"]) == c.kind
        assert c.size_bytes == c.nelems * {"Float": 4, "Long": 8}[args["dtype"]]
        assert a.category == "communication"


def test_folder_loads_each_rank_in_rank_order(tmp_path):
    for name in ("sampled_rank-1.json.gz", "sampled_rank-0.json.gz"):
        shutil.copy(vendored(name), tmp_path / name)
    t = load_kineto(tmp_path)
    assert [r.rank for r in t.ranks] == [0, 1]
    assert t.world_size == 128
    assert t.events == sum(len(_raw(n)["traceEvents"]) for n in ("sampled_rank-0.json.gz",
                                                                 "sampled_rank-1.json.gz"))  # fmt: skip


def test_progress_is_reported_to_the_end_of_each_file():
    seen = []
    load_kineto(vendored("nccl_data.json.gz"), progress=lambda *a: seen.append(a))
    f, done, total, events = seen[-1]
    assert (
        f.endswith("nccl_data.json.gz")
        and done == total == vendored("nccl_data.json.gz").stat().st_size
    )
    assert events == len(_raw("nccl_data.json.gz")["traceEvents"])


def test_plain_json_reads_like_gz(tmp_path):
    p = tmp_path / "rank-0.json"
    p.write_bytes(gzip.decompress(vendored("sampled_rank-0.json.gz").read_bytes()))
    a, b = load_kineto(p).ranks[0], load_kineto(vendored("sampled_rank-0.json.gz")).ranks[0]
    assert (a.kernels, a.ops, a.steps) == (b.kernels, b.ops, b.steps)


# ----- errors: named, with the file and the event ----------------------------------------
def _plain(tmp_path):
    return gzip.decompress(vendored("sampled_rank-0.json.gz").read_bytes())


def test_truncated_json_names_the_file_and_the_last_event(tmp_path):
    p = tmp_path / "rank-0.json"
    p.write_bytes(_plain(tmp_path)[:50_000])
    with pytest.raises(
        TraceFormatError, match=r"rank-0\.json: malformed or truncated JSON after event #\d+"
    ):
        load_kineto(p)


def test_truncated_gzip_is_a_trace_format_error(tmp_path):
    p = tmp_path / "rank-0.json.gz"
    p.write_bytes(vendored("sampled_rank-0.json.gz").read_bytes()[:20_000])
    with pytest.raises(TraceFormatError, match="rank-0.json.gz"):
        load_kineto(p)


@pytest.mark.parametrize(
    "text, match",
    [
        ('{"schemaVersion": 1, "foo": [1, 2]}', "no 'traceEvents' list"),
        ("[1, 2, 3]", r"expected .\{. at the start \(a Chrome trace is a JSON object\)"),
        ('{"traceEvents": [{"name": "x"}]}', r"event #0 \('x'\) has no 'ph'"),
        (
            '{"traceEvents": [{"ph": "X", "name": "k", "ts": "soon", "dur": 1}]}',
            r"event #0 \('k'\) has ts='soon'",
        ),
        (
            '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": -2}]}',
            "dur=-2",
        ),
        ('{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 2, "args": 3}]}', "args=3"),
        ("not json at all", r"expected .\{. at the start"),
    ],
)
def test_foreign_or_malformed_files(tmp_path, text, match):
    p = tmp_path / "t.json"
    p.write_text(text)
    with pytest.raises(TraceFormatError, match=match) as e:
        load_kineto(p)
    assert str(p) in str(e.value)
    assert isinstance(e.value, ex.ExplorerError)


def test_bad_paths(tmp_path):
    with pytest.raises(TracesError, match="no such file"):
        load_kineto(tmp_path / "missing.json")
    with pytest.raises(TracesError, match="holds no"):
        load_kineto(tmp_path)
    with pytest.raises(TracesError, match="expected a file or folder path"):
        load_kineto(3)
    with pytest.raises(TracesError, match="progress"):
        load_kineto(vendored("cpu_only_rank-34.json.gz"), progress=5)


def test_two_files_of_one_rank_are_refused(tmp_path):
    shutil.copy(vendored("sampled_rank-0.json.gz"), tmp_path / "a_rank-0.json.gz")
    shutil.copy(vendored("sampled_rank-0.json.gz"), tmp_path / "b_rank-0.json.gz")
    with pytest.raises(TracesError, match="both hold rank 0"):
        load_kineto(tmp_path)


# ----- the incremental reader ------------------------------------------------------------
@pytest.mark.parametrize("chunk", [1, 7, 97, 4096])
def test_stream_reads_every_event_whatever_the_chunk(chunk):
    import io

    from explorer.traces.stream import read_document

    text = gzip.decompress(vendored("sampled_rank-0.json.gz").read_bytes()).decode()[:40_000]
    cut = text.rindex("}, {") + 1  # a prefix of whole events, closed again
    doc = text[:cut] + "]}"
    want = json.loads(doc)
    seen = []
    head = read_document(io.StringIO(doc), seen.append, chunk=chunk)
    assert seen == want["traceEvents"]
    assert head == {k: v for k, v in want.items() if k != "traceEvents"}


def test_stream_stops_at_a_malformed_event_without_reading_on():
    import io

    from explorer.traces.stream import StreamError, read_document

    class Counting(io.StringIO):
        reads = 0

        def read(self, n=-1):
            Counting.reads += 1
            return super().read(n)

    doc = '{"traceEvents": [{"ph": "X"}, {"ph": X}, ' + '{"ph": "M"}, ' * 10_000 + "{}]}"
    with pytest.raises(StreamError, match=r"malformed JSON in event #1") as e:
        read_document(Counting(doc), lambda ev: None, chunk=64)
    assert e.value.events == 1 and Counting.reads < 5
