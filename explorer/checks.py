"""Argument checks shared by the whole core: "an int, not a bool, >= 1" written once.

Every area raises its own :class:`~explorer.errors.ExplorerError` subclass, so each check takes
the caller's error class. The message names the value, the reason and the fix::

    {name} must be {requirement}, got {value!r}; {fix}

Two forms:

- the raising checks (:func:`positive_int`, :func:`nonnegative_int`, :func:`int_at_least`,
  :func:`positive_number`, :func:`nonnegative_number`, :func:`fraction`) return the value as
  a plain ``int`` or ``float``;
- the predicates (:func:`is_int`, :func:`is_number`) answer ``True`` / ``False`` for call sites
  whose message has another shape (a JSON reader's field path, a list of wrong fields).

A ``bool`` is never a number here (``True`` would otherwise pass as ``1``). NumPy scalars pass
only with ``numpy=True``: by default an int is a Python ``int`` and a number a Python ``int``
or ``float`` (``np.float64`` is a ``float``), so values stored in frozen dataclasses stay plain
and JSON-serialisable.

>>> from explorer.errors import ExplorerError
>>> positive_int(8, "batch", error=ExplorerError)
8
>>> positive_int(True, "batch", error=ExplorerError, fix="pass batch=8")
Traceback (most recent call last):
...
explorer.errors.ExplorerError: batch must be a positive int, got True; pass batch=8
>>> fraction(1.5, "bandwidth_fraction", error=ExplorerError)
Traceback (most recent call last):
...
explorer.errors.ExplorerError: bandwidth_fraction must be a number in [0, 1], got 1.5
>>> is_int(0, minimum=1), is_number(2.5, minimum=0)
(False, True)
"""

from __future__ import annotations

import math
import numbers

from .errors import ExplorerError

__all__ = [
    "is_int",
    "is_number",
    "int_at_least",
    "positive_int",
    "nonnegative_int",
    "positive_number",
    "nonnegative_number",
    "number_at_least",
    "fraction",
]


def is_int(
    value: object, *, minimum: int | None = None, maximum: int | None = None, numpy: bool = False
) -> bool:
    """Whether ``value`` is an int (not a bool) within ``[minimum, maximum]``.

    Args:
        value: the value to test.
        minimum: the smallest value allowed (inclusive), or None for no lower bound.
        maximum: the largest value allowed (inclusive), or None for no upper bound.
        numpy: also accept NumPy integer scalars (any ``numbers.Integral``).

    >>> is_int(3, minimum=1), is_int(True), is_int(2.0), is_int(-1, minimum=0)
    (True, False, False, False)
    """
    if type(value) is not int:  # the common case first: this runs for every tensor dim
        kind = numbers.Integral if numpy else int
        if isinstance(value, bool) or not isinstance(value, kind):
            return False
    if minimum is not None and value < minimum:
        return False
    return maximum is None or value <= maximum


def is_number(
    value: object,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    finite: bool = True,
    numpy: bool = False,
) -> bool:
    """Whether ``value`` is a real number (not a bool) within the bounds given.

    Args:
        value: the value to test.
        minimum: the smallest value allowed (inclusive), or None.
        maximum: the largest value allowed (inclusive), or None.
        above: a value that ``value`` must exceed (exclusive lower bound), or None.
        finite: refuse ``inf`` and ``nan`` (``nan`` fails every bound anyway).
        numpy: also accept NumPy scalars (any ``numbers.Real``); by default only ``int`` and
            ``float`` (``np.float64`` is a ``float``).

    >>> is_number(0.5, minimum=0, maximum=1), is_number(float("inf")), is_number(False)
    (True, False, False)
    >>> is_number(0.0, above=0), is_number(float("inf"), minimum=1, finite=False)
    (False, True)
    """
    kind = numbers.Real if numpy else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind):
        return False
    if math.isnan(value) or (finite and not math.isfinite(value)):
        return False
    if minimum is not None and not value >= minimum:
        return False
    if maximum is not None and not value <= maximum:
        return False
    return above is None or value > above


def _fail(
    value: object, name: str, requirement: str, error: type[ExplorerError], fix: str
) -> ExplorerError:
    tail = f"; {fix}" if fix else ""
    return error(f"{name} must be {requirement}, got {value!r}{tail}")


