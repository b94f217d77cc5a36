"""What an evidence path is: its kinds and relations, the path with its provenance
(``EvidencePath``), every candidate of a pair as aligned arrays (``Candidates``), and the
membership test the passes share (``paths.py``, ``numpy_passes.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kg_platform.graph.store import in_sorted
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


Membership = Callable[[np.ndarray], np.ndarray]


def node_table(ascending: np.ndarray, lookups: int, n_nodes: int) -> np.ndarray | None:
    """A boolean table over every node marking ``ascending``, when that is cheaper than a
    binary search for about ``lookups`` node indices below ``n_nodes``; else None. A binary
    search costs ~12 ns per level per value (more once ``ascending`` leaves the cache); a
    boolean table over every node ~0.2 ns per node to allocate, ~20 ns per value to read."""
    levels = float(np.log2(ascending.size + 1))
    if lookups * (levels + 1.0) * 12.0 <= 0.2 * n_nodes + 10.0 * ascending.size:
        return None
    table = np.zeros(n_nodes, dtype=bool)
    table[ascending] = True
    return table


def membership(ascending: np.ndarray, lookups: int, n_nodes: int) -> Membership:
    """A test ``values -> mask of values found in ascending``, by ``node_table`` or by a
    binary search, whichever is cheaper; both give the same mask."""
    table = node_table(ascending, lookups, n_nodes)
    if table is None:
        return lambda values: in_sorted(values, ascending)
    return lambda values: table[values]
