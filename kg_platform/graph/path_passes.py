"""The question path's passes over a concept pair's candidate paths, fused and compiled.

A pair of giant descriptors has over a million candidate paths; in numpy each step over
them (expanding the citations, keeping the far ends, repeating the origins, gathering the
flags, the years, the in-degrees) is a pass of its own with a temporary per step. Here each
of ``kg_platform.retrieval.paths``' three steps is one loop over the rows: the candidates
are written straight into their final arrays, and every flag and score term is computed
where the row is read. The arithmetic is the numpy formula's, operation by operation, so
the results are the same bit for bit.

Every kernel releases the GIL and is cached on disk after its first compilation.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def intersect(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Common values of two ascending, duplicate-free arrays, ascending, in the shorter
    one's dtype (``store.intersect_sorted``): a binary search of each value of the shorter
    from where the last one was found when the lists are lopsided, else one linear merge
    (no sort)."""
    small, large = (a, b) if a.size <= b.size else (b, a)
    out = np.empty(small.size, dtype=small.dtype)
    n = 0
    if small.size * 16 < large.size:
        lo = 0
        for k in range(small.size):
            v = small[k]
            lo += np.searchsorted(large[lo:], v)
            if lo == large.size:
                break
            if large[lo] == v:
                out[n] = v
                n += 1
        return out[:n]
    i = j = 0
    while i < small.size and j < large.size:
        x, y = small[i], large[j]
        if x == y:
            out[n] = x
            n += 1
        i += x <= y
        j += y <= x
    return out[:n]


# the index of a 64-bit word's lowest set bit from a de Bruijn multiplication
_DE_BRUIJN = np.uint64(0x03F79D71B4CB0A89)
_LOWEST_BIT = np.zeros(64, dtype=np.int64)
for _bit in range(64):
    _LOWEST_BIT[((1 << _bit) * 0x03F79D71B4CB0A89 & (2**64 - 1)) >> 58] = _bit


@njit(nogil=True, cache=True)
def intersect_bits(
    a: np.ndarray, bits_a: np.ndarray, b: np.ndarray, bits_b: np.ndarray
) -> np.ndarray:
    """``intersect(a, b)`` where ``bits_a`` and/or ``bits_b`` (not empty) is the ``bitset``
    of ``a`` or ``b`` over every node: with both, one AND of the two tables' words; with
    one, each value of the other list tested against it. The same values, ascending, in
    the shorter list's dtype."""
    small = a if a.size <= b.size else b
    if bits_a.size and bits_b.size:
        out = np.empty(small.size, dtype=small.dtype)
        n = 0
        for w in range(min(bits_a.size, bits_b.size)):
            word = bits_a[w] & bits_b[w]
            while word != 0:
                low = word & (~word + np.uint64(1))
                out[n] = (w << 6) + _LOWEST_BIT[(low * _DE_BRUIJN) >> np.uint64(58)]
                n += 1
                word ^= low
        return out[:n]
    bits, other = (bits_a, b) if bits_a.size else (bits_b, a)
    out = np.empty(other.size, dtype=small.dtype)
    n = 0
    for k in range(other.size):
        v = other[k]
        out[n] = v
        n += (bits[v >> 6] >> np.uint64(v & 63)) & np.uint64(1)
    return out[:n]


@njit(nogil=True, cache=True)
def major_reads(
    mesh_indptr: np.ndarray,
    mesh_indices: np.ndarray,
    major: np.ndarray,
    cite_indptr: np.ndarray,
    cited_by_indptr: np.ndarray,
    descriptors: np.ndarray,
    out: np.ndarray,
) -> None:
    """``out[k]``: the citations (both directions) of descriptor ``descriptors[k]``'s major
    articles in all."""
    for k in range(descriptors.size):
        d = descriptors[k]
        total = 0
        for j in range(mesh_indptr[d], mesh_indptr[d + 1]):
            if major[j]:
                node = mesh_indices[j]
                total += cite_indptr[node + 1] - cite_indptr[node]
                total += cited_by_indptr[node + 1] - cited_by_indptr[node]
        out[k] = total


