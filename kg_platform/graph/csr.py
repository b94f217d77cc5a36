"""The passes of the CSR build that numpy would make several times, fused and compiled.

An edge kind is one int64 key per row: the row index in the high 32 bits, the column in the
low 32 (``column << 1 | flag`` for a flagged kind). ``map_pairs`` / ``map_flagged`` map a
batch's PMIDs to node indices and pack its keys in one pass. The keys are sorted by numpy
(its vectorised 64-bit sort beat every counting scatter tried on this machine: a scatter
is a cache miss per edge, 3x the sort's time per key); keys whose rows already ascend, as
the fold writes them, are sorted a cache-sized run of rows at a time (``sort_keys``). The
build (``build._fused_csr``) cuts the keys into chunks of whole rows, one per thread:
``count_distinct`` sizes each chunk's share of the forward arrays, ``cut_range`` writes it
and re-packs the chunk's keys reversed over its own front (the COO lives in one buffer from
reading to the last cut), and once each chunk's reversed keys are sorted, ``merge_cut``
makes the reverse arrays of one column range from every chunk's run.

Every kernel releases the GIL (two edge kinds are built on two threads) and is cached on
disk after its first compilation.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_LOW = 0xFFFFFFFF
# keys per run of whole rows sorted at a time when the rows already ascend: 1 MiB, in cache
SORT_RUN = 1 << 17


@njit(nogil=True, cache=True)
def map_pairs(
    lut: np.ndarray, sources: np.ndarray, targets: np.ndarray, keys: np.ndarray, filled: int
) -> tuple[int, int, int]:
    """Node indices of each (source, target) PMID pair through ``lut`` (``take`` in clip
    mode); a pair whose target is not a node is dropped, the others are packed
    ``source << 32 | target`` into ``keys`` from ``filled``.

    Returns (filled, dropped, position of the first source that is not a node or -1)."""
    top = lut.size - 1
    dropped = 0
    for i in range(sources.size):
        s = min(max(sources[i], 0), top)
        src = lut[s]
        if src < 0:
            return filled, dropped, i
        t = min(max(targets[i], 0), top)
        dst = lut[t]
        if dst < 0:
            dropped += 1
            continue
        keys[filled] = (np.int64(src) << 32) | dst
        filled += 1
    return filled, dropped, -1


@njit(nogil=True, cache=True)
def map_flagged(
    lut: np.ndarray,
    pmids: np.ndarray,
    codes: np.ndarray,
    code_ids: np.ndarray,
    flag_a: np.ndarray,
    flag_b: np.ndarray,
    keys: np.ndarray,
    filled: int,
) -> tuple[int, int]:
    """Key ``lut[pmid] << 32 | code_ids[code] << 1 | (flag_a | flag_b)`` of every entry,
    packed into ``keys`` from ``filled``.

    Returns (filled, position of the first PMID that is not a node or -1)."""
    top = lut.size - 1
    for i in range(pmids.size):
        row = lut[min(max(pmids[i], 0), top)]
        if row < 0:
            return filled, i
        low = (np.int64(code_ids[codes[i]]) << 1) | ((flag_a[i] | flag_b[i]) & 1)
        keys[filled] = (np.int64(row) << 32) | low
        filled += 1
    return filled, -1


@njit(nogil=True, cache=True)
def renumber_flagged(keys: np.ndarray, new_id: np.ndarray) -> None:
    """Low halves ``column << 1 | flag`` -> ``new_id[column] << 1 | flag``, in place."""
    for i in range(keys.size):
        k = keys[i]
        low = k & _LOW
        keys[i] = (k & ~np.int64(_LOW)) | (np.int64(new_id[low >> 1]) << 1) | (low & 1)


@njit(nogil=True, cache=True)
def rows_ascend(keys: np.ndarray) -> bool:
    """Whether the rows (high halves) of ``keys`` never decrease."""
    for j in range(1, keys.size):  # noqa: SIM110 (a loop numba compiles, not a generator)
        if (keys[j] >> 32) < (keys[j - 1] >> 32):
            return False
    return True


def sort_keys(keys: np.ndarray) -> None:
    """Sort ``keys`` in place. When their rows already ascend (the fold writes a child
    table ordered by PMID), only each row's columns are out of order: runs of whole rows of
    about ``SORT_RUN`` keys are sorted one at a time, in cache (1.4x faster than one sort of
    the whole array here, and the same order)."""
    if not rows_ascend(keys):
        keys.sort()
        return
    n = keys.size
    start = 0
    while start < n:
        stop = min(start + SORT_RUN, n)
        if stop < n:  # on to the end of the row the run stops in
            next_row = ((keys[stop - 1] >> 32) + 1) << 32
            stop = start + int(np.searchsorted(keys[start:], next_row))
        keys[start:stop].sort()
        start = stop


# -- the cut, a chunk or a column range per thread (``build._fused_csr``) ----------------


@njit(nogil=True, cache=True)
def move_down(keys: np.ndarray, src: int, dst: int, n: int) -> None:
    """keys[dst : dst + n] = keys[src : src + n] for ``dst <= src`` (no temporary)."""
    for j in range(n):
        keys[dst + j] = keys[src + j]


@njit(nogil=True, cache=True)
def count_distinct(keys: np.ndarray, flag_bits: int) -> int:
    """The distinct (row, column) pairs of ascending ``keys``."""
    n = keys.size
    kept = 0
    for j in range(n):
        if j + 1 < n and (keys[j + 1] >> flag_bits) == (keys[j] >> flag_bits):
            continue
        kept += 1
    return kept


@njit(nogil=True, cache=True)
def cut_range(
    keys: np.ndarray,
    flag_bits: int,
    counts: np.ndarray,
    indices: np.ndarray,
    flag: np.ndarray,
    out: int,
) -> int:
    """One pass over one chunk of whole rows (``keys``, ascending): drop each key whose next
    one has the same row and column (the last of a run is kept: the flagged one, if any),
    write the kept entries' columns (and flags when ``flag_bits``) at ``indices[out:]``, add
    each kept entry to ``counts[row + 1]`` (the caller sums them into the indptr), and
    re-pack each kept key reversed (``column << 32 | row << flag_bits | flag``) over the
    chunk's front, which this pass has already read. Returns how many were kept."""
    n = keys.size
    kept = 0
    for j in range(n):
        k = keys[j]
        if j + 1 < n and (keys[j + 1] >> flag_bits) == (k >> flag_bits):
            continue
        row = k >> 32
        low = k & _LOW
        column = low >> flag_bits
        f = low & 1
        indices[out + kept] = column
        if flag_bits:
            flag[out + kept] = f == 1
        counts[row + 1] += 1
        keys[kept] = (column << 32) | (row << flag_bits) | (f if flag_bits else 0)
        kept += 1
    return kept


