"""Variants of one compiled signature under symbolic dims: which sentinel (prime, modulus)
or fixed size the next compilation uses after a shape guard failed (``_respecialise``), the
cache key of a variant (``_full_key``) and the ``bucket="pow2"`` policy (``bucket_of``).

A variant serves a class of sizes: the most general (prime sentinels) first, then, for each
guard a call failed, one that takes that call's decision (``B % 3 == 0``: a multiple of 3;
``B % 3 == 1``: a prime that is 1 mod 3), and only when no sentinel can (``B > 4`` for
``B = 2``) one compiled for the dim's size.
"""

from __future__ import annotations

import math

from .cache import CacheEntry
from .symbolic import MODULUS_BASE, TRACKED_MIN, evaluate

__all__ = ["bucket_of", "ALT_PRIME_START", "ALT_PRIMES"]

ALT_PRIME_START, ALT_PRIMES = 10007, 64  # sentinels tried after a shape guard fails


def _full_key(key: tuple, fixed: dict, moduli: dict, primes: dict) -> tuple:
    """The cache key of one variant of the signature ``key``."""
    moduli = {k: v for k, v in moduli.items() if k not in fixed and v > 1}
    primes = {k: v for k, v in primes.items() if k not in fixed}
    if primes:
        key += (("sentinel primes", tuple(sorted(primes.items()))),)
    if moduli:
        key += (("multiple of", tuple(sorted(moduli.items()))),)
    if fixed:
        key += (("fixed", tuple(sorted(fixed.items()))),)
    return key


def _respecialise(entry: CacheEntry, g, sizes: dict[str, int]):
    """How to compile again after the shape guard ``g`` of ``entry`` failed for ``sizes``:
    (fixed dims, moduli, primes, a phrase). For a guard on one dim: another sentinel prime
    that takes the decision this call needs (``B % 3 == 1``: a prime 1 mod 3), else the dim
    as a multiple of the smallest divisor of ``gcd(size, MODULUS_BASE)`` that does (``B``
    even); each serves a whole class of sizes. Otherwise the dims are fixed to their sizes."""
    names = {p: n for n, p in entry.symbols.items()}
    mine = [names[p] for p in sorted(g.symbols)]
    if len(mine) == 1:
        n = mine[0]
        s, m0 = entry.symbols[n], entry.moduli.get(n, 1)
        taken = set(entry.symbols.values())
        actual = {s: sizes[n]}
        # a small side (B % 3) must take this call's value, not just flip the decision
        small = [e for e in (g.left, g.right) if abs(evaluate(e, actual)) < TRACKED_MIN]
        for q in _primes_from(ALT_PRIME_START, ALT_PRIMES):
            trial = {s: q * m0}
            same = all(evaluate(e, trial) == evaluate(e, actual) for e in small)
            if q * m0 not in taken and same and not g.holds(trial):
                return (dict(entry.fixed), entry.moduli, entry.primes | {n: q},
                        f"captured again with sentinel {q * m0} for {n}")  # fmt: skip
        g_n = math.gcd(sizes[n], MODULUS_BASE)
        for m in (k for k in range(2, g_n + 1) if g_n % k == 0 and k != m0):
            if not g.holds({s: s // m0 * m}):
                what = f"{n} a multiple of {m}"
                return (dict(entry.fixed), entry.moduli | {n: m}, entry.primes,
                        f"captured again with {what}")  # fmt: skip
    fixed = dict(entry.fixed) | {n: sizes[n] for n in mine}
    how = "compiled with " + ", ".join(f"{n}={sizes[n]}" for n in mine)
    return fixed, entry.moduli, entry.primes, how


def _primes_from(start: int, count: int):
    p, k = start, 0
    while k < count:
        if all(p % d for d in range(2, int(p**0.5) + 1)):
            yield p
            k += 1
        p += 1


def _least_divisor(m: int) -> int:
    return next(k for k in range(2, m + 1) if m % k == 0)


def bucket_of(d: int) -> int:
    """The ``bucket="pow2"`` bucket of a size: the smallest power of two >= it (0 for 0)."""
    return 0 if d <= 0 else 1 << (d - 1).bit_length()