@njit(nogil=True, cache=True)
def bitset(nodes: np.ndarray, n_nodes: int) -> np.ndarray:
    """A bit per node below ``n_nodes`` (64 to a word), set for ``nodes``: the far side's
    membership test in an eighth of a boolean table's bytes, so its random reads stay in
    the cache."""
    words = np.zeros((n_nodes + 63) >> 6, dtype=np.uint64)
    for k in range(nodes.size):
        v = nodes[k]
        words[v >> 6] |= np.uint64(1) << np.uint64(v & 63)
    return words


@njit(nogil=True, cache=True)
def _found(value: int, table: np.ndarray, ascending: np.ndarray) -> bool:
    if table.size:  # a ``bitset``
        return ((table[value >> 6] >> np.uint64(value & 63)) & np.uint64(1)) != 0
    at = np.searchsorted(ascending, value)
    return at < ascending.size and ascending[at] == value


# near nodes whose links' first cache lines are read ahead in one loop (``_far_links``)
_TOUCH_BLOCK = 256


@njit(nogil=True, cache=True)
def _far_links(
    indptr: np.ndarray,
    indices: np.ndarray,
    near: np.ndarray,
    table: np.ndarray,
    ascending: np.ndarray,
    swap: bool,
    source: np.ndarray,
    terminal: np.ndarray,
    at: int,
) -> int:
    """Every link ``near[k] -> neighbour`` whose neighbour is far (set in the ``bitset``
    ``table`` when it is not empty, else found in ``ascending``) and is not the node itself,
    in order of origin then neighbour, written from row ``at`` (with ``swap`` the neighbour
    is the source); the rows need room for every link read, but only the rows kept are
    written. Returns the next free row."""
    origin, far_end = (terminal, source) if swap else (source, terminal)
    for start in range(0, near.size, _TOUCH_BLOCK):
        stop = min(near.size, start + _TOUCH_BLOCK)
        # the near nodes are scattered over the graph: a first loop reads where each one's
        # links start (two loads a node, independent of every other node's, so many are
        # in flight at once), and the second then finds them in the cache
        touched = 0
        for k in range(start, stop):
            node = near[k]
            lo, hi = indptr[node], indptr[node + 1]
            if lo < hi:
                touched += indices[lo] + indices[hi - 1]
        if touched < 0:  # never (node indices): keeps the loop's loads
            return -1
        for k in range(start, stop):
            node = near[k]
            for j in range(indptr[node], indptr[node + 1]):
                neighbour = indices[j]
                origin[at] = node
                far_end[at] = neighbour
                # kept by advancing, not by a branch: the row is overwritten when not kept
                at += (neighbour != node) & _found(neighbour, table, ascending)
    return at


@njit(nogil=True, cache=True)
def pack_links(
    indptr: np.ndarray, indices: np.ndarray, near: np.ndarray, ptr: np.ndarray, out: np.ndarray
) -> None:
    """The links of every node of ``near``, in order, copied into ``out`` (32-bit node
    indices, room for them all): ``near[k]``'s are ``out[ptr[k]:ptr[k + 1]]`` (``ptr``, out,
    ``near.size + 1`` values). Read as ``_far_links`` reads them, a block of nodes ahead."""
    at = 0
    ptr[0] = 0
    for start in range(0, near.size, _TOUCH_BLOCK):
        stop = min(near.size, start + _TOUCH_BLOCK)
        touched = 0
        for k in range(start, stop):
            node = near[k]
            lo, hi = indptr[node], indptr[node + 1]
            if lo < hi:
                touched += indices[lo] + indices[hi - 1]
        if touched < 0:  # never (node indices): keeps the loop's loads
            return
        for k in range(start, stop):
            node = near[k]
            for j in range(indptr[node], indptr[node + 1]):
                out[at] = indices[j]
                at += 1
            ptr[k + 1] = at


