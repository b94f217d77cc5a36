"""The counting passes of the graph's checks, compiled and split over the process's cores.

The invariants' (``checks.check_invariants``): ``np.bincount`` holds the GIL and first copies
int32 indices to a temporary of int64 (900 MB for the citations at 10M articles); these passes
count in place and release the GIL, so the invariants' scans run on every core a process may
use (``settings.usable_cores``: its CPU affinity, so a process pinned to one core runs them one
after another). A count is split by value range: each thread reads every value and counts
those in its range into its own slice of one output, so memory stays one output array
whatever the threads.

The recount's (``checks.recount``): the distinct citation pairs and (pmid, descriptor) pairs
of corpus rows streamed in PMID order (``PairCount``, ``CodePairCount``), a run of one PMID
at a time, one counter per PMID range and thread, the GIL released in the compiled loops.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pyarrow.compute as pc
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
    empty.flags.writeable = False  # typed as a mapped mask is: one compiled _count_range
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
def distinct_in_run(run: np.ndarray, k: int) -> int:
    """The distinct values among ``run[:k]`` (sorted in place when they do not ascend: an
    insertion sort for a short run, a reference list's length, 5x quicker than a sort call;
    numba's quicksort for a longer one: it costs about 1.1 CPU-s to compile once per
    checkout, but sorts a run of 65-194 values in 40 ns a value against 48 for a shell sort
    and 55 for a heap sort written out, on a fifth of the citation rows)."""
    for i in range(1, k):
        if run[i] <= run[i - 1]:
            if k > 64:
                run[:k].sort()
            else:
                for j in range(i, k):
                    v = run[j]
                    m = j - 1
                    while m >= 0 and run[m] > v:
                        run[m + 1] = run[m]
                        m -= 1
                    run[m + 1] = v
            n = 1
            for j in range(1, k):
                if run[j] != run[j - 1]:
                    n += 1
            return n
    return k  # the common case: ascending, no sort


@njit(nogil=True, cache=True)
def _kept(rows: np.ndarray, n: int, a: int, b: int) -> np.ndarray:
    """``rows`` with (a, b) as its row ``n`` (a copy twice as long when it is full)."""
    if n == rows.shape[0]:
        longer = np.empty((2 * rows.shape[0], 2), dtype=rows.dtype)
        # element by element: numba compiles a 2-d slice assignment in about 4.5 CPU-s
        for j in range(n):
            longer[j, 0] = rows[j, 0]
            longer[j, 1] = rows[j, 1]
        rows = longer
    rows[n, 0] = a
    rows[n, 1] = b
    return rows


@njit(nogil=True, cache=True)
def _pairs_in_runs(
    first: np.ndarray,
    second: np.ndarray,
    valid: np.ndarray,
    table: np.ndarray,
    lo: int,
    state: np.ndarray,
    run: np.ndarray,
    sampled: np.ndarray,
) -> tuple[int, np.ndarray, np.ndarray]:
    """One batch of ``PairCount.add``: the rows whose two values are both members of
    ``table`` (value v at v - lo, ``MEMBER``; ``valid``, when not empty, false for a row with
    a null) counted, and their distinct pairs, a run of one ``first`` value at a time; such
    a row with a ``SAMPLED`` value kept in ``sampled``. ``state`` is [rows inside, distinct
    pairs of the finished runs, the run's first value, its length, rows sampled], ``run``
    its second values so far (``run`` and ``sampled`` returned: longer copies when they
    fill). -1 as soon as ``first`` falls between two rows inside."""
    inside, pairs, prev, k, n = state[0], state[1], state[2], state[3], state[4]
    checked = valid.size > 0
    size = table.size
    for i in range(first.size):
        if checked and not valid[i]:
            continue
        a = first[i] - lo
        b = second[i] - lo
        if a < 0 or a >= size or b < 0 or b >= size:
            continue
        marks = table[a] | table[b]
        if not (table[a] & table[b] & 1):
            continue
        inside += 1
        if k and first[i] != prev:
            if first[i] < prev:
                return -1, run, sampled
            pairs += distinct_in_run(run, k)
            k = 0
        prev = first[i]
        if k == run.size:
            longer = np.empty(2 * run.size, dtype=run.dtype)
            for j in range(k):  # not a slice assignment: quicker to compile
                longer[j] = run[j]
            run = longer
        run[k] = second[i]
        k += 1
        if marks & 2:
            sampled = _kept(sampled, n, first[i], second[i])
            n += 1
    state[0], state[1], state[2], state[3], state[4] = inside, pairs, prev, k, n
    return 0, run, sampled


@njit(nogil=True, cache=True)
def _pairs_by_code(
    first: np.ndarray,
    valid: np.ndarray,
    code: np.ndarray,
    flag: np.ndarray,
    table: np.ndarray,
    lo: int,
    state: np.ndarray,
    counts: np.ndarray,
    sampled: np.ndarray,
) -> tuple[int, np.ndarray]:
    """One batch of ``CodePairCount.add``: for each row whose ``first`` is a member of
    ``table``, a new (first, code) pair counted in ``counts[1, code]`` when
    ``counts[0, code]`` (the last ``first`` seen with the code) is not this ``first`` yet,
    and in ``counts[3, code]`` the first time a row of the pair has ``flag`` (``counts[2]``
    the last ``first`` flagged). The rows come in runs of one ``first``, ascending, so the
    last ``first`` seen with a code tells a new pair from a repeat. A row of a ``SAMPLED``
    ``first`` kept in ``sampled`` (returned: a longer copy when it fills). ``state``: [the
    last first value, whether there was one, rows sampled]. -1 as soon as ``first``
    falls."""
    prev, started, n = state[0], state[1], state[2]
    checked = valid.size > 0
    size = table.size
    for i in range(first.size):
        if checked and not valid[i]:
            continue
        v = first[i]
        a = v - lo
        if a < 0 or a >= size or not (table[a] & 1):
            continue
        if started and v < prev:
            return -1, sampled
        prev, started = v, 1
        c = code[i]
        if counts[0, c] != v:
            counts[0, c] = v
            counts[1, c] += 1
        if flag[i] and counts[2, c] != v:
            counts[2, c] = v
            counts[3, c] += 1
        if table[a] & 2:
            sampled = _kept(sampled, n, v, np.int64(c))  # as _pairs_in_runs: one compile
            n += 1
    state[0], state[1], state[2] = prev, started, n
    return 0, sampled


# the widest PMID range a membership table marks (bytes); PubMed's is ~4e7
_TABLE_MAX = 1 << 28


MEMBER, SAMPLED = 1, 2  # the bits of a value in ``Members.table``


class Members:
    """The values of ``keep`` (ascending) as a table of one byte per value between its
    first and last (``MEMBER``; ``SAMPLED`` for those of ``sampled``, a few members whose
    rows the passes keep), which the passes below read from any thread; None from ``of``
    when that range is wider than ``_TABLE_MAX`` (the caller counts another way)."""

    def __init__(self, keep: np.ndarray, sampled: np.ndarray | None = None) -> None:
        self.lo = int(keep[0]) if keep.size else 0
        self.table = np.zeros(int(keep[-1]) - self.lo + 1 if keep.size else 0, dtype=np.uint8)
        self.table[keep - self.lo] = MEMBER
        if sampled is not None and sampled.size:
            self.table[sampled - self.lo] |= SAMPLED

    @classmethod
    def of(cls, keep: np.ndarray, sampled: np.ndarray | None = None) -> Members | None:
        if keep.size and int(keep[-1]) - int(keep[0]) >= _TABLE_MAX:
            return None
        return cls(keep, sampled)


def _int64(column) -> np.ndarray:
    return column.fill_null(0).to_numpy().astype(np.int64, copy=False)


def _valid(*columns) -> np.ndarray:
    """True for the rows with no null in ``columns`` (Arrow arrays or chunked arrays);
    empty when none has a null."""
    valid = np.zeros(0, dtype=np.bool_)
    for column in columns:
        if column.null_count:
            here = np.asarray(pc.is_valid(column))
            valid = here if valid.size == 0 else valid & here
    return valid


class PairCount:
    """Rows, rows whose two values are both members, and the distinct such pairs, of
    two-column integer Arrow batches given in order (``add``), whose first column ascends
    among the rows inside (a run of one value may span batches). Holds one run."""

    def __init__(self, members: Members) -> None:
        self.members = members
        self.rows = 0
        self.state = np.zeros(5, dtype=np.int64)
        self.run = np.empty(1024, dtype=np.int64)
        self.sampled = np.empty((256, 2), dtype=np.int64)
        self.failed = False

    def add(self, batch) -> bool:
        """Count one batch; False (and nothing more counted) once the order is broken."""
        if self.failed:
            return False
        self.rows += batch.num_rows
        first, second = batch.column(0), batch.column(1)
        status, self.run, self.sampled = _pairs_in_runs(
            _int64(first),
            _int64(second),
            _valid(first, second),
            self.members.table,
            self.members.lo,
            self.state,
            self.run,
            self.sampled,
        )
        self.failed = status < 0
        return not self.failed

    def sampled_rows(self) -> np.ndarray:
        """The rows inside with a ``SAMPLED`` value: (first, second), as read."""
        return self.sampled[: int(self.state[4])]

    def result(self) -> tuple[int, int, int] | None:
        """(rows, rows inside, distinct pairs inside); None when the order was broken."""
        if self.failed:
            return None
        inside, pairs, _, k, _ = (int(v) for v in self.state)
        return self.rows, inside, pairs + (distinct_in_run(self.run, k) if k else 0)


class CodePairCount:
    """Per code of ``n_codes``: the distinct (first, code) pairs whose first value is a
    member, and how many of them have a flagged row, of Arrow batches (an integer column,
    its codes, its flags: ``add``) whose first column ascends among the members."""

    def __init__(self, members: Members, n_codes: int) -> None:
        self.members = members
        self.state = np.zeros(3, dtype=np.int64)
        # the last first value seen with each code, its pairs, the last flagged, its flagged
        self.counts = np.zeros((4, n_codes), dtype=np.int64)
        self.counts[0] = self.counts[2] = np.iinfo(np.int64).min
        self.sampled = np.empty((256, 2), dtype=np.int64)
        self.failed = False

    @property
    def pairs(self) -> np.ndarray:
        return self.counts[1]

    @property
    def flagged(self) -> np.ndarray:
        return self.counts[3]

    def sampled_rows(self) -> np.ndarray:
        """The rows of a ``SAMPLED`` member: (first, code), as read."""
        return self.sampled[: int(self.state[2])]

    def add(self, first, codes: np.ndarray, flags: np.ndarray) -> bool:
        """Count one batch (``first`` an Arrow integer array or chunked array, ``codes`` and
        ``flags`` numpy arrays of its length); False once the order is broken."""
        if self.failed:
            return False
        status, self.sampled = _pairs_by_code(
            _int64(first),
            _valid(first),
            codes,
            flags,
            self.members.table,
            self.members.lo,
            self.state,
            self.counts,
            self.sampled,
        )
        self.failed = status < 0
        return not self.failed
