"""The question path from Python: ``KnowledgeGraph.open(lake).ask(question)``.

ground -> roles -> link (graph picks the pair) -> evidence paths -> refusal ladder -> rank
-> cut. The ladder decides before any generator could. The only model that may run is the
sentence encoder: it embeds the question for the dense ranker when the lake has an
embedding index (``embeddings/index``), and the question's spans for the hybrid grounder
when asked for (``AskConfig.hybrid_threshold``, needs ``concept_index``). Without an index
the evidence is ordered by the structural score, and the answer says which ranker ran.

With a reader (``KnowledgeGraph.open(lake, reader=...)``) an answerable question is then
read: the reader reads the top evidence articles and gives a label, its probability and the
PMIDs it read (``answer/reading.py``); a refusal is never read.

With a verifier (``KnowledgeGraph.open(lake, verifier=...)``, ``answer/verifier.py``) gate 7
runs after ranking: the question, turned into a claim, is checked against the top evidence
articles, and the answer is refused (``verifier_noinfo``) when the verifier finds no
information in every one of them (``LadderConfig.verifier_tau``; None switches it off).
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from kg_platform.answer import RANKERS
from kg_platform.answer.ladder import (
    LadderConfig,
    LadderInput,
    PathCounts,
    RefusalReason,
    Verdict,
    decide,
    run_ladder,
    verifier_gate,
)
from kg_platform.answer.question import Answer, Evidence, RoledGrounding, validate_question
from kg_platform.answer.readers.base import Reader, truncate
from kg_platform.answer.reading import Reading, read_evidence, refused
from kg_platform.answer.titles import TitleLookup
from kg_platform.graph.store import KGStore
from kg_platform.grounding.grounder import Grounder
from kg_platform.grounding.loading import RoleTable, load_grounder
from kg_platform.grounding.roles import Role, RoleConfig
from kg_platform.retrieval.candidates import EvidencePath
from kg_platform.retrieval.exclusion import pair_evidence_excluding, without_articles
from kg_platform.retrieval.linking import ConceptPair, concepts_in_graph, score_pairs
from kg_platform.retrieval.paths import (
    BUDGET_SLICE_LINKS,
    Candidates,
    PairEvidence,
    PathBudget,
    collect_candidates,
    load_kernels,
    pair_evidence,
    pair_evidence_numpy,
    path_flags,
    structural_scores,
    use_compiled,
)
from kg_platform.retrieval.ranking import top_paths
from kg_platform.storage.embeddings import INDEX_MANIFEST
from kg_platform.storage.lake import Lake

# A cold `kg ask` imports only what its question needs: polars (the table-built grounder,
# grounding/loading.py), the encoder and dense index (dense ranker, hybrid grounder) and the
# verifier load inside the functions that use them.
if TYPE_CHECKING:
    from kg_platform.answer.verifier import Verifier
    from kg_platform.embeddings.encoder import Encoder
    from kg_platform.grounding.hybrid import HybridGrounder
    from kg_platform.retrieval.dense import SemanticRanker, SemanticScores

_NONE = np.zeros(0, dtype=np.int64)  # no article excluded
# entered around one concept pair's path search (``KnowledgeGraph.ask(admit=...)``)
Admission = Callable[[ConceptPair], contextlib.AbstractContextManager]


@dataclass(frozen=True)
class AskConfig:
    roles: RoleConfig = field(default_factory=RoleConfig)
    ladder: LadderConfig = field(default_factory=LadderConfig)
    # when the best-supported pair has no path at all, try the next ones, at most this many
    max_pairs_tried: int = 3
    top_pairs_shown: int = 5
    # auto: dense when the lake has an embedding index, else structural
    ranker: str = "auto"
    # None: lexical grounding only; a cosine in (0, 1]: add dense span links (concept_index)
    hybrid_threshold: float | None = None
    # the reader reads the first `reader_k` readable evidence articles, each cut to
    # `reader_chars` characters of title + abstract, and averages their posteriors
    reader_k: int = 3
    reader_chars: int = 3000
    # gate 7: the verifier checks the first `verifier_k` readable evidence articles, each
    # cut to `verifier_chars` characters of title + abstract
    verifier_k: int = 3
    verifier_chars: int = 3000
    # a question under a path-search budget reads the expanded side's citations in slices
    # of about this many links, the clock looked at between two
    path_slice_links: int = BUDGET_SLICE_LINKS

    def __post_init__(self) -> None:
        if self.ranker not in RANKERS:
            raise ValueError(f"ranker {self.ranker!r}: expected one of {RANKERS}")
        if self.hybrid_threshold is not None and not 0.0 < self.hybrid_threshold <= 1.0:
            raise ValueError(f"hybrid threshold {self.hybrid_threshold}: must be in (0, 1]")
        if self.reader_k < 1:
            raise ValueError(f"reader k {self.reader_k}: must be at least 1")
        if self.reader_chars < 1:
            raise ValueError(f"reader chars {self.reader_chars}: must be at least 1")
        if self.path_slice_links < 1:
            raise ValueError(f"path slice links {self.path_slice_links}: must be at least 1")
        if self.verifier_k < 1 or self.verifier_chars < 1:
            raise ValueError(
                f"verifier k {self.verifier_k}, chars {self.verifier_chars}: must be at least 1"
            )


class KnowledgeGraph:
    """Grounder, roles and graph store together: ``ask`` answers or refuses, with reasons."""

    def __init__(
        self,
        lake: Lake,
        grounder: Grounder | HybridGrounder,
        roles: RoleTable,
        store: KGStore,
        config: AskConfig = AskConfig(),
        semantic: SemanticRanker | None = None,
        reader: Reader | None = None,
        verifier: Verifier | None = None,
    ) -> None:
        self.lake = lake
        self.grounder = grounder
        self.store = store
        self.config = config
        self.semantic = semantic
        self.reader = reader
        self.verifier = verifier
        self.title_lookup = TitleLookup(lake)
        # descriptor UI -> (role, reason): a dict, or read per descriptor from the index
        self.roles = roles

    @classmethod
    def open(
        cls,
        lake: Lake | str,
        config: AskConfig = AskConfig(),
        encoder: Encoder | None = None,
        reader: Reader | None = None,
        verifier: Verifier | None = None,
    ) -> KnowledgeGraph:
        """Open the published graph, MeSH tables and (when there and wanted) the embedding
        index and concept index. ``encoder`` defaults to the packaged all-MiniLM-L6-v2,
        loaded only when the dense ranker or the hybrid grounder needs it. ``reader``
        (e.g. ``readers.loading.load_reader(folder)``) answers what the ladder lets through;
        ``verifier`` (e.g. ``verifier.load_verifier(folder)``) turns gate 7 on."""
        lake = Lake(lake) if isinstance(lake, str) else lake
        store = KGStore.open(lake)
        lexical, roles = load_grounder(lake, store, config.roles)
        has_index = lake.exists(INDEX_MANIFEST)
        if config.ranker == "dense" and not has_index:
            raise FileNotFoundError(
                f"{lake.path(INDEX_MANIFEST)}: no embedding index for the dense ranker; "
                "materialise `embedding_index` or use the structural ranker"
            )
        dense = has_index and config.ranker != "structural"
        if encoder is None and (dense or config.hybrid_threshold is not None):
            from kg_platform.embeddings.encoder import Encoder

            encoder = Encoder()
        semantic = None
        if dense:
            from kg_platform.retrieval.dense import DenseIndex, SemanticRanker

            assert encoder is not None
            semantic = SemanticRanker(encoder, DenseIndex.open(lake))
        grounder: Grounder | HybridGrounder = lexical
        if config.hybrid_threshold is not None:
            from kg_platform.embeddings.concepts import ConceptIndex
            from kg_platform.grounding.hybrid import HybridGrounder

            assert encoder is not None
            grounder = HybridGrounder(
                lexical, encoder, ConceptIndex.open(lake), config.hybrid_threshold
            )
        return cls(lake, grounder, roles, store, config, semantic, reader, verifier)

    def with_config(self, config: AskConfig) -> KnowledgeGraph:
        """The same opened graph, grounder, ranker, reader and verifier under ``config``
        (the refusal evaluation's sweeps; nothing is reloaded)."""
        other = copy.copy(self)
        other.config = config
        return other

    @property
    def ranker(self) -> str:
        return "dense" if self.semantic is not None else "structural"

    @property
    def grounder_description(self) -> dict[str, object]:
        threshold = getattr(self.grounder, "threshold", None)
        if threshold is not None:  # a HybridGrounder
            return {"kind": "hybrid", "threshold": threshold}
        return {"kind": "lexical"}

    def ground(self, question: str) -> list[RoledGrounding]:
        text = validate_question(question)
        return [
            RoledGrounding(g, *self.roles.get(g.ui, (Role.FILTER.value, "not_in_mesh_tables")))
            for g in self.grounder.ground(text)
        ]

    def ask(
        self,
        question: str,
        as_of: int | None = None,
        top_k: int = 10,
        excluded: np.ndarray | None = None,
        grounded: list[RoledGrounding] | None = None,
        admit: Admission | None = None,
        path_budget_ms: float | None = None,
    ) -> Answer:
        """Answer or refuse ``question``. ``excluded`` (ascending node indices): the graph
        without those articles (``retrieval/exclusion.py``; the evidence-deletion tiers);
        ``grounded``: these roled groundings instead of grounding the text (the agent's
        refined concepts, ``answer/agent.py``); ``admit``: entered around each pair's path
        search (`kg serve` queues the largest pairs with it; the answer is the same);
        ``path_budget_ms``: the path search's time budget, from its start (a wait in
        ``admit`` included): past it the search stops, and the answer says it was cut
        (``path_search``; a refusal that only the cut caused is ``path_search_cut``). It
        bounds the structural ranker's compiled search; the dense ranker's search and a
        search without some articles (``excluded``) take no budget (None is given)."""
        text = validate_question(question)
        if path_budget_ms is not None:
            PathBudget.start(path_budget_ms)  # a bad budget is refused before any work
        if top_k < 1:
            raise ValueError(f"top_k: must be at least 1, got {top_k}")
        if as_of is not None and not 1000 <= as_of <= 2100:
            raise ValueError(f"as_of: {as_of} is not a plausible publication year")
        clock = _Clock()
        roled = self.ground(text) if grounded is None else list(grounded)
        clock.lap("ground")
        if excluded is not None and excluded.size == 0:
            excluded = None
        bridges = [r.grounding for r in roled if r.role == Role.BRIDGE]
        concepts = concepts_in_graph(self.store, bridges, excluded)
        pairs = score_pairs(self.store, concepts, excluded)
        clock.lap("pairs")
        filters = []
        for r in roled:
            if r.role == Role.FILTER:
                with contextlib.suppress(KeyError):  # a FILTER the graph never saw
                    filters.append(self.store.desc_idx(r.grounding.ui))
        budget = None
        if path_budget_ms is not None and self.semantic is None and excluded is None:
            # the compiled passes, loaded once per process, are not the question's search
            clock.start_up("kernels", load_kernels(self.store))
            budget = PathBudget.start(path_budget_ms)
        if self.semantic is None:
            verdict, evidence, chosen = self._structural(
                text, len(roled), len(concepts), pairs, filters, as_of, top_k, clock,
                excluded, admit, budget,
            )  # fmt: skip
        else:
            verdict, evidence, chosen = self._dense(
                text, len(roled), len(concepts), pairs, filters, as_of, top_k, clock,
                excluded, admit,
            )  # fmt: skip
        clock.lap("rank")
        if verdict.answerable:
            verdict = self._verify(text, verdict, evidence)
            if not verdict.answerable:
                evidence = ()
        reading = self._read(text, verdict, evidence)
        clock.lap("read")
        return Answer(
            question=text,
            as_of=as_of,
            groundings=tuple(roled),
            pairs=tuple(pairs[: self.config.top_pairs_shown]),
            chosen_pair=chosen,
            verdict=verdict,
            evidence=evidence,
            timings_ms=clock.laps,
            graph_build=self.store.build_id,
            ranker=self.ranker,
            grounder=self.grounder_description,
            reading=reading,
            start_up_ms=dict(clock.start_up_ms),
            path_search=budget.to_json() if budget is not None else None,
        )

    def _first_pair_with_paths(
        self,
        pairs: list[ConceptPair],
        collect: Callable,
        count: Callable,
        admit: Admission | None = None,
    ) -> tuple[ConceptPair | None, Any]:
        """The first of the best pairs (at most ``max_pairs_tried``) whose ``collect`` finds
        a path by ``count``, with what it found; else the first pair tried and its (empty)
        result; ``(None, None)`` without pairs. ``admit(pair)`` is entered around each
        ``collect``."""
        chosen, found = None, None
        for pair in pairs[: self.config.max_pairs_tried]:
            with admit(pair) if admit is not None else contextlib.nullcontext():
                tried = collect(pair)
            if chosen is None or count(tried):
                chosen, found = pair, tried
            if count(tried):
                break
        return chosen, found

    def _structural(
        self,
        text: str,
        n_groundings: int,
        n_concepts: int,
        pairs: list[ConceptPair],
        filters: list[int],
        as_of: int | None,
        top_k: int,
        clock: _Clock,
        excluded: np.ndarray | None = None,
        admit: Admission | None = None,
        budget: PathBudget | None = None,
    ) -> tuple[Verdict, tuple[Evidence, ...], ConceptPair | None]:
        """The structural ranker's path: per pair tried, one compiled pass counts the
        candidates at gates 3-6 and keeps the ``top_k`` best (``pair_evidence``); the same
        verdict, counts and evidence as collecting every candidate, flagging, scoring and
        ranking them (``_dense`` without similarity), which ``test_paths_large`` checks.
        Under a ``budget`` each pair's search stops at its deadline (after its first slice);
        a refusal at gates 3-6 after a cut is ``path_search_cut``, and an answer after a cut
        says so in its explanation (its counts are lower bounds, its evidence the best of
        what was read)."""
        ladder = self.config.ladder
        gates = {
            "quotable_gate": ladder.on(RefusalReason.NO_QUOTABLE_TERMINAL),
            "retracted_gate": ladder.on(RefusalReason.ONLY_RETRACTED_EVIDENCE),
            "as_of": as_of if ladder.on(RefusalReason.NO_EVIDENCE_AS_OF_DATE) else None,
        }

        def evidence_of(pair: ConceptPair) -> PairEvidence:
            if excluded is not None:
                return pair_evidence_excluding(self.store, pair, filters, top_k, excluded, **gates)
            # a small pair in a process without the compiled passes: numpy (the same result)
            if not use_compiled(self.store, pair):
                return pair_evidence_numpy(self.store, pair, filters, top_k, **gates)
            clock.start_up("kernels", load_kernels(self.store))
            if budget is None:
                return pair_evidence(self.store, pair, filters, top_k, **gates)
            found = pair_evidence(
                self.store,
                pair,
                filters,
                top_k,
                **gates,
                deadline=budget.deadline,
                slice_links=self.config.path_slice_links,
            )
            budget.note(found)
            return found

        chosen, found = self._first_pair_with_paths(
            pairs, evidence_of, lambda tried: tried.counts["candidates"], admit
        )
        clock.lap("paths")
        counts = PathCounts(**found.counts) if found is not None else PathCounts(0, 0, 0, 0, 0)
        verdict = decide(n_groundings, n_concepts, counts, as_of, ladder)
        clock.lap("ladder")
        verdict = replace(verdict, ranker=self.ranker)
        if budget is not None and budget.cut:
            verdict = _cut(verdict, budget)
        if not verdict.answerable or found is None:
            return verdict, (), chosen
        verdict = replace(verdict, explanation=f"{verdict.explanation} Ranked by structural score.")
        top = found.top
        kept = np.ones(len(top), dtype=bool)
        paths = top_paths(self.store, top, kept, found.scores, path_flags(self.store, top), top_k)
        return verdict, self._evidence(paths), chosen

    def _dense(
        self,
        text: str,
        n_groundings: int,
        n_concepts: int,
        pairs: list[ConceptPair],
        filters: list[int],
        as_of: int | None,
        top_k: int,
        clock: _Clock,
        excluded: np.ndarray | None = None,
        admit: Admission | None = None,
    ) -> tuple[Verdict, tuple[Evidence, ...], ConceptPair | None]:
        """The dense ranker's path: every candidate of the first pair that has any is
        collected, flagged and put through the ladder; every survivor is scored against the
        question, then ranked and cut."""
        chosen, candidates = self._first_pair_with_paths(
            pairs,
            lambda pair: without_articles(
                collect_candidates(self.store, pair), excluded if excluded is not None else _NONE
            ),
            len,
            admit,
        )
        clock.lap("paths")
        if candidates is not None and len(candidates):
            flags = path_flags(self.store, candidates)
        else:
            z = np.zeros(0, dtype=bool)
            flags = {"quotable": z, "retracted": z, "concern": z, "year": z.astype(np.int32)}
        verdict, alive = run_ladder(
            LadderInput(
                n_groundings=n_groundings,
                n_bridge_concepts=n_concepts,
                n_candidates=len(candidates) if candidates is not None else 0,
                quotable=flags["quotable"],
                retracted=flags["retracted"],
                year=flags["year"],
                as_of=as_of,
            ),
            self.config.ladder,
        )
        clock.lap("ladder")
        verdict = replace(verdict, ranker=self.ranker)
        if not verdict.answerable or candidates is None:
            return verdict, (), chosen
        scores = structural_scores(self.store, candidates, filters, flags["concern"])
        # every surviving candidate is scored against this question, then cut
        similarity, semantic = self._similarity(text, candidates, alive)
        verdict = replace(
            verdict,
            signals=_signals(semantic),
            explanation=f"{verdict.explanation} {_dense_note(semantic)}",
        )
        paths = top_paths(self.store, candidates, alive, scores, flags, top_k, similarity)
        return verdict, self._evidence(paths), chosen

    def _evidence(self, paths: list[EvidencePath]) -> tuple[Evidence, ...]:
        titles = self._titles([p.terminal.pmid for p in paths])
        return tuple(Evidence(p, titles.get(p.terminal.pmid)) for p in paths)

    def _verify(self, question: str, verdict: Verdict, evidence: tuple[Evidence, ...]) -> Verdict:
        """Gate 7: the verifier on the question's claim against the first readable evidence
        articles (unchanged without a verifier or with the gate off)."""
        tau = self.config.ladder.verifier_tau
        if (
            self.verifier is None
            or tau is None
            or not self.config.ladder.on(RefusalReason.VERIFIER_NOINFO)
        ):
            return verdict
        from kg_platform.answer.claims import claim_from_question
        from kg_platform.answer.verifier import NOINFO, VERDICTS

        claim = claim_from_question(question) or question
        order = list(dict.fromkeys(e.path.terminal.pmid for e in evidence))
        found = self.title_lookup.texts(order)
        pmids = [p for p in order if found.get(p, "").strip()][: self.config.verifier_k]
        texts = [truncate(found[p], self.config.verifier_chars) for p in pmids]
        rows = self.verifier.scores(claim, texts) if texts else np.zeros((0, 3), np.float32)
        p_noinfo = np.asarray(rows, dtype=np.float64)[:, NOINFO]
        check = {
            "verifier": str(getattr(self.verifier, "name", type(self.verifier).__name__)),
            "claim": claim,
            "tau": tau,
            "p_noinfo": round(float(p_noinfo.min()), 6) if len(p_noinfo) else None,
            "read": [
                {
                    "pmid": p,
                    **{
                        f"p_{v.lower()}": round(float(x), 6)
                        for v, x in zip(VERDICTS, r, strict=True)
                    },
                }
                for p, r in zip(pmids, rows, strict=True)
            ],
        }
        return verifier_gate(verdict, check, p_noinfo, tau)

    def _read(self, question: str, verdict: Verdict, evidence: tuple[Evidence, ...]) -> Reading:
        if not verdict.answerable:
            return refused()
        if self.reader is None:
            return Reading()
        return read_evidence(
            self.reader,
            question,
            [e.path.terminal.pmid for e in evidence],
            self.title_lookup,
            self.config.reader_k,
            self.config.reader_chars,
        )

    def _similarity(
        self, question: str, candidates: Candidates, alive: np.ndarray
    ) -> tuple[np.ndarray, SemanticScores]:
        """Question-terminal cosine aligned with every candidate (NaN where not alive or
        without a vector), and the ranker's signals over the alive ones."""
        assert self.semantic is not None
        rows = np.flatnonzero(alive)
        pmids = np.asarray(self.store.array("pmids"))[candidates.terminal[rows]]
        semantic = self.semantic.score(question, pmids)
        similarity = np.full(len(candidates), np.nan, dtype=np.float64)
        similarity[rows] = semantic.scores
        return similarity, semantic

    def _titles(self, pmids: list[int]) -> dict[int, str | None]:
        # the graph build's title store (slices of mapped bytes); a build of format 1 has
        # none and the articles file is read by row group. A corpus without titles
        # (synthetic benchmarks) gives none: evidence still stands
        if self.store.has_titles:
            return self.store.titles(pmids)
        return self.title_lookup.titles(pmids)


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 6)


