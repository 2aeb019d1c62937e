"""``read_json``: one careful reader for the JSON files the explorer loads.

Model files, Hugging Face ``config.json`` files and hardware profiles all go through it, so
every loader reports the same problems the same way, with the file named: a missing path, a
directory, an unreadable file, a file too large to be a config, bytes that are not UTF-8,
nesting deeper than any config needs (Python's reader would raise ``RecursionError``),
malformed JSON and duplicate keys (JSON keeps the last one silently).

>>> import tempfile, pathlib
>>> from explorer.errors import ExplorerError
>>> p = pathlib.Path(tempfile.mkdtemp()) / "x.json"
>>> _ = p.write_text('{"a": 1, "a": 2}')
>>> try:
...     read_json(p, ExplorerError, "model file")
... except ExplorerError as e:
...     print(str(e).split(": ", 1)[1])
key 'a' appears twice in one object; keep one
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ExplorerError

__all__ = ["MAX_JSON_BYTES", "MAX_JSON_DEPTH", "as_path", "read_json"]

#: Largest file read as a config (bytes); the zoo's files are a few kB. Raise it by
#: assigning ``explorer.jsonfile.MAX_JSON_BYTES``.
MAX_JSON_BYTES = 16 * 2**20
#: Deepest nesting of arrays/objects accepted; configs nest 3 levels. Raise it by
#: assigning ``explorer.jsonfile.MAX_JSON_DEPTH`` (Python's own reader stops near 1000).
MAX_JSON_DEPTH = 64

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


def as_path(path: Any, error: type[ExplorerError], what: str) -> Path:
    """``path`` as a ``Path``; anything else (None, a number) raises ``error``."""
    if isinstance(path, str | os.PathLike) and not isinstance(path, bytes):
        text = os.fspath(path)
        if isinstance(text, str) and text and "\0" not in text:
            return Path(text)
    raise error(
        f"{what} path {path!r} is not a file path; give a str or pathlib.Path naming a JSON file"
    )


def read_json(path: Any, error: type[ExplorerError], what: str) -> Any:
    """The parsed JSON value of the file ``path``; every problem raises ``error`` naming it.

    Args:
        path: the file (str or ``PathLike``).
        error: the area's exception class (``ModelConfigError``, ``HardwareError``, ...).
        what: what the file is, for messages: ``"model file"``, ``"hardware profile"``.
    """
    path = as_path(path, error, what)
    try:
        if path.is_dir():
            raise error(f"{path}: is a directory; expected a {what} (a JSON file)")
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise error(
                f"{path}: {size:,} bytes is larger than MAX_JSON_BYTES={MAX_JSON_BYTES:,} for a "
                f"{what}; check the file, or raise explorer.jsonfile.MAX_JSON_BYTES"
            )
        data = path.read_bytes()
    except FileNotFoundError:
        raise error(f"{path}: cannot read the {what}: no such file") from None
    except OSError as err:
        raise error(f"{path}: cannot read the {what} ({err.strerror or err})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise error(
            f"{path}: byte {err.start} (0x{data[err.start]:02x}) is not UTF-8; a {what} must be "
            "UTF-8 text (re-save it as UTF-8)"
        ) from None
    depth = _depth(data)
    if depth > MAX_JSON_DEPTH:
        raise error(
            f"{path}: JSON nested {depth} levels deep, more than MAX_JSON_DEPTH={MAX_JSON_DEPTH}; "
            f"a {what} nests a few levels (raise explorer.jsonfile.MAX_JSON_DEPTH if needed)"
        )
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as err:
        raise error(
            f"{path}: malformed JSON at line {err.lineno} column {err.colno}: {err.msg}"
        ) from None
    except _DuplicateKey as err:
        raise error(f"{path}: key {err.args[0]!r} appears twice in one object; keep one") from None


class _DuplicateKey(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _depth(data: bytes) -> int:
    """Deepest bracket nesting outside string literals (an upper bound when malformed)."""
    codes = np.frombuffer(_STRING.sub(b'""', data), dtype=np.uint8)
    if codes.size == 0:
        return 0
    step = np.isin(codes, (ord("["), ord("{"))).astype(np.int64)
    step -= np.isin(codes, (ord("]"), ord("}")))
    return int(np.cumsum(step).max(initial=0))
