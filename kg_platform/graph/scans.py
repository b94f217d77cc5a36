"""The counting passes of the graph's invariants (``checks.check_invariants``), compiled and
split over the process's cores.

``np.bincount`` holds the GIL and first copies int32 indices to a temporary of int64 (900 MB
for the citations at 10M articles); these passes count in place and release the GIL, so the
invariants' scans run on every core a process may use (``settings.usable_cores``: its CPU affinity, so a
process pinned to one core runs them one after another). A count is split by value range:
each thread reads every value and counts those in its range into its own slice of one
output, so memory stays one output array whatever the threads.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def _count_range(values: np.ndarray, mask: np.ndarray, lo: int, counts: np.ndarray) -> None:
    """counts[v - lo] += 1 for each value v in lo .. lo + counts.size - 1 (where ``mask``,
    when it is not empty)."""
    size = counts.size
    masked = mask.size > 0
    for i in range(values.size):
        v = np.int64(values[i]) - lo
        if v >= 0 and v < size and (not masked or mask[i]):
            counts[v] += 1


@njit(nogil=True, cache=True)
def _row_flags(indptr: np.ndarray, flag: np.ndarray, lo: int, counts: np.ndarray) -> None:
    """counts[r - lo]: the set flags of row r, for the rows lo .. lo + counts.size - 1."""
    for r in range(counts.size):
        n = 0
        for j in range(indptr[lo + r], indptr[lo + r + 1]):
            n += flag[j]
        counts[r] = n


def _ranges(n: int, parts: int) -> list[tuple[int, int]]:
    cuts = np.linspace(0, n, max(1, min(parts, n)) + 1).astype(np.int64)
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def _split(
    pool: ThreadPoolExecutor, n: int, parts: int, one: Callable[[int, int], None]
) -> list[Future[None]]:
    return [pool.submit(one, lo, hi) for lo, hi in _ranges(n, parts)]


def value_counts(
    pool: ThreadPoolExecutor,
    parts: int,
    values: np.ndarray,
    n: int,
    mask: np.ndarray | None = None,
) -> tuple[np.ndarray, list[Future[None]]]:
    """How often each of 0 .. n-1 occurs in ``values`` (where ``mask``), as
    ``np.bincount(values[mask], minlength=n)`` for values in range: the output, filled once
    the returned futures are done (``parts`` value ranges on ``pool``)."""
    counts = np.zeros(n, dtype=np.int64)
    flags = np.zeros(0, dtype=np.bool_) if mask is None else mask

    def one(lo: int, hi: int) -> None:
        _count_range(values, flags, lo, counts[lo:hi])

    return counts, _split(pool, n, parts, one)


def row_flag_counts(
    pool: ThreadPoolExecutor, parts: int, indptr: np.ndarray, flag: np.ndarray
) -> tuple[np.ndarray, list[Future[None]]]:
    """The set flags of each row of a CSR (``indptr``, ``flag``): the output, filled once
    the returned futures are done."""
    n = indptr.size - 1
    counts = np.zeros(max(n, 0), dtype=np.int64)

    def one(lo: int, hi: int) -> None:
        _row_flags(indptr, flag, lo, counts[lo:hi])

    return counts, _split(pool, n, parts, one)