def _signals(semantic: SemanticScores) -> dict[str, float | int | None]:
    # NaN (no candidate with a vector) is not JSON: it becomes null
    return {k: _finite(v) if isinstance(v, float) else v for k, v in semantic.signals().items()}


def _dense_note(semantic: SemanticScores) -> str:
    if semantic.embedded == 0:
        return (
            "Ranked by dense similarity, but no candidate has a vector in the embedding "
            "index, so the structural score orders them."
        )
    return (
        f"Ranked by dense similarity ({semantic.embedded} of {semantic.candidates} with a "
        f"vector; top-1 {semantic.top1:.3f}, mean top-8 {semantic.mean_top8:.3f})."
    )


def _cut(verdict: Verdict, budget: PathBudget) -> Verdict:
    """The verdict of a path search its budget cut short: a refusal at gates 3-6 becomes
    ``path_search_cut`` (what was not read may hold evidence); an answer says it was cut."""
    read = f"after reading {budget.links_read:,} of {budget.links:,} citation links"
    if verdict.answerable:
        return replace(
            verdict,
            explanation=f"{verdict.explanation} The path search was cut by its "
            f"{budget.ms:g} ms budget {read}: the counts are lower bounds and the evidence "
            "is the best of what was read.",
        )
    if verdict.gate is None or not 3 <= verdict.gate <= 6:
        return verdict
    return replace(
        verdict,
        reason=RefusalReason.PATH_SEARCH_CUT,
        gate=3,
        explanation=f"The path search was cut by its {budget.ms:g} ms budget {read}, before "
        f"it found enough evidence ({verdict.reason.value if verdict.reason else ''} on what "
        "was read); without a budget it may answer.",
    )


class _Clock:
    """Milliseconds per stage of one question; one-off start-up work done on the way (the
    compiled passes loaded by the first large pair) is kept apart and left out of them."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self.start_up_ms: dict[str, float] = {}
        self._last = time.perf_counter()
        self._aside = 0.0

    def start_up(self, what: str, ms: float) -> None:
        if ms:
            self.start_up_ms[what] = self.start_up_ms.get(what, 0.0) + ms
            self._aside += ms

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.laps[stage] = round((now - self._last) * 1000.0 - self._aside, 3)
        self._last = now
        self._aside = 0.0
