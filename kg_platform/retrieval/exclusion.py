"""Evidence deletion: the question path as if some articles were not in the graph.

The refusal evaluation's evidence-deletion tiers (``evaluation/refusal/evidence_deletion.py``) ask
each question again with an exclusion set of articles (node indices): a concept whose every
article is excluded is one the graph does not know, a pair's co-annotations leave the
excluded articles out, and a candidate path whose source or terminal is excluded is gone.
Every path is one article or one citation between two, so dropping the paths that touch an
excluded article is exactly the set of paths of the graph without those articles. What is
not recomputed: the structural score's in-degree term still counts citations from excluded
articles, and roles keep the full graph's article counts; both order or classify, neither
creates or removes a path.

``pair_evidence_excluding`` gives what ``paths.pair_evidence`` gives (the counts at gates 3-6
and the ``top_k`` best alive rows with their scores) from ``collect_candidates`` with the
excluded rows removed; with nothing excluded it is ``pair_evidence`` bit for bit (tested).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from kg_platform.graph.store import KGStore, in_sorted
from kg_platform.retrieval.candidates import BRIDGE
from kg_platform.retrieval.linking import ConceptPair
from kg_platform.retrieval.paths import (
    Candidates,
    PairEvidence,
    collect_candidates,
    gate_candidates,
    path_flags,
    structural_scores,
)
from kg_platform.retrieval.ranking import top_rows


def excluded_nodes(store: KGStore, pmids: Iterable[int]) -> np.ndarray:
    """Node indices of the ``pmids`` that are in the graph, ascending and distinct; a PMID
    the graph does not hold excludes nothing."""
    wanted = np.fromiter((int(p) for p in pmids), dtype=np.int64)
    nodes = store.idx_many(wanted) if wanted.size else wanted
    return np.unique(nodes[nodes >= 0]).astype(np.int64)


def without_articles(c: Candidates, excluded: np.ndarray) -> Candidates:
    """The candidate rows whose source and terminal are both kept, in their order."""
    if excluded.size == 0 or len(c) == 0:
        return c
    keep = ~(in_sorted(c.source, excluded) | in_sorted(c.terminal, excluded))
    return Candidates(c.pair, c.kind[keep], c.source[keep], c.terminal[keep], c.relation[keep])


def pair_paths(store: KGStore, pair: ConceptPair) -> tuple[np.ndarray, np.ndarray]:
    """``(direct, bridge_terminals)`` of ``pair`` in the full graph, node indices ascending:
    the articles carrying both concepts and the terminals of its BRIDGE paths."""
    c = collect_candidates(store, pair)
    direct = np.unique(c.source[c.kind != BRIDGE])
    return direct, np.unique(c.terminal[c.kind == BRIDGE])


def pair_evidence_excluding(
    store: KGStore,
    pair: ConceptPair,
    filter_descriptors: list[int],
    top_k: int,
    excluded: np.ndarray,
    quotable_gate: bool = True,
    retracted_gate: bool = True,
    as_of: int | None = None,
) -> PairEvidence:
    """``paths.pair_evidence`` over the graph without the ``excluded`` articles."""
    if top_k < 1:
        raise ValueError(f"top_k: must be at least 1, got {top_k}")
    c = without_articles(collect_candidates(store, pair), excluded)
    flags = path_flags(store, c)
    alive, counts = gate_candidates(flags, len(c), quotable_gate, retracted_gate, as_of)
    scores = structural_scores(store, c, filter_descriptors, flags["concern"])
    rows = top_rows(c, alive, scores, top_k) if alive.any() else np.zeros(0, dtype=np.int64)
    top = Candidates(pair, c.kind[rows], c.source[rows], c.terminal[rows], c.relation[rows])
    return PairEvidence(pair, counts, top, scores[rows])