@njit(nogil=True, cache=True)
def merge_cut(
    keys: np.ndarray,
    starts: np.ndarray,
    stops: np.ndarray,
    flag_bits: int,
    counts: np.ndarray,
    indices: np.ndarray,
    flag: np.ndarray,
    flag_counts: np.ndarray,
    out: int,
) -> int:
    """The CSR entries of the keys merged from the ascending runs ``keys[starts[i]:stops[i]]``
    (all distinct, the caller's column range of each run): entries written at ``indices[out:]`` in merged order, each row's count added
    to ``counts[row + 1]`` and, when ``flag_bits``, its flagged entries to
    ``flag_counts[row]``. Returns how many were written."""
    k = starts.size
    pos = starts.copy()
    written = 0
    while True:
        best = -1
        best_key = np.int64(0)
        for i in range(k):
            if pos[i] < stops[i]:
                v = keys[pos[i]]
                if best < 0 or v < best_key:
                    best = i
                    best_key = v
        if best < 0:
            break
        pos[best] += 1
        row = best_key >> 32
        low = best_key & _LOW
        indices[out + written] = low >> flag_bits
        counts[row + 1] += 1
        if flag_bits:
            f = low & 1
            flag[out + written] = f == 1
            flag_counts[row] += f
        written += 1
    return written


# -- patching the previous build's arrays (kg_platform.graph.patch) -----------------------


# a run of a column map whose columns are dropped (``segments``)
DROPPED = -(1 << 62)
# columns per block of the runs' lookup table (``segments``)
BLOCK_BITS = 6


