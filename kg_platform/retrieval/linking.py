"""The graph picks the concept pair: every pair of BRIDGE concepts is scored by how many
articles carry both as major topics (an intersection of two ascending lists)."""

from __future__ import annotations

import sys
import threading
import weakref
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from kg_platform.graph.store import KGStore, in_sorted, intersect_sorted
from kg_platform.grounding.grounder import Grounding


@dataclass(frozen=True)
class ConceptPair:
    """Two BRIDGE concepts and their support in the graph."""

    a_ui: str
    a_name: str
    b_ui: str
    b_name: str
    major_co_annotations: int  # articles with both as major topics
    co_annotations: int  # articles carrying both, major or not
    # the articles carrying both (ascending, ``path_passes.intersect``'s array) when
    # ``score_pairs`` found them on the whole graph with the compiled passes: the pair's
    # DIRECT articles, so its path search does not intersect the two lists again
    direct: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def label(self) -> str:
        return f"{self.a_name} + {self.b_name}"


@dataclass(frozen=True)
class GraphConcept:
    """A BRIDGE grounding that the graph knows, with its descriptor index."""

    grounding: Grounding
    d: int


def concepts_in_graph(
    store: KGStore, bridges: list[Grounding], excluded: np.ndarray | None = None
) -> list[GraphConcept]:
    """The BRIDGE groundings that index at least one article in this graph build (one not
    in ``excluded``, ascending node indices, when given)."""
    found = []
    for g in bridges:
        try:
            d = store.desc_idx(g.ui)
        except KeyError:
            continue
        if kept_articles(store.articles_of(d), excluded).size:
            found.append(GraphConcept(g, d))
    return found


def kept_articles(articles: np.ndarray, excluded: np.ndarray | None) -> np.ndarray:
    """The ascending ``articles`` not in ``excluded`` (ascending; None excludes nothing)."""
    if excluded is None or excluded.size == 0:
        return articles
    articles = np.asarray(articles)
    return articles[~in_sorted(articles, excluded)]


def _common(
    a: np.ndarray,
    b: np.ndarray,
    n_nodes: int,
    bits_a: np.ndarray | None = None,
    bits_b: np.ndarray | None = None,
) -> tuple[int, np.ndarray | None]:
    """How many values two ascending article lists share, and those values when the
    compiled passes found them: by the compiled merge in a process that has loaded them
    (`kg serve`, a large pair's question), or by a bit table of one list or both
    (``bits_a``, ``bits_b``: ``article_bits``) when given; else by ``intersect_sorted``
    (the same count, no array)."""
    passes = sys.modules.get("kg_platform.graph.path_passes")
    if passes is not None:
        if bits_a is not None or bits_b is not None:
            common = passes.intersect_bits(
                a, _NO_BITS if bits_a is None else bits_a, b, _NO_BITS if bits_b is None else bits_b
            )
        else:
            common = passes.intersect(a, b)
        if max(a.size, b.size) > 2 * common.size + 512:
            common = common.copy()  # not the room the pass took for the list it read
        return int(common.size), common
    return int(intersect_sorted(a, b, n_nodes).size), None


# the most bytes of major-article lists kept per graph build (``major_articles``)
MAJOR_LISTS_BYTES = 64 << 20
_MAJOR_LISTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_MAJOR_LOCK = threading.Lock()


def major_articles(store: KGStore, d: int) -> np.ndarray:
    """``store.articles_of(d, major_only=True)``, kept per graph build once made (the
    questions of a service name the same large descriptors again and again: each is read
    out of its MeSH row once), up to ``MAJOR_LISTS_BYTES`` in all; the same array."""
    with _MAJOR_LOCK:
        kept = _MAJOR_LISTS.get(store)
        if kept is None:
            kept = _MAJOR_LISTS[store] = {None: 0}  # None: the bytes kept
        found = kept.get(d)
    if found is not None:
        return found
    found = store.articles_of(d, major_only=True)
    found.flags.writeable = False
    with _MAJOR_LOCK:
        if kept[None] + found.nbytes <= MAJOR_LISTS_BYTES and d not in kept:
            kept[d] = found
            kept[None] += found.nbytes
    return found


_NO_BITS = np.zeros(0, dtype=np.uint64)
# the most bytes of article bit tables kept per graph build (``article_bits``)
ARTICLE_BITS_BYTES = 64 << 20
_ARTICLE_BITS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def keep_article_bits(store: KGStore, limit_bytes: int = ARTICLE_BITS_BYTES) -> None:
    """Keep, for this graph build, a bit table over every article of each descriptor on
    at least 1/64 of the articles (a table no larger than its list), made on its first
    question, up to ``limit_bytes`` in all: two such lists then intersect by one AND of
    their words. `kg serve` does this when it opens a build."""
    if limit_bytes < 0:
        raise ValueError(f"article bits: limit {limit_bytes} bytes, must be 0 or more")
    with _MAJOR_LOCK:
        if store not in _ARTICLE_BITS:
            _ARTICLE_BITS[store] = {None: 0, "limit": int(limit_bytes)}


def article_bits(store: KGStore, d: int, articles: np.ndarray) -> np.ndarray | None:
    """``path_passes.bitset`` of descriptor ``d``'s articles (``articles``: that list),
    kept per graph build (``keep_article_bits``); None for a list under 1/64 of the
    articles, in a process that keeps none, past the limit, or without the compiled
    passes."""
    passes = sys.modules.get("kg_platform.graph.path_passes")
    if passes is None or articles.size * 64 < store.n_articles:
        return None
    with _MAJOR_LOCK:
        kept = _ARTICLE_BITS.get(store)
        found = kept.get(d) if kept is not None else None
    if found is not None or kept is None:
        return found
    size = 8 * ((store.n_articles + 63) >> 6)
    if kept[None] + size > kept["limit"]:
        return None
    found = passes.bitset(articles, store.n_articles)
    with _MAJOR_LOCK:
        if d not in kept and kept[None] + size <= kept["limit"]:
            kept[d] = found
            kept[None] += size
    return found


def score_pairs(
    store: KGStore, concepts: list[GraphConcept], excluded: np.ndarray | None = None
) -> list[ConceptPair]:
    """Every pair of concepts, best-supported first (major co-annotations, then any
    co-annotation, then question order); articles in ``excluded`` are not counted."""
    major = {c.d: kept_articles(major_articles(store, c.d), excluded) for c in concepts}
    every = {c.d: kept_articles(store.articles_of(c.d), excluded) for c in concepts}
    n = store.n_articles
    # bit tables of the largest lists, kept per build (`kg serve`), for the whole graph
    bits = {
        c.d: article_bits(store, c.d, every[c.d]) if excluded is None else None for c in concepts
    }
    pairs = []
    for a, b in combinations(concepts, 2):
        common, direct = _common(every[a.d], every[b.d], n, bits[a.d], bits[b.d])
        pairs.append(
            ConceptPair(
                a_ui=a.grounding.ui,
                a_name=a.grounding.name,
                b_ui=b.grounding.ui,
                b_name=b.grounding.name,
                major_co_annotations=_common(major[a.d], major[b.d], n)[0],
                co_annotations=common,
                # without exclusions these are the pair's DIRECT articles on the whole graph
                direct=direct if excluded is None else None,
            )
        )
    # stable sort keeps question order among ties
    return sorted(pairs, key=lambda p: (-p.major_co_annotations, -p.co_annotations))
