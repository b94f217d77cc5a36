"""The numpy passes the graph build made its CSR arrays with before the compiled ones
(``kg_platform.graph.csr``): sort, de-duplicate, cut, re-pack reversed, sort, cut. Kept
only as the reference the fused build is tested (test_build_fused) and benchmarked
(benchmarks/graph.py) against: the same bytes. ``sorting_csr`` takes the place of
``build._make_csr``."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import numpy as np

from kg_platform.graph import layout
from kg_platform.graph.arrays import ArrayWriter, Clock
from kg_platform.graph.build import _Built, _key_range

# which uint32 of an int64 key holds its low / high half
_LOW, _HIGH = (0, 1) if sys.byteorder == "little" else (1, 0)


def sorting_csr(
    keys: np.ndarray,
    n_rows: int,
    n_cols: int,
    kind: layout.EdgeKind,
    out: ArrayWriter,
    clock: Clock,
    label: str,
) -> _Built:
    """The same arrays as ``build._fused_csr``, in numpy passes."""
    keys = _sort_and_dedup(keys, flag_bits=1 if kind.flagged else 0)
    clock.lap(f"{label}: sort, dedup")
    fwd, _ = _cut(keys, kind, n_rows, n_cols, count_flags=False)
    out.put_csr(fwd)
    clock.lap(f"{label}: cut")
    _reverse_in_place(keys, fwd)
    del fwd
    clock.lap(f"{label}: reverse sort")
    rev, flag_counts = _cut(keys, layout.EDGE_KINDS[kind.reverse], n_cols, n_rows, count_flags=True)
    out.put_csr(rev)
    clock.lap(f"{label}: cut")
    return _Built(int(keys.size), rev.indptr, flag_counts)


# elements per slice of the passes below: 4 MiB of keys, so each slice is still in cache
# for the next operation on it; also bounds the temporaries
_CHUNK = 1 << 19


def _chunked(n: int) -> Iterator[slice]:
    for start in range(0, n, _CHUNK):
        yield slice(start, min(start + _CHUNK, n))


def _halves(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Views of contiguous int64 keys as their low half (uint32: column << flag bit | flag)
    and their high half (int32: row)."""
    pairs = keys.view(np.uint32).reshape(-1, 2)
    return pairs[:, _LOW], pairs[:, _HIGH].view(np.int32)


def _sort_and_dedup(keys: np.ndarray, flag_bits: int) -> np.ndarray:
    """Sort the keys in place and keep the last of each run of keys equal above the flag
    bits (the one with the flag set, if any), compacted in place; returns that prefix."""
    keys.sort()
    below = (1 << flag_bits) - 1
    kept = 0
    for part in _chunked(keys.size):
        chunk = keys[part]
        nxt = keys[part.start + 1 : part.stop + 1]  # one short for the last slice
        last = np.ones(chunk.size, dtype=bool)
        # with a <= b, b differs from a above the flag bits iff b > (a | below)
        np.greater(
            nxt, chunk[: nxt.size] | below if below else chunk[: nxt.size], out=last[: nxt.size]
        )
        # np.sort leaves the keys ascending; graph_invariants re-checks every list
        survivors = int(np.count_nonzero(last))
        if survivors == chunk.size and kept == part.start:
            kept += survivors  # nothing dropped yet: the slice is already in place
            continue
        # chunk[last] is a copy, taken before the write can reach this slice
        keys[kept : kept + survivors] = chunk[last]
        kept += survivors
    return keys[:kept]


def _cut(
    keys: np.ndarray, kind: layout.EdgeKind, n_rows: int, n_cols: int, count_flags: bool
) -> tuple[layout.Csr, np.ndarray]:
    """The arrays of ``kind`` and, with ``count_flags``, the flagged entries per row (else
    none) out of strictly ascending keys, in one pass."""
    _key_range(keys, n_rows, kind)
    low, high = _halves(keys)
    n = keys.size
    indices = np.empty(n, dtype=np.int32)
    flag = np.empty(n, dtype=bool) if kind.flagged else None
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    counts = indptr[1:]  # counted in place, then summed in place: no second n_rows array
    flag_counts = np.zeros(n_rows if count_flags and kind.flagged else 0, dtype=np.int64)
    offsets = np.empty(min(n, _CHUNK), dtype=np.intp)  # bincount's own index type: no copy
    for part in _chunked(n):
        column = low[part]
        if flag is None:
            indices[part] = column
        else:
            np.right_shift(column, 1, out=indices[part], casting="unsafe")
        # rows ascend, so a slice covers one contiguous range of rows: count just that range
        rows = high[part]
        first = int(rows[0])
        span = int(rows[-1]) - first + 1
        here = np.subtract(rows, first, out=offsets[: rows.size])
        counts[first : first + span] += np.bincount(here, minlength=span)
        if flag is not None:
            set_here = np.bitwise_and(column, 1, out=flag[part], casting="unsafe")
            if flag_counts.size:
                flagged_rows = here[set_here]
                flag_counts[first : first + span] += np.bincount(flagged_rows, minlength=span)
    np.cumsum(counts, out=counts)
    return layout.Csr(kind, indptr, indices, n_rows, n_cols, flag), flag_counts


def _reverse_in_place(keys: np.ndarray, fwd: layout.Csr) -> np.ndarray:
    """Re-pack the forward keys as the reverse direction (column high; row, flag low) in the
    same buffer and sort them: each reverse list comes out ascending."""
    low, high = _halves(keys)
    for part in _chunked(keys.size):
        rows = high[part]  # read before the high half is overwritten below
        if fwd.flag is None:
            low[part] = rows
        else:
            low[part] = (rows << 1) | fwd.flag[part]
        high[part] = fwd.indices[part]
    keys.sort()
    return keys