@njit(nogil=True, cache=True)
def _far_packed(
    ptr: np.ndarray,
    packed: np.ndarray,
    near: np.ndarray,
    table: np.ndarray,
    ascending: np.ndarray,
    swap: bool,
    source: np.ndarray,
    terminal: np.ndarray,
    at: int,
    sparse: bool,
) -> int:
    """``_far_links`` over the links ``pack_links`` copied out in order: ``near[k]``'s are
    ``packed[ptr[k]:ptr[k + 1]]`` (``ptr`` has ``near.size + 1`` values, offsets into all of
    ``packed``), read in one sequential pass; the same rows in the same order. ``sparse``:
    few links are kept (a far side on a small share of the nodes), so a row is written
    only when kept, behind a branch that is almost never taken."""
    origin, far_end = (terminal, source) if swap else (source, terminal)
    if sparse:
        for k in range(near.size):
            node = near[k]
            for j in range(ptr[k], ptr[k + 1]):
                neighbour = packed[j]
                if _found(neighbour, table, ascending) and neighbour != node:
                    origin[at] = node
                    far_end[at] = neighbour
                    at += 1
        return at
    for k in range(near.size):
        node = near[k]
        for j in range(ptr[k], ptr[k + 1]):
            neighbour = packed[j]
            origin[at] = node
            far_end[at] = neighbour
            at += (neighbour != node) & _found(neighbour, table, ascending)
    return at


@njit(nogil=True, cache=True)
def links(
    indptr: np.ndarray,
    indices: np.ndarray,
    near: np.ndarray,
    table: np.ndarray,
    ascending: np.ndarray,
    swap: bool,
    relation: int,
    kind: np.ndarray,
    source: np.ndarray,
    terminal: np.ndarray,
    relations: np.ndarray,
    at: int,
) -> int:
    """``_far_links`` appended as BRIDGE rows of ``relation`` from row ``at``; returns the
    next free row."""
    end = _far_links(indptr, indices, near, table, ascending, swap, source, terminal, at)
    for i in range(at, end):
        kind[i] = 1
        relations[i] = relation
    return end


@njit(nogil=True, cache=True)
def flags(
    node_flags: np.ndarray,
    years: np.ndarray,
    source: np.ndarray,
    terminal: np.ndarray,
    quotable_bit: int,
    retracted_bit: int,
    concern_bit: int,
    quotable: np.ndarray,
    retracted: np.ndarray,
    concern: np.ndarray,
    year: np.ndarray,
) -> None:
    """Per row: quotable terminal, retracted or concern on either end, newest year."""
    for i in range(source.size):
        s, t = source[i], terminal[i]
        f_dst = node_flags[t]
        either = node_flags[s] | f_dst
        quotable[i] = (f_dst & quotable_bit) != 0
        retracted[i] = (either & retracted_bit) != 0
        concern[i] = (either & concern_bit) != 0
        year[i] = max(years[s], years[t])


@njit(nogil=True, cache=True)
def in_degrees(indptr: np.ndarray, terminal: np.ndarray, out: np.ndarray) -> int:
    """``out[i]`` = in-degree of ``terminal[i]``; returns the largest."""
    top = 0
    for i in range(terminal.size):
        d = indptr[terminal[i] + 1] - indptr[terminal[i]]
        out[i] = d
        top = max(top, d)
    return top


@njit(nogil=True, cache=True)
def _score(
    direct: bool, carried: int, degree_term: float, year_term: float, concern: bool
) -> float:
    """One row's structural score, its terms added in the order of the numpy formula: base,
    0.5 per FILTER the terminal carries, the in-degree term, the year term, less 0.5 for a
    concern."""
    score = 2.0 if direct else 1.0
    for _ in range(carried):
        score += 0.5
    score += degree_term
    score += year_term
    if concern:
        score -= 0.5
    return score


