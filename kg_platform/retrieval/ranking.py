"""The order of a pair's candidate paths and the cut to ``top_k``: every kept candidate is
ranked before the cut (``rank_rows``), ``top_rows`` finds the first ``top_k`` of that order
without sorting every row, and ``top_paths`` makes those rows evidence paths."""

from __future__ import annotations

import numpy as np

from kg_platform.graph.store import KGStore
from kg_platform.retrieval.candidates import (
    BRIDGE,
    KIND_NAMES,
    RELATION_NAMES,
    Candidates,
    EvidencePath,
    Hop,
)


def _rank_keys(
    c: Candidates, scores: np.ndarray, similarity: np.ndarray | None
) -> list[tuple[np.ndarray, bool]]:
    """The order of ``rank_rows`` as ``(per-candidate key, descending)``, primary first.
    The last three keys (terminal, relation, source) tell any two candidates apart."""
    keys = []
    if similarity is not None:
        sim = np.asarray(similarity, dtype=np.float64)
        # a terminal without a vector (NaN) ranks after every one with a vector
        keys.append((np.where(np.isnan(sim), -np.inf, sim), True))
    keys.append((np.asarray(scores, dtype=np.float64), True))
    return keys + [(c.terminal, False), (c.relation, False), (c.source, False)]


def _lexsort(keys: list[tuple[np.ndarray, bool]], rows: np.ndarray) -> np.ndarray:
    """``rows`` best first. lexsort takes the primary key last; a descending key (always a
    float) sorts by its negation."""
    return rows[np.lexsort([-k[rows] if down else k[rows] for k, down in reversed(keys)])]


def rank_rows(
    c: Candidates,
    keep: np.ndarray,
    scores: np.ndarray,
    similarity: np.ndarray | None = None,
) -> np.ndarray:
    """Every kept candidate row, best first, before any cut.

    Structural: score, then terminal PMID order. Dense (``similarity`` aligned with the
    candidates, NaN where the terminal has no vector): candidates with a vector first, by
    similarity; the structural score breaks ties and orders those without a vector. Paths
    still tied (same terminal) go by relation (DIRECT, then cites, then cited_by), then by
    source, so the order does not depend on the order of the candidate rows."""
    return _lexsort(_rank_keys(c, scores, similarity), np.flatnonzero(keep))


def top_rows(
    c: Candidates,
    keep: np.ndarray,
    scores: np.ndarray,
    top_k: int,
    similarity: np.ndarray | None = None,
) -> np.ndarray:
    """``rank_rows(c, keep, scores, similarity)[:top_k]`` without sorting every row.

    Every kept row is compared: key by key, a partition finds the value of the
    ``top_k``-th best row; rows strictly better are in, rows equal to it go on to the next
    key, the rest are out. Only the chosen rows are sorted."""
    if top_k < 1:
        raise ValueError(f"top_k: must be at least 1, got {top_k}")
    keys = _rank_keys(c, scores, similarity)
    pool = np.flatnonzero(keep)  # rows still undecided, ascending
    chosen = []
    need = top_k
    for key, descending in keys:
        if pool.size <= need:
            break
        values = key[pool]
        if descending:
            kth = np.partition(values, values.size - need)[values.size - need]
            better = values > kth
        else:
            kth = np.partition(values, need - 1)[need - 1]
            better = values < kth
        chosen.append(pool[better])
        need -= chosen[-1].size
        pool = pool[values == kth]
    # the keys tell candidates apart, so pool.size <= need; were two rows equal in every
    # key, the earlier one goes first, as in the stable full sort
    chosen.append(pool[:need])
    return _lexsort(keys, np.sort(np.concatenate(chosen)))


def top_paths(
    store: KGStore,
    c: Candidates,
    keep: np.ndarray,
    scores: np.ndarray,
    flags: dict[str, np.ndarray],
    top_k: int,
    similarity: np.ndarray | None = None,
) -> list[EvidencePath]:
    """Rank every kept candidate, then cut to ``top_k`` and materialise those paths."""
    order = top_rows(c, keep, scores, top_k, similarity)
    years = store.array("year")
    pmids = store.array("pmids")
    concepts = (c.pair.a_name, c.pair.b_name)
    paths = []
    for r in order:
        src, dst = int(c.source[r]), int(c.terminal[r])
        first = Hop(int(pmids[src]), int(years[src]) or None, "about")
        hops: tuple[Hop, ...] = (first,)
        if c.kind[r] == BRIDGE:
            hops += (
                Hop(int(pmids[dst]), int(years[dst]) or None, RELATION_NAMES[int(c.relation[r])]),
            )
        sim = None if similarity is None or np.isnan(similarity[r]) else float(similarity[r])
        paths.append(
            EvidencePath(
                kind=KIND_NAMES[int(c.kind[r])],
                concepts=concepts,
                hops=hops,
                score=round(float(scores[r]), 6),
                quotable=bool(flags["quotable"][r]),
                retracted=bool(flags["retracted"][r]),
                concern=bool(flags["concern"][r]),
                similarity=None if sim is None else round(sim, 6),
            )
        )
    return paths
