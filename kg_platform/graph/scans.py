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

from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
from numba import njit

from kg_platform.storage import mapped
from kg_platform.storage.mapped import release, windows


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


def value_counts(
    pool: ThreadPoolExecutor,
    parts: int,
    values: np.ndarray,
    n: int,
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """How often each of 0 .. n-1 occurs in ``values`` (where ``mask``), as
    ``np.bincount(values[mask], minlength=n)`` for values in range, counted on ``pool``:
    a window of ``values`` at a time (``mapped.windows``), each window split into ``parts``
    value ranges, and its pages dropped from memory once every range has read it
    (``mapped.release``: a memory-mapped array is held a window at a time, not whole)."""
    counts = np.zeros(n, dtype=np.int64)
    empty = np.zeros(0, dtype=np.bool_)
    ranges = _ranges(n, parts)
    for start, stop in windows(values.size, values.itemsize):
        window = values[start:stop]
        flags = empty if mask is None else mask[start:stop]
        jobs = [pool.submit(_count_range, window, flags, lo, counts[lo:hi]) for lo, hi in ranges]
        for job in jobs:
            job.result()
        release(values, start, stop)
        if mask is not None:
            release(mask, start, stop)
    return counts


def row_flag_counts(
    pool: ThreadPoolExecutor, parts: int, indptr: np.ndarray, flag: np.ndarray
) -> tuple[np.ndarray, list[Future[None]]]:
    """The set flags of each row of a CSR (``indptr``, ``flag``): the output, filled once
    the returned futures are done (``parts`` row ranges on ``pool``). Each range is read a
    window of whole rows at a time, about ``mapped.WINDOW_BYTES`` of ``flag`` (one row
    may be more), whose pages are dropped once counted (``mapped.release``)."""
    n = indptr.size - 1
    counts = np.zeros(max(n, 0), dtype=np.int64)
    step = max(1, mapped.WINDOW_BYTES // max(1, flag.itemsize))

    def one(lo: int, hi: int) -> None:
        # row cuts where the flags reach each further step past the range's first flag
        ends = np.arange(int(indptr[lo]) + step, int(indptr[hi]), step)
        cuts = np.unique(
            np.concatenate([[lo], lo + np.searchsorted(indptr[lo : hi + 1], ends), [hi]])
        )
        for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
            _row_flags(indptr, flag, a, counts[a:b])
            release(flag, int(indptr[a]), int(indptr[b]))
        release(indptr, lo, hi + 1)

    return counts, [pool.submit(one, lo, hi) for lo, hi in _ranges(n, parts)]


@njit(nogil=True, cache=True)
def _distinct_in_runs(first: np.ndarray, second: np.ndarray, upto: int) -> int:
    """The distinct (first, second) pairs among rows 0 .. upto - 1 when the rows come in
    runs of one ``first`` value, ascending; -1 when ``first`` falls anywhere."""
    n = 0
    i = 0
    while i < upto:
        j = i + 1
        while j < upto and first[j] == first[i]:
            j += 1
        if j < upto and first[j] < first[i]:
            return -1
        ascending = True
        for k in range(i + 1, j):
            if second[k] <= second[k - 1]:
                ascending = False
                break
        if ascending:  # the common case: no sort, no copy
            n += j - i
        else:
            run = np.sort(second[i:j])
            n += 1
            for k in range(1, run.size):
                if run[k] != run[k - 1]:
                    n += 1
        i = j
    return n


# the widest PMID range ``distinct_sorted_pairs`` marks in a table (bytes); PubMed's is ~4e7
_TABLE_MAX = 1 << 28


@njit(nogil=True, cache=True)
def _members(values: np.ndarray, table: np.ndarray, lo: int, mask: np.ndarray) -> None:
    """mask[i] &= values[i] is in the set whose member v has table[v - lo] set."""
    for i in range(values.size):
        v = values[i] - lo
        mask[i] = mask[i] and v >= 0 and v < table.size and table[v]


def distinct_sorted_pairs(batches, keep: np.ndarray) -> tuple[int, int, int] | None:
    """(rows, rows whose two values are both in ``keep`` (ascending), distinct such pairs)
    of a stream of two-column integer Arrow record batches whose first column ascends (a run
    of one value may span batches), in one pass that holds a batch and a run; None as soon
    as the first column falls, or ``keep`` spans more than ``_TABLE_MAX`` values (the caller
    counts another way). A null is in no ``keep``."""
    if keep.size and int(keep[-1]) - int(keep[0]) >= _TABLE_MAX:
        return None  # a table of every PMID between the two would not be small
    lo = int(keep[0]) if keep.size else 0
    table = np.zeros(int(keep[-1]) - lo + 1 if keep.size else 0, dtype=np.bool_)
    table[keep - lo] = True
    rows = inside = pairs = 0
    first = second = np.zeros(0, dtype=np.int64)
    for batch in batches:
        if batch.num_rows == 0:
            continue
        rows += batch.num_rows
        columns = []
        mask = np.ones(batch.num_rows, dtype=bool)
        for column in (batch.column(0), batch.column(1)):
            values = column.fill_null(0).to_numpy().astype(np.int64, copy=False)
            if column.null_count:
                mask &= column.is_valid().to_numpy(zero_copy_only=False)
            _members(values, table, lo, mask)
            columns.append(values)
        a, b = columns[0][mask], columns[1][mask]
        inside += a.size
        if a.size == 0:
            continue
        first, second = np.concatenate([first, a]), np.concatenate([second, b])
        # the last run may go on in the next batch: held back
        other = np.flatnonzero(first != first[-1])
        last = int(other[-1]) + 1 if other.size else 0
        counted = _distinct_in_runs(first, second, last)
        if counted < 0 or (last and first[last - 1] > first[last]):
            return None
        pairs += counted
        first, second = first[last:].copy(), second[last:].copy()
    if first.size:
        counted = _distinct_in_runs(first, second, first.size)
        if counted < 0:
            return None
        pairs += counted
    return rows, inside, pairs