def segments(col_map: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``col_map`` (new column of each old one, -1 to drop it) as runs of old columns that
    move by the same amount: the first column of each run (ascending), its move
    (``DROPPED`` for a run of dropped columns), and the run holding the first column of
    each block of ``1 << BLOCK_BITS`` columns. An update moves runs of millions of columns
    by one amount: the block table (one int32 per 64 columns) stays in cache where the map
    (one int64 per column) would miss on every random column."""
    delta = np.where(col_map >= 0, col_map - np.arange(col_map.size), DROPPED)
    starts = np.flatnonzero(delta[1:] != delta[:-1]) + 1
    starts = np.concatenate([np.zeros(1, dtype=np.int64), starts]).astype(np.int64)
    firsts = np.arange(0, max(col_map.size, 1), 1 << BLOCK_BITS)
    block_run = (np.searchsorted(starts, firsts, side="right") - 1).astype(np.int32)
    return starts, delta[starts].astype(np.int64), block_run


@njit(nogil=True, cache=True)
def patch_rows(
    old_indptr: np.ndarray,
    old_indices: np.ndarray,
    old_flag: np.ndarray,
    row_src: np.ndarray,
    starts: np.ndarray,
    moves: np.ndarray,
    block_run: np.ndarray,
    extra: np.ndarray,
    flag_bits: int,
    indptr: np.ndarray,
    indices: np.ndarray,
    flag: np.ndarray,
    flag_counts: np.ndarray,
) -> int:
    """One direction of an edge kind from the previous build's: new row ``i`` holds the
    entries of old row ``row_src[i]`` (none when -1), their columns moved by the runs
    ``starts`` / ``moves`` / ``block_run`` (``segments``; dropped in a DROPPED run), merged
    with the entries of row ``i`` in ``extra`` (ascending keys ``row << 32 | column <<
    flag_bits | flag``). Writes ``indptr`` (its first entry zero), ``indices``, and when
    ``flag_bits`` the flags and the flagged entries per row (``flag_counts``, zeros on
    entry).

    Returns the entries written; -(row + 1) when a row gets the same column from both sides
    or out of order, -(rows + 1) when ``extra`` holds a row past the last."""
    n_extra = extra.size
    n_runs = starts.size
    e = 0
    kept = 0
    for i in range(row_src.size):
        j = row_src[i]
        p = old_indptr[j] if j >= 0 else 0
        stop = old_indptr[j + 1] if j >= 0 else 0
        last = -1
        while True:
            a = -1
            while p < stop:
                c = old_indices[p]
                run = block_run[c >> BLOCK_BITS]
                while run + 1 < n_runs and starts[run + 1] <= c:
                    run += 1
                if moves[run] != DROPPED:
                    a = c + moves[run]
                    break
                p += 1
            b = -1
            if e < n_extra and (extra[e] >> 32) == i:
                b = (extra[e] & _LOW) >> flag_bits
            if a < 0 and b < 0:
                break
            if b < 0 or (a >= 0 and a < b):
                column = a
                f = old_flag[p] if flag_bits else False
                p += 1
            elif a < 0 or b < a:
                column = b
                f = (extra[e] & 1) == 1 if flag_bits else False
                e += 1
            else:
                return -(i + 1)
            if column <= last:
                return -(i + 1)
            last = column
            indices[kept] = column
            if flag_bits:
                flag[kept] = f
                if f:
                    flag_counts[i] += 1
            kept += 1
        indptr[i + 1] = kept
    if e != n_extra:
        return -(row_src.size + 1)
    return kept


@njit(nogil=True, cache=True)
def changed_citations(
    citing: np.ndarray,
    cited: np.ndarray,
    changed: np.ndarray,
    touched: np.ndarray,
    out_citing: np.ndarray,
    out_cited: np.ndarray,
    filled: int,
) -> int:
    """The rows whose cited PMID is marked in ``changed`` (a table by PMID: non-zero for a
    PMID that came or went) and whose citing PMID is not marked in ``touched``, appended to
    ``out_citing`` / ``out_cited`` from ``filled`` (each at least as long as the batch past
    it). Returns the new fill."""
    top_changed = changed.size - 1
    top_touched = touched.size - 1
    for i in range(cited.size):
        if changed[min(max(cited[i], 0), top_changed)] == 0:
            continue
        if touched[min(max(citing[i], 0), top_touched)] != 0:
            continue
        out_citing[filled] = citing[i]
        out_cited[filled] = cited[i]
        filled += 1
    return filled


def reversed_keys(keys: np.ndarray, flag_bits: int) -> np.ndarray:
    """``row << 32 | column << flag_bits | flag`` turned to ``column << 32 | row << ...``,
    ascending."""
    rows, low = keys >> 32, keys & _LOW
    flag = low & 1 if flag_bits else 0
    turned = ((low >> flag_bits) << 32) | (rows << flag_bits) | flag
    turned.sort()
    return turned


def distinct_last(keys: np.ndarray, flag_bits: int) -> np.ndarray:
    """Sorted keys, one per (row, column): the last of each run (the flagged one)."""
    keys = np.sort(keys)
    if keys.size == 0:
        return keys
    last = np.ones(keys.size, dtype=bool)
    last[:-1] = (keys[1:] >> flag_bits) != (keys[:-1] >> flag_bits)
    return keys[last]