def int_at_least(
    value: object,
    minimum: int,
    name: str,
    *,
    error: type[ExplorerError],
    fix: str = "",
    numpy: bool = False,
) -> int:
    """``value`` as a plain int if it is an int (not a bool) ``>= minimum``; else raise.

    Args:
        value: the value to check.
        minimum: the smallest value allowed.
        name: how the message names the value (``"Cluster 'x': chips_per_node"``).
        error: the caller's error class, raised on a bad value.
        fix: what to do instead, appended after ``"; "``.
        numpy: also accept NumPy integer scalars.

    >>> int_at_least(2, 2, "count", error=ExplorerError)
    2
    >>> int_at_least(1, 2, "count", error=ExplorerError)
    Traceback (most recent call last):
    ...
    explorer.errors.ExplorerError: count must be an int >= 2, got 1
    """
    if not is_int(value, minimum=minimum, numpy=numpy):
        raise _fail(value, name, f"an int >= {minimum}", error, fix)
    return int(value)  # type: ignore[call-overload]


def positive_int(
    value: object, name: str, *, error: type[ExplorerError], fix: str = "", numpy: bool = False
) -> int:
    """``value`` as a plain int if it is an int (not a bool) ``>= 1``; else raise ``error``.

    >>> import numpy as np
    >>> positive_int(np.int64(4), "seq", error=ExplorerError, numpy=True)
    4
    >>> positive_int(np.int64(4), "seq", error=ExplorerError)
    Traceback (most recent call last):
    ...
    explorer.errors.ExplorerError: seq must be a positive int, got np.int64(4)
    """
    if not is_int(value, minimum=1, numpy=numpy):
        raise _fail(value, name, "a positive int", error, fix)
    return int(value)  # type: ignore[call-overload]


def nonnegative_int(
    value: object, name: str, *, error: type[ExplorerError], fix: str = "", numpy: bool = False
) -> int:
    """``value`` as a plain int if it is an int (not a bool) ``>= 0``; else raise ``error``.

    >>> nonnegative_int(-1, "seed", error=ExplorerError, fix="use a seed >= 0")
    Traceback (most recent call last):
    ...
    explorer.errors.ExplorerError: seed must be a non-negative int, got -1; use a seed >= 0
    """
    if not is_int(value, minimum=0, numpy=numpy):
        raise _fail(value, name, "a non-negative int", error, fix)
    return int(value)  # type: ignore[call-overload]


def positive_number(
    value: object, name: str, *, error: type[ExplorerError], fix: str = "", numpy: bool = False
) -> float:
    """``value`` as a float if it is a finite real number (not a bool) ``> 0``; else raise.

    >>> positive_number(2, "bandwidth", error=ExplorerError)
    2.0
    >>> positive_number(float("nan"), "bandwidth", error=ExplorerError, fix="give bytes/s")
    Traceback (most recent call last):
    ...
    explorer.errors.ExplorerError: bandwidth must be a positive finite number, got nan; give bytes/s
    """
    if not is_number(value, above=0, numpy=numpy):
        raise _fail(value, name, "a positive finite number", error, fix)
    return float(value)  # type: ignore[arg-type]


def nonnegative_number(
    value: object, name: str, *, error: type[ExplorerError], fix: str = "", numpy: bool = False
) -> float:
    """``value`` as a float if it is a finite real number (not a bool) ``>= 0``; else raise.

    >>> nonnegative_number(0, "latency_s", error=ExplorerError)
    0.0
    """
    if not is_number(value, minimum=0, numpy=numpy):
        raise _fail(value, name, "a non-negative finite number", error, fix)
    return float(value)  # type: ignore[arg-type]


def number_at_least(
    value: object,
    minimum: float,
    name: str,
    *,
    error: type[ExplorerError],
    fix: str = "",
    numpy: bool = False,
) -> float:
    """``value`` as a float if it is a finite real number (not a bool) ``>= minimum``.

    >>> number_at_least(0.5, 1, "oversubscription", error=ExplorerError, fix="1 = non-blocking")
    Traceback (most recent call last):
    ...
    explorer.errors.ExplorerError: oversubscription must be a finite number >= 1, got 0.5; 1 = non-blocking
    """
    if not is_number(value, minimum=minimum, numpy=numpy):
        raise _fail(value, name, f"a finite number >= {minimum:g}", error, fix)
    return float(value)  # type: ignore[arg-type]


def fraction(
    value: object, name: str, *, error: type[ExplorerError], fix: str = "", numpy: bool = False
) -> float:
    """``value`` as a float if it is a real number (not a bool) in ``[0, 1]``; else raise.

    >>> fraction(1, "bandwidth_fraction", error=ExplorerError)
    1.0
    """
    if not is_number(value, minimum=0, maximum=1, numpy=numpy):
        raise _fail(value, name, "a number in [0, 1]", error, fix)
    return float(value)  # type: ignore[arg-type]
