"""An incremental reader for Chrome-trace JSON: the top-level object's fields are decoded one
at a time, and the ``traceEvents`` list one event at a time, from a text stream read in
chunks (plain or gzip), so a file of any size is never held whole.

Each value is decoded by the standard library's C decoder (``json.JSONDecoder.raw_decode``)
from a buffer of at most a chunk plus one value; a value cut by the chunk's end is decoded
again once the next chunk is read. A value that does not parse with more input still to come
is malformed (named with its position); one that does not parse at the end of the input is
truncated.

>>> import io
>>> doc = '{"schemaVersion": 1, "traceEvents": [{"ph": "X"}, {"ph": "M"}], "traceName": "t"}'
>>> seen = []
>>> read_document(io.StringIO(doc), seen.append, chunk=8)
{'schemaVersion': 1, 'traceName': 't'}
>>> seen
[{'ph': 'X'}, {'ph': 'M'}]
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

__all__ = ["read_document", "StreamError", "CHUNK"]

CHUNK = 1 << 22  # characters read at a time
MAX_VALUE = 1 << 28  # one event (or header field) larger than this is not a trace's
_SKIP = re.compile(r"[\s,]*")
_WS = re.compile(r"\s*")
_DECODER = json.JSONDecoder()


class StreamError(Exception):
    """The text is not a readable JSON object of the expected shape; ``events`` counts the
    trace events decoded before the problem."""

    def __init__(self, message: str, events: int):
        super().__init__(message)
        self.events = events


class _Buffer:
    def __init__(self, f, chunk: int):
        self.f, self.chunk = f, chunk
        self.buf, self.pos, self.eof = "", 0, False
        self.events = 0

    def more(self) -> bool:
        """Append the next chunk (dropping what was consumed); False at the end."""
        if self.eof:
            return False
        data = self.f.read(self.chunk)
        if not data:
            self.eof = True
            return False
        self.buf = self.buf[self.pos :] + data
        self.pos = 0
        return True

    def skip(self, pattern: re.Pattern[str]) -> str:
        """Skip ``pattern`` and return the next character ('' at the end of the input)."""
        while True:
            self.pos = pattern.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return ""

    def value(self, what: str):
        """Decode the JSON value at the position, reading more input while it is cut."""
        while True:
            try:
                obj, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                cut = e.pos >= len(self.buf) - 1 or e.msg.startswith("Unterminated string")
                if cut and len(self.buf) - self.pos <= MAX_VALUE and self.more():
                    continue
                where = "truncated" if self.eof else "malformed"
                raise StreamError(f"{where} JSON in {what}: {e.msg}", self.events) from None
            self.pos = end
            return obj

    def expect(self, char: str, what: str, pattern: re.Pattern[str] = _WS) -> None:
        got = self.skip(pattern)
        if got != char:
            found = repr(got) if got else "the end of the input (truncated)"
            raise StreamError(f"expected {char!r} {what}, found {found}", self.events)
        self.pos += 1


def read_document(
    f,
    on_event: Callable[[object], None],
    *,
    key: str = "traceEvents",
    chunk: int = CHUNK,
    progress: Callable[[int], None] | None = None,
    every: int = 200_000,
) -> dict:
    """Read the JSON object in the text stream ``f``: call ``on_event`` with each element of
    its ``key`` list, in order, and return its other fields (``key`` absent from the result;
    ``{key: None}`` added when the object has no such list). ``progress(events)`` is called
    every ``every`` events.

    Raises:
        StreamError: not an object, malformed or truncated JSON, ``key`` not a list.
    """
    b = _Buffer(f, chunk)
    b.expect("{", "at the start (a Chrome trace is a JSON object)")
    out: dict = {}
    seen_key = False
    while True:
        c = b.skip(_SKIP)
        if c == "}":
            break
        if c != '"':
            found = repr(c) if c else "the end of the input (truncated)"
            raise StreamError(f"expected a field name, found {found}", b.events)
        name = b.value("a field name")
        b.expect(":", f"after the field name {name!r}")
        if name != key:
            b.skip(_WS)
            out[name] = b.value(f"the field {name!r}")
            continue
        seen_key = True
        b.expect("[", f"to open the {key!r} list")
        while True:
            c = b.skip(_SKIP)
            if c == "]":
                b.pos += 1
                break
            if not c:
                raise StreamError(f"the {key!r} list is not closed (truncated)", b.events)
            on_event(b.value(f"event #{b.events}"))
            b.events += 1
            if progress is not None and b.events % every == 0:
                progress(b.events)
    if not seen_key:
        out[key] = None
    return out
