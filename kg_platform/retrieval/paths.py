"""Evidence paths between a concept pair, kept as numpy arrays until the final cut.

- DIRECT: an article carrying both descriptors.
- BRIDGE: an article about one concept (major topic) that cites, or is cited by, an article
  about the other (one hop).

Every candidate is scored; the cut to ``top_k`` happens only after ranking all of them (the
reference lost the gold document on 40.8% of questions to a cap applied before its ranker).
Every path gets a transparent structural score (``structural_scores``); when the lake has an
embedding index the question path also passes each terminal's question-evidence similarity,
which then leads the order (``rank_rows``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kg_platform.graph.store import CONCERN, QUOTABLE, RETRACTED, KGStore
from kg_platform.retrieval.linking import ConceptPair

DIRECT, BRIDGE = 0, 1
NO_HOP, CITES, CITED_BY = 0, 1, 2
KIND_NAMES = {DIRECT: "DIRECT", BRIDGE: "BRIDGE"}
RELATION_ARROWS = {CITES: "--cites-->", CITED_BY: "<--cited-by--"}
RELATION_NAMES = {NO_HOP: "about", CITES: "cites", CITED_BY: "cited_by"}


@dataclass(frozen=True)
class Hop:
    """One article on a path and how it was reached from the previous one."""

    pmid: int
    year: int | None
    relation: str  # "about" for the first article, then "cites" or "cited_by"


@dataclass(frozen=True)
class EvidencePath:
    """A DIRECT or BRIDGE path with its provenance. The last hop is the terminal: the
    article whose text would be quoted."""

    kind: str
    concepts: tuple[str, str]
    hops: tuple[Hop, ...]
    score: float
    quotable: bool
    retracted: bool
    concern: bool
    # cosine of the question with the terminal's abstract; None: structural ranking, or the
    # terminal has no vector in the embedding index
    similarity: float | None = None

    @property
    def terminal(self) -> Hop:
        return self.hops[-1]

    def render(self) -> str:
        """``BRIDGE [Aspirin + Myocardial Infarction] 39308168 <--cited-by-- 41584723 (2026)``"""
        label = f"{self.kind} [{self.concepts[0]} + {self.concepts[1]}]"
        parts = [str(self.hops[0].pmid)]
        for hop in self.hops[1:]:
            arrow = RELATION_ARROWS[CITES if hop.relation == "cites" else CITED_BY]
            parts.append(f"{arrow} {hop.pmid}")
        year = self.terminal.year
        return f"{label} {' '.join(parts)}" + (f" ({year})" if year else "")


@dataclass(frozen=True)
class Candidates:
    """Every candidate path of one pair as aligned arrays (node indices into the store)."""

    pair: ConceptPair
    kind: np.ndarray  # DIRECT or BRIDGE, int8
    source: np.ndarray  # first article, int64
    terminal: np.ndarray  # last article (== source for DIRECT), int64
    relation: np.ndarray  # NO_HOP, CITES or CITED_BY, int8

    def __len__(self) -> int:
        return int(self.kind.size)

    @classmethod
    def empty(cls, pair: ConceptPair) -> Candidates:
        z = np.zeros(0, dtype=np.int64)
        return cls(pair, z.astype(np.int8), z, z, z.astype(np.int8))


def _members(values: np.ndarray, ascending: np.ndarray) -> np.ndarray:
    """Mask of ``values`` found in the ascending array (binary search, vectorised)."""
    if ascending.size == 0 or values.size == 0:
        return np.zeros(values.size, dtype=bool)
    pos = np.searchsorted(ascending, values)
    return ascending[np.minimum(pos, ascending.size - 1)] == values


def collect_candidates(store: KGStore, pair: ConceptPair) -> Candidates:
    """All DIRECT and BRIDGE paths of ``pair``; nothing is capped here."""
    a, b = store.desc_idx(pair.a_ui), store.desc_idx(pair.b_ui)
    a_all = np.asarray(store.articles_of(a), dtype=np.int64)
    b_all = np.asarray(store.articles_of(b), dtype=np.int64)
    direct = a_all[_members(a_all, b_all)]
    a_major = np.asarray(store.articles_of(a, major_only=True), dtype=np.int64)
    b_major = np.asarray(store.articles_of(b, major_only=True), dtype=np.int64)
    kinds = [np.full(direct.size, DIRECT, dtype=np.int8)]
    sources, terminals = [direct], [direct]
    relations = [np.full(direct.size, NO_HOP, dtype=np.int8)]
    for name, relation in (("cite", CITES), ("cited_by", CITED_BY)):
        expansion = store.expand(name, a_major)
        neighbours = np.asarray(expansion.neighbours, dtype=np.int64)
        origin = np.repeat(a_major, np.diff(expansion.indptr))
        keep = _members(neighbours, b_major) & (neighbours != origin)
        n_kept = int(np.count_nonzero(keep))
        kinds.append(np.full(n_kept, BRIDGE, dtype=np.int8))
        sources.append(origin[keep])
        terminals.append(neighbours[keep])
        relations.append(np.full(n_kept, relation, dtype=np.int8))
    return Candidates(
        pair,
        np.concatenate(kinds),
        np.concatenate(sources),
        np.concatenate(terminals),
        np.concatenate(relations),
    )


def path_flags(store: KGStore, c: Candidates) -> dict[str, np.ndarray]:
    """Per candidate: quotable terminal, retracted anywhere on the path, concern anywhere,
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
    """DIRECT outranks BRIDGE; a terminal that also carries the question's FILTER concepts
    ranks higher; well-cited terminals and newer ones break ties; a path touching an
    expression of concern ranks lower."""
    score = np.where(c.kind == DIRECT, 2.0, 1.0)
    for d in filter_descriptors:
        score += 0.5 * _members(c.terminal, np.asarray(store.articles_of(d), dtype=np.int64))
    indptr = store.array("cited_by_indptr")
    in_degree = (indptr[c.terminal + 1] - indptr[c.terminal]).astype(np.float64)
    score += 0.1 * np.log1p(in_degree)
    years = store.array("year")[c.terminal].astype(np.float64)
    score += np.clip(years - 1900.0, 0.0, 200.0) / 2000.0
    score -= 0.5 * concern
    return score


def rank_rows(
    c: Candidates,
    keep: np.ndarray,
    scores: np.ndarray,
    similarity: np.ndarray | None = None,
) -> np.ndarray:
    """Every kept candidate row, best first, before any cut.

    Structural: score, then terminal PMID order. Dense (``similarity`` aligned with the
    candidates, NaN where the terminal has no vector): candidates with a vector first, by
    similarity; the structural score breaks ties and orders those without a vector."""
    rows = np.flatnonzero(keep)
    keys = [c.terminal[rows], -scores[rows]]
    if similarity is not None:
        sim = np.asarray(similarity, dtype=np.float64)[rows]
        missing = np.isnan(sim)
        keys += [-np.where(missing, 0.0, sim), missing]
    return rows[np.lexsort(keys)]  # the last key is the primary one


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
    order = rank_rows(c, keep, scores, similarity)[:top_k]
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
