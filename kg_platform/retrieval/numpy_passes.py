"""The candidate paths in plain numpy passes, as they were before the compiled passes
(``paths.collect_candidates``, ``path_flags``, ``structural_scores``): the same rows, flags
and scores bit for bit. A process without the compiled passes uses them for a small pair
(``paths.pair_evidence_numpy``); the tests and ``benchmarks/ask.py`` compare against them."""

from __future__ import annotations

import numpy as np

from kg_platform.graph.layout import CONCERN, QUOTABLE, RETRACTED
from kg_platform.graph.store import KGStore, intersect_sorted
from kg_platform.retrieval.candidates import (
    BRIDGE,
    CITED_BY,
    CITES,
    DIRECT,
    NO_HOP,
    Candidates,
    Membership,
    membership,
)
from kg_platform.retrieval.linking import ConceptPair


def neighbour_count(store: KGStore, kind: str, nodes: np.ndarray) -> int:
    """How many ``kind`` neighbours ``nodes`` have in all."""
    indptr = store.array(f"{kind}_indptr")
    return int((indptr[nodes + 1] - indptr[nodes]).sum())


def _links(
    store: KGStore, kind: str, nodes: np.ndarray, is_far: Membership
) -> tuple[np.ndarray, np.ndarray]:
    """``(origin, neighbour)`` of every ``kind`` link from ``nodes`` to a node ``is_far``
    accepts, self-links dropped, as int64; ordered by origin, then neighbour."""
    expansion = store.expand(kind, nodes)
    neighbours = expansion.neighbours
    # integer gathers: a boolean mask index over a scattered mask is several times slower
    hit = np.flatnonzero(is_far(neighbours))
    origin = np.repeat(expansion.nodes, np.diff(expansion.indptr))[hit]
    neighbour = neighbours[hit].astype(np.int64)
    distinct = origin != neighbour
    if not distinct.all():
        origin, neighbour = origin[distinct], neighbour[distinct]
    return origin, neighbour


def collect_candidates(store: KGStore, pair: ConceptPair) -> Candidates:
    """``collect_candidates`` in numpy passes, as it was before the compiled passes: the
    reference they are tested and benchmarked against (the same rows in the same order).

    All DIRECT and BRIDGE paths of ``pair``; nothing is capped here.

    Rows come DIRECT first, then CITES, then CITED_BY; the order within a block is not part
    of the contract (``rank_rows`` orders by explicit keys). BRIDGE paths are found from
    whichever side has fewer citations to read: ``a cites b`` is ``b cited_by a``, so
    expanding the b-side major articles and swapping source and terminal gives the same
    paths at a cost proportional to the smaller side."""
    a, b = store.desc_idx(pair.a_ui), store.desc_idx(pair.b_ui)
    direct = intersect_sorted(store.articles_of(a), store.articles_of(b), store.n_articles).astype(
        np.int64
    )
    a_major = store.articles_of(a, major_only=True)
    b_major = store.articles_of(b, major_only=True)
    kinds = ("cite", "cited_by")
    a_reads = sum(neighbour_count(store, kind, a_major) for kind in kinds)
    b_reads = sum(neighbour_count(store, kind, b_major) for kind in kinds)
    from_b = b_reads < a_reads
    near, far, reads = (b_major, a_major, b_reads) if from_b else (a_major, b_major, a_reads)
    is_far = membership(far, reads, store.n_articles)
    bridges: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for kind in kinds:
        origin, neighbour = _links(store, kind, near, is_far)
        relation = CITES if kind == "cite" else CITED_BY
        if from_b:  # b --cites--> a is a <--cited-by-- b, and the other way round
            relation = CITED_BY if relation == CITES else CITES
            origin, neighbour = neighbour, origin
        bridges[relation] = (origin, neighbour)
    blocks = [(DIRECT, NO_HOP, direct, direct)]
    blocks += [(BRIDGE, r, *bridges[r]) for r in (CITES, CITED_BY)]
    return Candidates(
        pair,
        np.concatenate([np.full(s.size, k, dtype=np.int8) for k, _, s, _ in blocks]),
        np.concatenate([s for _, _, s, _ in blocks]),
        np.concatenate([t for _, _, _, t in blocks]),
        np.concatenate([np.full(s.size, r, dtype=np.int8) for _, r, s, _ in blocks]),
    )


def path_flags(store: KGStore, c: Candidates) -> dict[str, np.ndarray]:
    """``path_flags`` in numpy passes (the reference). Per candidate: quotable terminal, retracted anywhere on the path, concern anywhere,
    newest year on the path (0 when unknown)."""
    flags, years = store.array("flags"), store.array("year")
    f_src, f_dst = flags[c.source], flags[c.terminal]
    either = f_src | f_dst
    return {
        "quotable": (f_dst & QUOTABLE) != 0,
        "retracted": (either & RETRACTED) != 0,
        "concern": (either & CONCERN) != 0,
        "year": np.maximum(years[c.source], years[c.terminal]).astype(np.int32),
    }


def structural_scores(
    store: KGStore, c: Candidates, filter_descriptors: list[int], concern: np.ndarray
) -> np.ndarray:
    """``structural_scores`` in numpy passes (the reference). DIRECT outranks BRIDGE; a terminal that also carries the question's FILTER concepts
    ranks higher; well-cited terminals and newer ones break ties; a path touching an
    expression of concern ranks lower."""
    # in place, but the same float operations in the same order as the plain formula:
    # score = base + 0.5 * filter... + 0.1 * log1p(in_degree) + clip(year - 1900) / 2000
    # - 0.5 * concern (adding 0.0 where a term does not apply changes no positive score)
    score = np.where(c.kind == DIRECT, 2.0, 1.0)
    terminal = c.terminal
    for d in filter_descriptors:
        articles = store.articles_of(d)
        carries = membership(articles, terminal.size, store.n_articles)(terminal)
        np.add(score, 0.5, out=score, where=carries)
    indptr = store.array("cited_by_indptr")
    term = indptr[terminal + 1]
    term -= indptr[terminal]
    term = np.log1p(term.astype(np.float64))
    term *= 0.1
    score += term
    term = store.array("year")[terminal].astype(np.float64)
    term -= 1900.0
    np.clip(term, 0.0, 200.0, out=term)
    term /= 2000.0
    score += term
    np.subtract(score, 0.5, out=score, where=np.asarray(concern, dtype=bool))
    return score