@njit(nogil=True, cache=True)
def scores(
    direct: np.ndarray,
    filters_carried: np.ndarray,
    degree: np.ndarray,
    degree_term: np.ndarray,
    terminal: np.ndarray,
    years: np.ndarray,
    year_term: np.ndarray,
    year_offset: int,
    concern: np.ndarray,
    out: np.ndarray,
) -> None:
    """``_score`` of every row (``filters_carried`` empty: no FILTER concepts)."""
    with_filters = filters_carried.size > 0
    for i in range(out.size):
        out[i] = _score(
            direct[i],
            filters_carried[i] if with_filters else 0,
            degree_term[degree[i]],
            year_term[years[terminal[i]] + year_offset],
            concern[i],
        )


# -- from a pair's links to its ladder counts and its top rows --------------------------
# The question path with the structural ranker needs, of a pair's candidates, only the
# counts gates 3-6 look at and the ``top_k`` best alive rows. ``pair_evidence`` finds the
# rows as ``links`` does (source and terminal only: kind and relation follow from the
# block a row is in), then visits each once: flags, the gates' counts and the structural
# score, and the row is offered to the top rows. No flag, score or mask array over a
# million rows is written and read back, and no full partition of the scores is needed.


@njit(nogil=True, cache=True)
def _ranks_before(
    s1: float, t1: int, r1: int, o1: int, s2: float, t2: int, r2: int, o2: int
) -> bool:
    """Row 1 comes before row 2 in ``rank_rows``' structural order: score descending, then
    terminal, relation and source ascending."""
    if s1 != s2:
        return s1 > s2
    if t1 != t2:
        return t1 < t2
    if r1 != r2:
        return r1 < r2
    return o1 < o2


@njit(nogil=True, cache=True)
def _carried(node: int, filter_articles: np.ndarray, filter_offsets: np.ndarray) -> int:
    """How many FILTER descriptors' (ascending) article lists hold ``node``."""
    n = 0
    for f in range(filter_offsets.size - 1):
        lo, hi = filter_offsets[f], filter_offsets[f + 1]
        at = lo + np.searchsorted(filter_articles[lo:hi], node)
        if at < hi and filter_articles[at] == node:
            n += 1
    return n


