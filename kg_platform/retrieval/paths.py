"""Evidence paths between a concept pair, kept as numpy arrays until the final cut.

- DIRECT: an article carrying both descriptors.
- BRIDGE: an article about one concept (major topic) that cites, or is cited by, an article
  about the other (one hop).

Every candidate is scored; the cut to ``top_k`` happens only after ranking all of them (the
reference lost the gold document on 40.8% of questions to a cap applied before its ranker).
Every path gets a transparent structural score (``structural_scores``); when the lake has an
embedding index the question path also passes each terminal's question-evidence similarity,
which then leads the order (``ranking.rank_rows``). ``ranking.top_rows`` gives the first
``top_k`` rows of that order by partitioning every kept row on the ranking keys and sorting
only the chosen ones: a pair of giant descriptors has hundreds of thousands of candidates,
and a full sort of them cost more than everything else on the question path.

Over such a pair (a million candidates and more) each numpy step was a pass of its own:
expanding the citations, keeping the far ends, repeating the origins, gathering flags, years
and in-degrees. ``collect_candidates``, ``path_flags`` and ``structural_scores`` each run as
one compiled loop over the rows (``kg_platform.graph.path_passes``) with the same rows, flags
and scores bit for bit; the numpy versions are kept in ``numpy_passes.py``, which the
tests and ``benchmarks/ask.py`` compare against. The paths' types are ``candidates.py``.

The question path with the structural ranker needs less than all of that: the counts the
ladder's gates 3-6 look at and the ``top_k`` best surviving paths. ``pair_evidence`` gives
exactly those in one compiled pass that keeps no array per candidate (every candidate is
still flagged, counted and scored before the cut). The dense ranker scores every survivor
against the question, so it keeps the arrays.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from dataclasses import dataclass

import numpy as np

from kg_platform.graph.layout import CONCERN, QUOTABLE, RETRACTED
from kg_platform.graph.store import KGStore
from kg_platform.retrieval import numpy_passes
from kg_platform.retrieval.candidates import (
    CITED_BY,
    CITES,
    DIRECT,
    NO_HOP,
    Candidates,
    membership,
)
from kg_platform.retrieval.linking import ConceptPair, major_articles
from kg_platform.retrieval.ranking import top_rows


def _far_lookup(far: np.ndarray, lookups: int, n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """``(table, ascending)`` for ``path_passes.links``: a bit per node set for ``far``
    (``path_passes.bitset``) and no list, or where a binary search is cheaper, no table
    and the far nodes. A bit table costs ~0.01 ns per node to clear and ~2 ns per far node
    to set, then a few ns per value read from the cache; a binary search ~12 ns per level
    per value."""
    from kg_platform.graph import path_passes

    levels = float(np.log2(far.size + 1))
    if lookups * (levels + 1.0) * 12.0 <= 0.01 * n_nodes + 2.0 * far.size:
        return np.zeros(0, dtype=np.uint64), far
    return path_passes.bitset(far, n_nodes), far[:0]


_MAJOR_READS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def major_reads(store: KGStore, descriptors: np.ndarray | None = None) -> np.ndarray:
    """The citations (both directions) of each descriptor's major articles in all: what
    expanding that side of a pair reads. Per graph build, kept with the store and made per
    descriptor on its first question (all of them with ``descriptors=None``, as `kg serve`
    does when it opens a build)."""
    from kg_platform.graph import path_passes

    known = _MAJOR_READS.get(store)
    if known is None:
        known = np.full(store.n_descriptors, -1, dtype=np.int64)
        _MAJOR_READS[store] = known
    wanted = np.arange(known.size) if descriptors is None else np.asarray(descriptors)
    todo = wanted[known[wanted] < 0]
    if todo.size:
        found = np.empty(todo.size, dtype=np.int64)
        path_passes.major_reads(
            *(store.array(f"mesh2art_{name}") for name in ("indptr", "indices", "major")),
            store.array("cite_indptr"), store.array("cited_by_indptr"), todo, found,
        )  # fmt: skip
        known[todo] = found
    return known[wanted]


@dataclass(frozen=True)
class _BridgePlan:
    """How a pair's candidates are found: its DIRECT articles, and the side whose major
    articles' citations are expanded (``near``) with the test for the other side's."""

    direct: np.ndarray
    near: np.ndarray
    table: np.ndarray  # a boolean table over every node, or empty with ``ascending``
    ascending: np.ndarray
    from_b: bool
    reads: int
    csr: dict[str, tuple[np.ndarray, np.ndarray]]
    near_d: int = -1  # the descriptor whose major articles are ``near``
    # the far side is on under 1/16 of the nodes: few links are kept (``_far_packed``)
    sparse: bool = False


def _bridge_plan(store: KGStore, pair: ConceptPair) -> _BridgePlan:
    """BRIDGE paths are found from whichever side has fewer citations to read: ``a cites
    b`` is ``b cited_by a``, so expanding the b-side major articles and swapping source and
    terminal gives the same paths at a cost proportional to the smaller side."""
    from kg_platform.graph import path_passes  # numba loads with the first question

    a, b = store.desc_idx(pair.a_ui), store.desc_idx(pair.b_ui)
    direct = pair.direct  # found by ``score_pairs`` on the whole graph, when it was
    if direct is None:
        direct = path_passes.intersect(store.articles_of(a), store.articles_of(b))
    a_major, b_major = major_articles(store, a), major_articles(store, b)
    kinds = ("cite", "cited_by")
    csr = {kind: (store.array(f"{kind}_indptr"), store.array(f"{kind}_indices")) for kind in kinds}
    # which side has fewer citations to read (per descriptor, kept with the store)
    a_reads, b_reads = major_reads(store, np.array([a, b])).tolist()
    from_b = b_reads < a_reads
    near, far, reads = (b_major, a_major, b_reads) if from_b else (a_major, b_major, a_reads)
    table, ascending = _far_lookup(far, reads, store.n_articles)
    near_d = int(b if from_b else a)
    sparse = far.size * SPARSE_SHARE < store.n_articles
    return _BridgePlan(
        direct, near, table, ascending, bool(from_b), int(reads), csr, near_d, sparse
    )


# a far side on under 1/SPARSE_SHARE of the articles keeps few of the links read: a packed
# side's pass then writes a row only when kept (``path_passes._far_packed``)
SPARSE_SHARE = 16


# A near side of at least this many citation links is read from a packed copy of its links
# (``packed_links``) in a process that keeps them (`kg serve`: ``keep_packed``), up to
# ``keep_packed``'s bytes per graph build.
PACK_MIN_LINKS = 65_536
PACKED_LINKS_BYTES = 256 << 20
_PACKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_PACK_LOCK = threading.Lock()
_EMPTY_PTR = np.zeros(0, dtype=np.int64)
_EMPTY_LINKS = np.zeros(0, dtype=np.int32)
_NOT_PACKED = {kind: (_EMPTY_PTR, _EMPTY_LINKS) for kind in ("cite", "cited_by")}


def keep_packed(store: KGStore, limit_bytes: int = PACKED_LINKS_BYTES) -> None:
    """Keep, for this graph build, the packed links of every near side of at least
    ``PACK_MIN_LINKS`` links that a question expands, each made on its first question, up
    to ``limit_bytes`` in all (first made, first kept). `kg serve` does this when it opens a
    build: the same large descriptors come back question after question."""
    if limit_bytes < 0:
        raise ValueError(f"packed links: limit {limit_bytes} bytes, must be 0 or more")
    with _PACK_LOCK:
        if store not in _PACKED:
            _PACKED[store] = {None: 0, "limit": int(limit_bytes)}


def packed_links(
    store: KGStore, d: int, near: np.ndarray, reads: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """For each direction (``cite``, ``cited_by``): the links of every node of ``near``
    (descriptor ``d``'s major articles, ``reads`` links in both directions) copied out in
    order as 32-bit node indices, and where each node's start (``path_passes.pack_links``):
    one sequential read where the graph's lists are scattered over it, the same links in
    the same order. Empty arrays (read the graph's lists) for a small side, in a process
    that does not keep them (``keep_packed``), or past its limit."""
    from kg_platform.graph import path_passes

    if reads < PACK_MIN_LINKS:
        return _NOT_PACKED
    with _PACK_LOCK:
        kept = _PACKED.get(store)
        found = kept.get(d) if kept is not None else None
    if found is not None:
        return found
    size = 4 * reads + 2 * 8 * (near.size + 1)
    if kept is None or kept[None] + size > kept["limit"]:
        return _NOT_PACKED
    found = {}
    for kind in ("cite", "cited_by"):
        indptr, indices = store.array(f"{kind}_indptr"), store.array(f"{kind}_indices")
        ptr = np.empty(near.size + 1, dtype=np.int64)
        out = np.empty(int(indptr[near + 1].sum() - indptr[near].sum()), dtype=np.int32)
        path_passes.pack_links(indptr, indices, near, ptr, out)
        found[kind] = (ptr, out)
    with _PACK_LOCK:
        if d not in kept and kept[None] + size <= kept["limit"]:
            kept[d] = found
            kept[None] += size
    return found


def collect_candidates(store: KGStore, pair: ConceptPair) -> Candidates:
    """All DIRECT and BRIDGE paths of ``pair``; nothing is capped here.

    Rows come DIRECT first, then CITES, then CITED_BY; the order within a block is not part
    of the contract (``rank_rows`` orders by explicit keys). The BRIDGE links are found from
    the cheaper side (``_bridge_plan``) and written straight into the candidate arrays, one
    compiled pass per direction (``kg_platform.graph.path_passes``)."""
    from kg_platform.graph import path_passes

    plan = _bridge_plan(store, pair)
    direct = plan.direct
    # room for every link read; only the rows written are kept
    rows = direct.size + plan.reads
    kind = np.empty(rows, dtype=np.int8)
    source = np.empty(rows, dtype=np.int64)
    terminal = np.empty(rows, dtype=np.int64)
    relation = np.empty(rows, dtype=np.int8)
    kind[: direct.size] = DIRECT
    source[: direct.size] = direct
    terminal[: direct.size] = direct
    relation[: direct.size] = NO_HOP
    at = direct.size
    for r in (CITES, CITED_BY):
        # b --cites--> a is a <--cited-by-- b: from b, the CITES rows are b's cited_by links
        expanded = ("cite", "cited_by")[(r == CITES) == plan.from_b]
        indptr, indices = plan.csr[expanded]
        at = path_passes.links(
            indptr, indices, plan.near, plan.table, plan.ascending, plan.from_b, r,
            kind, source, terminal, relation, at,
        )  # fmt: skip
    return Candidates(pair, kind[:at], source[:at], terminal[:at], relation[:at])


@dataclass(frozen=True)
class PairEvidence:
    """What the structural question path needs of a pair, from ``pair_evidence``: the
    candidate counts at gates 3-6 (``candidates``, ``quotable``, ``unretracted``, ``as_of``,
    ``evidence``, as ``answer.ladder.PathCounts`` names them) and the best ``top_k`` alive
    rows, in ``rank_rows`` order, with their structural scores."""

    pair: ConceptPair
    counts: dict[str, int]
    top: Candidates
    scores: np.ndarray
    # a budgeted search (``deadline``): the citation links of the expanded side read, of
    # how many, and whether the deadline stopped it before it read them all (then the
    # counts are lower bounds and ``top`` the best of the rows read)
    links_read: int = 0
    links: int = 0
    cut: bool = False


# a search with a deadline reads the expanded side's citations in slices of about this many
# links and looks at the clock between two (a slice costs ~5 ms of CPU at 10M articles)
BUDGET_SLICE_LINKS = 65_536


@dataclass
class PathBudget:
    """A question's time budget for its path search: ``deadline`` on ``time.perf_counter``,
    and what the searches under it read (``note``), over every pair tried."""

    ms: float
    deadline: float
    cut: bool = False
    links_read: int = 0
    links: int = 0

    @classmethod
    def start(cls, ms: float) -> PathBudget:
        if not ms > 0.0 or ms != ms or ms == float("inf"):
            raise ValueError(f"path budget {ms!r} ms: must be a positive number of milliseconds")
        return cls(float(ms), time.perf_counter() + ms / 1000.0)

    def note(self, found: PairEvidence) -> None:
        self.cut = self.cut or found.cut
        self.links_read += found.links_read
        self.links += found.links

    def to_json(self) -> dict:
        return {
            "budget_ms": self.ms,
            "cut": self.cut,
            "links_read": self.links_read,
            "links": self.links,
        }


def _slices(
    plan: _BridgePlan,
    slice_links: int,
    packed: dict[str, tuple[np.ndarray, np.ndarray]] = _NOT_PACKED,
) -> list[tuple[int, int, int]]:
    """``plan.near`` as ``(start, end, links)`` slices in order, each of about
    ``slice_links`` citation links (a node with more is a slice of its own). Each node's
    links are counted from the ``packed`` links' offsets when given (read in order), else
    from the graph's (two scattered reads a node and direction)."""
    near = plan.near
    degree = np.zeros(near.size, dtype=np.int64)
    for kind in ("cite", "cited_by"):
        ptr = packed[kind][0]
        if ptr.size:
            degree += ptr[1:]
            degree -= ptr[:-1]
            continue
        indptr = plan.csr[kind][0]
        degree += indptr[near + 1]
        degree -= indptr[near]
    ends = np.cumsum(degree)
    targets = np.arange(slice_links, int(ends[-1]) if ends.size else 0, slice_links)
    # after the nodes whose links end at or before each multiple of slice_links
    bounds = np.unique(np.concatenate([[0], np.searchsorted(ends, targets, "right"), [near.size]]))
    before = np.concatenate([[0], ends])
    return [
        (lo, hi, int(before[hi] - before[lo]))
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)
    ] or [(0, 0, 0)]


def _packed_slice(
    packed: tuple[np.ndarray, np.ndarray], lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray]:
    """The packed links' offsets of near nodes ``lo`` to ``hi`` and all the links (empty
    when not packed)."""
    ptr, links = packed
    return (ptr[lo : hi + 1], links) if ptr.size else packed


_DEGREE_TERMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _degree_term(store: KGStore) -> np.ndarray:
    """``0.1 * log1p(d)`` for every in-degree up to the graph's largest, made as
    ``structural_scores`` makes its table (so the same values bit for bit); once per store."""
    term = _DEGREE_TERMS.get(store)
    if term is None:
        indptr = store.array("cited_by_indptr")
        top = int(np.diff(indptr).max()) if indptr.size > 1 else 0
        term = np.log1p(np.arange(top + 1, dtype=np.float64))
        term *= 0.1
        _DEGREE_TERMS[store] = term
    return term


def pair_evidence(
    store: KGStore,
    pair: ConceptPair,
    filter_descriptors: list[int],
    top_k: int,
    quotable_gate: bool = True,
    retracted_gate: bool = True,
    as_of: int | None = None,
    deadline: float | None = None,
    slice_links: int = BUDGET_SLICE_LINKS,
) -> PairEvidence:
    """``collect_candidates``, ``path_flags``, the counts of gates 3-6 and
    ``top_rows(c, alive, structural_scores(...), top_k)`` in one compiled pass that keeps no
    per-candidate array: the same counts, rows, order and scores bit for bit. The gates are
    the ladder's: the quotable-terminal gate, the retraction gate and an as-of year (None:
    no cutoff), each as configured.

    ``deadline`` (a ``time.perf_counter`` value; None: none): the pass runs over slices of
    the expanded side of about ``slice_links`` links each (the DIRECT articles with the
    first), the clock looked at between two; past the deadline the rest is not read and the
    result says so (``cut``). Uncut, the counts, rows and scores are the single pass's
    (each slice keeps its best ``top_k`` rows; the best of those are the best of all)."""
    from kg_platform.graph import path_passes

    if top_k < 1:
        raise ValueError(f"top_k: must be at least 1, got {top_k}")
    if store.n_articles >= 2**31:  # the pass keeps node indices in 32 bits
        raise ValueError(f"graph build {store.build_id}: {store.n_articles} articles, over 2**31")
    years = store.array("year")
    if years.dtype != np.int16:
        raise TypeError(f"graph build {store.build_id}: year is {years.dtype}, expected int16")
    if slice_links < 1:
        raise ValueError(f"slice_links: must be at least 1, got {slice_links}")
    plan = _bridge_plan(store, pair)
    packed = packed_links(store, plan.near_d, plan.near, plan.reads)
    lists = [store.articles_of(d) for d in filter_descriptors]
    filter_offsets = np.cumsum([0] + [x.size for x in lists], dtype=np.int64)
    filter_articles = np.concatenate(lists) if lists else np.zeros(0, dtype=np.int64)
    counts = np.zeros(5, dtype=np.int64)
    if deadline is None or plan.reads <= slice_links:
        slices = [(0, plan.near.size, plan.reads)]
    else:
        slices = _slices(plan, slice_links, packed)
    kept_rows, kept_score = [], []
    links_read, cut = 0, False
    for at, (lo, hi, reads) in enumerate(slices):
        if at and time.perf_counter() > deadline:  # type: ignore[operator]
            cut = True
            break
        part = np.zeros(5, dtype=np.int64)
        heap_score = np.empty(top_k, dtype=np.float64)
        heap_rows = np.empty((top_k, 4), dtype=np.int64)
        held = path_passes.pair_evidence(
            plan.direct if at == 0 else plan.direct[:0], plan.near[lo:hi], plan.table,
            plan.ascending, plan.from_b, reads,
            *plan.csr["cite"], *plan.csr["cited_by"],
            store.array("flags"), years,
            np.array([QUOTABLE, RETRACTED, CONCERN], dtype=np.int64),
            np.array([quotable_gate, retracted_gate, as_of or 0], dtype=np.int64),
            _degree_term(store), _YEAR_TERM, 32768, filter_articles, filter_offsets,
            part, heap_score, heap_rows,
            *_packed_slice(packed["cite"], lo, hi), *_packed_slice(packed["cited_by"], lo, hi),
            plan.sparse,
        )  # fmt: skip
        counts += part
        kept_rows.append(heap_rows[:held])
        kept_score.append(heap_score[:held])
        links_read += reads
    rows = kept_rows[0] if len(kept_rows) == 1 else np.concatenate(kept_rows)
    score = kept_score[0] if len(kept_score) == 1 else np.concatenate(kept_score)
    order = np.lexsort([rows[:, 1], rows[:, 3], rows[:, 2], -score])[:top_k]
    rows, score = rows[order], score[order]
    top = Candidates(
        pair,
        rows[:, 0].astype(np.int8),
        rows[:, 1].copy(),
        rows[:, 2].copy(),
        rows[:, 3].astype(np.int8),
    )
    names = ("candidates", "quotable", "unretracted", "as_of", "evidence")
    return PairEvidence(
        pair,
        dict(zip(names, counts.tolist(), strict=True)),
        top,
        score,
        links_read,
        plan.reads,
        cut,
    )


# A pair whose candidates (DIRECT articles plus the citations of its cheaper side) number
# at most this many is found by the numpy passes in a process that has not loaded the
# compiled ones: loading them (numba's import and cached overloads) costs more than the numpy
# passes take below this size, which run at about the compiled passes' speed per candidate
# (benchmarks/ask_at_scale.py and benchmarks/cold_ask.py measure the cold path;
# docs/BENCHMARKS.md, *Asking at 10M articles*).
NUMPY_MAX_CANDIDATES = 5_000_000
_PATH_PASSES = "kg_platform.graph.path_passes"


def kernels_loaded() -> bool:
    """Whether this process has loaded the compiled passes (then they are always used)."""
    return _PATH_PASSES in sys.modules


def candidate_bound(store: KGStore, pair: ConceptPair) -> int:
    """An upper bound of the pair's candidates without the compiled passes: its DIRECT
    articles (at most the rarer side's) plus the citations of its side with fewer."""
    a, b = store.desc_idx(pair.a_ui), store.desc_idx(pair.b_ui)
    kinds = ("cite", "cited_by")
    reads = min(
        sum(
            numpy_passes.neighbour_count(store, kind, store.articles_of(d, major_only=True))
            for kind in kinds
        )
        for d in (a, b)
    )
    return reads + min(store.articles_of(a).size, store.articles_of(b).size)


def use_compiled(store: KGStore, pair: ConceptPair) -> bool:
    """The compiled passes when they are loaded or the pair is large; else numpy."""
    return kernels_loaded() or candidate_bound(store, pair) > NUMPY_MAX_CANDIDATES


def load_kernels(store: KGStore) -> float:
    """Load (from numba's cache, compiling on a first run) every compiled pass the
    structural question path calls, with this store's array types, on a tiny pair of the
    graph itself; returns the milliseconds it took (0 when already loaded)."""
    if kernels_loaded():
        return 0.0
    started = time.perf_counter()
    ui = store.mesh_ui(0)
    pair = ConceptPair(ui, ui, ui, ui, 0, 0)
    for filters in ([], [0]):
        found = pair_evidence(store, pair, filters, 1)
    path_flags(store, found.top)
    return round((time.perf_counter() - started) * 1000.0, 3)


def gate_candidates(
    flags: dict, n: int, quotable_gate: bool, retracted_gate: bool, as_of: int | None
) -> tuple[np.ndarray, dict[str, int]]:
    """Gates 3-5 over a pair's candidate flags (numpy): the rows still alive and the
    ladder's counts after each gate."""
    quotable = flags["quotable"]
    alive = quotable.copy() if quotable_gate else np.ones(n, dtype=bool)
    n_unretracted = n_as_of = 0
    if retracted_gate:
        alive &= ~flags["retracted"]
        n_unretracted = int(alive.sum())
    if as_of:
        alive &= (flags["year"] > 0) & (flags["year"] <= as_of)
        n_as_of = int(alive.sum())
    counts = {
        "candidates": n,
        "quotable": int(quotable.sum()),
        "unretracted": n_unretracted,
        "as_of": n_as_of,
        "evidence": int(alive.sum()),
    }
    return alive, counts


def pair_evidence_numpy(
    store: KGStore,
    pair: ConceptPair,
    filter_descriptors: list[int],
    top_k: int,
    quotable_gate: bool = True,
    retracted_gate: bool = True,
    as_of: int | None = None,
) -> PairEvidence:
    """``pair_evidence`` by the numpy passes (``numpy_passes`` and ``top_rows``): the same
    counts, rows, order and scores, with every candidate's arrays kept. For a pair small
    enough that loading the compiled passes would cost more than the numpy passes."""
    if top_k < 1:
        raise ValueError(f"top_k: must be at least 1, got {top_k}")
    c = numpy_passes.collect_candidates(store, pair)
    flags = numpy_passes.path_flags(store, c)
    alive, counts = gate_candidates(flags, len(c), quotable_gate, retracted_gate, as_of)
    scores = numpy_passes.structural_scores(store, c, filter_descriptors, flags["concern"])
    rows = top_rows(c, alive, scores, top_k) if counts["evidence"] else np.zeros(0, np.int64)
    top = Candidates(
        pair,
        c.kind[rows].astype(np.int8),
        c.source[rows].astype(np.int64),
        c.terminal[rows].astype(np.int64),
        c.relation[rows].astype(np.int8),
    )
    return PairEvidence(pair, counts, top, scores[rows])


def path_flags(store: KGStore, c: Candidates) -> dict[str, np.ndarray]:
    """Per candidate: quotable terminal, retracted anywhere on the path, concern anywhere,
    newest year on the path (0 when unknown); one compiled pass over the rows (numpy's,
    ``numpy_passes.path_flags``, in a process without the compiled passes: the same flags)."""
    if not kernels_loaded():
        return numpy_passes.path_flags(store, c)
    from kg_platform.graph import path_passes

    n = len(c)
    out = {
        "quotable": np.empty(n, dtype=bool),
        "retracted": np.empty(n, dtype=bool),
        "concern": np.empty(n, dtype=bool),
        "year": np.empty(n, dtype=np.int32),
    }
    path_passes.flags(
        store.array("flags"), store.array("year"), c.source, c.terminal,
        QUOTABLE, RETRACTED, CONCERN,
        out["quotable"], out["retracted"], out["concern"], out["year"],
    )  # fmt: skip
    return out


def _year_term() -> np.ndarray:
    """The score's year term of every int16 year, at year + 32768, made with the
    formula's own operations: clip(year - 1900, 0, 200) / 2000."""
    term = np.arange(-32768, 32768, dtype=np.float64)
    term -= 1900.0
    np.clip(term, 0.0, 200.0, out=term)
    term /= 2000.0
    return term


_YEAR_TERM = _year_term()


def structural_scores(
    store: KGStore, c: Candidates, filter_descriptors: list[int], concern: np.ndarray
) -> np.ndarray:
    """DIRECT outranks BRIDGE; a terminal that also carries the question's FILTER concepts
    ranks higher; well-cited terminals and newer ones break ties; a path touching an
    expression of concern ranks lower.

    score = base + 0.5 per FILTER carried + 0.1 * log1p(in_degree)
    + clip(year - 1900, 0, 200) / 2000 - 0.5 * concern, each row's terms added in that
    order in one compiled pass; the in-degree and year terms come from tables made by the
    same numpy operations over every value that occurs, so every score is the plain
    formula's bit for bit."""
    from kg_platform.graph import path_passes

    terminal = c.terminal
    years = store.array("year")
    if years.dtype != np.int16:
        raise TypeError(f"graph build {store.build_id}: year is {years.dtype}, expected int16")
    carried = np.zeros(terminal.size if filter_descriptors else 0, dtype=np.uint8)
    for d in filter_descriptors:
        articles = store.articles_of(d)
        carried += membership(articles, terminal.size, store.n_articles)(terminal)
    degree = np.empty(terminal.size, dtype=np.int64)
    top = path_passes.in_degrees(store.array("cited_by_indptr"), terminal, degree)
    degree_term = np.log1p(np.arange(top + 1, dtype=np.float64))
    degree_term *= 0.1
    score = np.empty(terminal.size, dtype=np.float64)
    path_passes.scores(
        c.kind == DIRECT, carried, degree, degree_term, terminal, years, _YEAR_TERM, 32768,
        np.asarray(concern, dtype=bool), score,
    )  # fmt: skip
    return score
