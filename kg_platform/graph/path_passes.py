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
def reads(cite_indptr: np.ndarray, cited_by_indptr: np.ndarray, nodes: np.ndarray, cap: int) -> int:
    """How many citations (both directions) ``nodes`` have in all, counting stops as soon
    as the total passes ``cap`` (-1: no cap): the caller only asks which side is smaller."""
    total = 0
    for k in range(nodes.size):
        node = nodes[k]
        total += cite_indptr[node + 1] - cite_indptr[node]
        total += cited_by_indptr[node + 1] - cited_by_indptr[node]
        if 0 <= cap < total:
            break
    return total


@njit(nogil=True, cache=True)
def flagged_row(indptr: np.ndarray, indices: np.ndarray, flag: np.ndarray, row: int) -> np.ndarray:
    """The entries of ``row`` whose flag is set (``KGStore.articles_of(d, major_only=True)``)."""
    lo, hi = indptr[row], indptr[row + 1]
    out = np.empty(hi - lo, dtype=indices.dtype)
    n = 0
    for j in range(lo, hi):
        out[n] = indices[j]
        n += flag[j]
    return out[:n]


@njit(nogil=True, cache=True)
def _found(value: int, table: np.ndarray, ascending: np.ndarray) -> bool:
    if table.size:
        return table[value]
    at = np.searchsorted(ascending, value)
    return at < ascending.size and ascending[at] == value


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
    """Append every link ``near[k] -> neighbour`` whose neighbour is far (``table[v]`` when
    the table is not empty, else found in ``ascending``) and is not the node itself, in
    order of origin then neighbour, as BRIDGE rows of ``relation`` from row ``at``; with
    ``swap`` the neighbour is the source. The rows need room for every link read.
    Returns the next free row."""
    origin, far_end = (terminal, source) if swap else (source, terminal)
    # first every link read, then the far ones kept: the row copies and the lookups run
    # as two loops of independent loads instead of one of dependent ones (2x here)
    read = at
    for k in range(near.size):
        node = near[k]
        for j in range(indptr[node], indptr[node + 1]):
            origin[read] = node
            far_end[read] = indices[j]
            read += 1
    for i in range(at, read):
        node, neighbour = origin[i], far_end[i]
        origin[at] = node
        far_end[at] = neighbour
        kind[at] = 1
        relations[at] = relation
        # kept by advancing, not by a branch: about half the links are far
        at += (neighbour != node) & _found(neighbour, table, ascending)
    return at


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
    """The structural score, each row's terms added in the order of the numpy formula:
    base, 0.5 per FILTER the terminal carries, the in-degree term, the year term, less
    0.5 for a concern."""
    with_filters = filters_carried.size > 0
    for i in range(out.size):
        score = 2.0 if direct[i] else 1.0
        if with_filters:
            for _ in range(filters_carried[i]):
                score += 0.5
        score += degree_term[degree[i]]
        score += year_term[years[terminal[i]] + year_offset]
        if concern[i]:
            score -= 0.5
        out[i] = score