@njit(nogil=True, cache=True)
def pair_evidence(
    direct: np.ndarray,
    near: np.ndarray,
    table: np.ndarray,
    ascending: np.ndarray,
    from_b: bool,
    reads: int,
    cite_indptr: np.ndarray,
    cite_indices: np.ndarray,
    cited_by_indptr: np.ndarray,
    cited_by_indices: np.ndarray,
    node_flags: np.ndarray,
    years: np.ndarray,
    bits: np.ndarray,
    gates: np.ndarray,
    degree_term: np.ndarray,
    year_term: np.ndarray,
    year_offset: int,
    filter_articles: np.ndarray,
    filter_offsets: np.ndarray,
    counts: np.ndarray,
    heap_score: np.ndarray,
    heap_rows: np.ndarray,
    packed_cite_ptr: np.ndarray,
    packed_cite: np.ndarray,
    packed_cited_by_ptr: np.ndarray,
    packed_cited_by: np.ndarray,
    sparse: bool,
) -> int:
    """Every candidate of ``collect_candidates`` counted at gates 3-6 and the best alive
    ones kept. ``bits``: quotable, retracted, concern; ``gates``: quotable gate on,
    retraction gate on, as-of year (0: none); ``counts`` (out): candidates, quotable,
    unretracted, as-of, evidence; ``heap_rows`` (out): kind, source, terminal, relation of
    the rows kept, ``heap_score`` their scores. Returns how many rows are kept (at most
    ``heap_score.size``), in no order. ``packed_*``: the near nodes' links of that kind
    copied out by ``pack_links`` (``ptr`` of ``near.size + 1`` values), read instead of
    the graph's lists when not empty (``sparse``: ``_far_packed``'s)."""
    n_direct = direct.size
    # node indices fit in 32 bits: half the bytes to write and read back
    source = np.empty(n_direct + reads, dtype=np.int32)
    terminal = np.empty(n_direct + reads, dtype=np.int32)
    source[:n_direct] = direct
    terminal[:n_direct] = direct
    # b --cites--> a is a <--cited-by-- b: from b, the CITES rows are b's cited_by links
    if from_b:
        first, second = (cited_by_indptr, cited_by_indices), (cite_indptr, cite_indices)
        packed_first = (packed_cited_by_ptr, packed_cited_by)
        packed_second = (packed_cite_ptr, packed_cite)
    else:
        first, second = (cite_indptr, cite_indices), (cited_by_indptr, cited_by_indices)
        packed_first = (packed_cite_ptr, packed_cite)
        packed_second = (packed_cited_by_ptr, packed_cited_by)
    if packed_first[0].size:
        end_cites = _far_packed(
            *packed_first, near, table, ascending, from_b, source, terminal, n_direct, sparse
        )
    else:
        end_cites = _far_links(*first, near, table, ascending, from_b, source, terminal, n_direct)
    if packed_second[0].size:
        n = _far_packed(
            *packed_second, near, table, ascending, from_b, source, terminal, end_cites, sparse
        )
    else:
        n = _far_links(*second, near, table, ascending, from_b, source, terminal, end_cites)
    quotable_bit, retracted_bit, concern_bit = bits[0], bits[1], bits[2]
    quotable_gate, retracted_gate, as_of = gates[0] != 0, gates[1] != 0, gates[2]
    with_filters = filter_offsets.size > 1
    n_quotable = n_unretracted = n_as_of = n_alive = 0
    k = heap_score.size
    held = 0
    worst = 0  # the kept row that ranks last, once k are kept
    for i in range(n):
        s, t = source[i], terminal[i]
        f_dst = node_flags[t]
        either = node_flags[s] | f_dst
        quotable = (f_dst & quotable_bit) != 0
        n_quotable += quotable
        alive = quotable or not quotable_gate
        if retracted_gate:
            alive = alive and (either & retracted_bit) == 0
            n_unretracted += alive
        if as_of != 0:
            year = max(years[s], years[t])
            alive = alive and 0 < year <= as_of
            n_as_of += alive
        n_alive += alive
        if not alive:
            continue
        direct_row = i < n_direct
        score = _score(
            direct_row,
            _carried(t, filter_articles, filter_offsets) if with_filters else 0,
            degree_term[cited_by_indptr[t + 1] - cited_by_indptr[t]],
            year_term[years[t] + year_offset],
            (either & concern_bit) != 0,
        )
        if held == k and score < heap_score[worst]:
            continue
        relation = 0 if direct_row else (1 if i < end_cites else 2)
        if held < k:
            at = held
            held += 1
        else:
            row = heap_rows[worst]
            if not _ranks_before(score, t, relation, s, heap_score[worst], row[2], row[3], row[1]):
                continue
            at = worst
        heap_score[at] = score
        heap_rows[at, 0] = 0 if direct_row else 1
        heap_rows[at, 1] = s
        heap_rows[at, 2] = t
        heap_rows[at, 3] = relation
        if held == k:  # full: find the row that ranks last
            worst = 0
            for j in range(1, k):
                a, b = heap_rows[worst], heap_rows[j]
                if _ranks_before(
                    heap_score[worst], a[2], a[3], a[1], heap_score[j], b[2], b[3], b[1]
                ):
                    worst = j
    counts[0] = n
    counts[1] = n_quotable
    counts[2] = n_unretracted
    counts[3] = n_as_of
    counts[4] = n_alive
    return held
