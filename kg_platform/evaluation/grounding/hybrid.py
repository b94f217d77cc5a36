"""Lexical versus hybrid grounding on PubMedQA, at several dense-link thresholds.

Same gold and the same metrics as the grounding evaluation (``grounding/evaluation.py``): the gold
article's own MeSH headings, mapped to descriptor UIs through the MeSH terms; BRIDGE
precision, recall and coverage are computed by ``evaluate_grounding`` itself, fed the
groundings of each threshold. On top of those figures this reports what the dense links
add: how many there are, how many are gold headings, the worst spurious ones (most
frequent, then highest cosine), and, when the lake holds a graph, what the graph's pair
selection keeps of them (the best-supported pair) and what it discards.

Every question's span links are computed once, with every candidate span's best concept
and cosine; each threshold then only selects from them, exactly as
``HybridGrounder.ground`` does.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import polars as pl

from kg_platform.embeddings.concepts import (
    CONCEPT_MANIFEST,
    MESH_TERMS,
    ConceptIndex,
    build_concept_index,
    concept_surfaces,
)
from kg_platform.embeddings.encoder import Encoder
from kg_platform.evaluation.common.contracts import MIN_PRECISION
from kg_platform.evaluation.grounding.evaluation import (
    GroundingEvaluation,
    PubmedqaQuestion,
    evaluate_grounding,
    graph_counts,
    heading_index,
    load_pubmedqa,
    mesh_frames,
)
from kg_platform.graph.store import KGStore
from kg_platform.grounding.grounder import Grounder, Grounding, question_words
from kg_platform.grounding.hybrid import DENSE_KIND, HybridGrounder, SpanLink
from kg_platform.grounding.roles import Role, RoleConfig, assign_roles
from kg_platform.retrieval.linking import concepts_in_graph, score_pairs
from kg_platform.storage.lake import Lake
from kg_platform.storage.reports import GROUNDING_HYBRID as REPORT_PREFIX
from kg_platform.text.normalise import normalise

DEFAULT_THRESHOLDS = (0.80, 0.85, 0.90, 0.95)
# the threshold rule: the most coverage among thresholds that keep BRIDGE precision at the
# grounding target of the question-path issue (MIN_PRECISION, in contracts: at least 0.70)


@dataclass(frozen=True)
class SpuriousDenseLink:
    """A dense BRIDGE link that is not a gold heading, aggregated over questions."""

    span: str
    ui: str
    name: str
    term: str  # the MeSH surface it matched
    count: int
    best_cosine: float
    example_pmids: tuple[str, ...]


@dataclass(frozen=True)
class PairSelection:
    """What the graph's pair choice (the best-supported pair of BRIDGE concepts the graph
    knows) does with the dense links of one threshold."""

    questions_with_pair: int  # at least two BRIDGE concepts the graph knows
    chosen_pairs_with_support: int  # chosen pair has at least one co-annotated article
    chosen_pairs_with_dense: int
    dense_bridge_in_graph: int  # dense BRIDGE links the graph knows
    dense_in_chosen_pair: int
    dense_discarded: int  # known to the graph but not in the chosen pair
    spurious_dense_in_chosen_pair: int
    spurious_dense_discarded: int


@dataclass(frozen=True)
class ThresholdReport:
    threshold: float | None  # None: lexical only
    grounding: GroundingEvaluation
    dense_links: int  # dense groundings of any role
    dense_bridge: int
    dense_bridge_hits: int
    dense_precision: float  # dense BRIDGE links that are gold headings
    questions_newly_covered: int  # two BRIDGE concepts now, fewer than two lexically
    worst_dense: tuple[SpuriousDenseLink, ...] = field(default_factory=tuple)
    pair_selection: PairSelection | None = None


@dataclass(frozen=True)
class ConceptIndexInfo:
    surfaces: int
    descriptors: int
    location: str
    built_now: bool
    build_seconds: float | None  # None: reused, and the build did not record it
    embedded: int | None = None  # surfaces the build embedded (None: not recorded)
    reused: int | None = None  # surfaces whose vectors came from the vector cache


@dataclass(frozen=True)
class HybridEvaluation:
    n: int
    rows: tuple[ThresholdReport, ...]  # lexical first, then each threshold ascending
    chosen_threshold: float | None
    rule: str
    span_link_seconds: float
    graph_build: str | None  # None: no graph, pair selection not measured
    concept_index: ConceptIndexInfo | None = None

    def to_json(self) -> dict:
        return asdict(self)


class _FixedGroundings:
    """The groundings already chosen for each question, behind the grounder interface that
    ``evaluate_grounding`` calls (``ground`` and ``names``)."""

    def __init__(self, by_question: Mapping[str, list[Grounding]], names: Mapping[str, str]):
        self.by_question = by_question
        self.names = names

    def ground(self, question: str) -> list[Grounding]:
        return self.by_question[question]


@dataclass(frozen=True)
class LinkedQuestion:
    """A question with its lexical groundings and the span links of what they left."""

    question: PubmedqaQuestion
    lexical: list[Grounding]
    links: list[SpanLink]
    n_words: int
    gold: frozenset[str]


def gold_uis(question: PubmedqaQuestion, headings: Mapping[str, str]) -> frozenset[str]:
    """The question's gold headings as descriptor UIs, mapped as the grounding evaluation
    maps them (normalised name -> UI)."""
    found = (headings.get(normalise(h)) for h in question.headings)
    return frozenset(ui for ui in found if ui is not None)


def link_questions(
    questions: Sequence[PubmedqaQuestion],
    hybrid: HybridGrounder,
    headings: Mapping[str, str],
) -> tuple[list[LinkedQuestion], float]:
    """Every question's lexical groundings and span links (every candidate span's best
    concept and cosine), computed once; and the seconds it took."""
    started = time.perf_counter()
    linked = []
    for q in questions:
        lexical = hybrid.lexical.ground(q.question)
        linked.append(
            LinkedQuestion(
                q,
                lexical,
                hybrid.span_links(q.question, lexical),
                len(question_words(q.question)),
                gold_uis(q, headings),
            )
        )
    return linked, time.perf_counter() - started


def evaluate_hybrid(
    questions: Sequence[PubmedqaQuestion],
    hybrid: HybridGrounder,
    roles: Mapping[str, str],
    headings: Mapping[str, str],
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    store: KGStore | None = None,
    worst: int = 10,
    min_precision: float = MIN_PRECISION,
    linked: Sequence[LinkedQuestion] | None = None,
) -> HybridEvaluation:
    """Lexical, then hybrid at each threshold, over the same questions and gold.
    ``linked``: the questions' span links already computed by ``link_questions`` (for
    scoring several folds of one question set without embedding their spans again; the
    caller timed them, and ``span_link_seconds`` is then 0)."""
    if not questions:
        raise ValueError("hybrid evaluation: no questions")
    bad = [t for t in thresholds if not 0.0 < t <= 1.0]
    if bad or not thresholds:
        raise ValueError(f"thresholds {list(thresholds)}: need at least one, each in (0, 1]")
    if linked is None:
        prepared, span_seconds = link_questions(questions, hybrid, headings)
    else:
        by_pmid = {p.question.pmid: p for p in linked}
        missing = [q.pmid for q in questions if q.pmid not in by_pmid]
        if missing:
            raise ValueError(f"linked: no span links for questions {missing[:5]}")
        prepared, span_seconds = [by_pmid[q.pmid] for q in questions], 0.0

    def bridge_count(groundings: list[Grounding]) -> int:
        return sum(1 for g in groundings if roles.get(g.ui) == Role.BRIDGE)

    lexical_covered = {p.question.pmid: bridge_count(p.lexical) >= 2 for p in prepared}
    rows = []
    for threshold in [None, *sorted(set(thresholds))]:
        by_question: dict[str, list[Grounding]] = {}
        chosen: dict[str, list[Grounding]] = {}
        for p in prepared:
            dense = (
                []
                if threshold is None
                else hybrid.with_threshold(threshold).select(p.links, p.lexical, p.n_words)
            )
            # the same order HybridGrounder.ground returns: lexical, then dense
            chosen[p.question.pmid] = p.lexical + dense
            by_question.setdefault(p.question.question, chosen[p.question.pmid])
        grounding = evaluate_grounding(
            questions, _FixedGroundings(by_question, hybrid.lexical.names), roles, headings, worst
        )
        rows.append(
            _threshold_report(
                threshold, grounding, prepared, chosen, roles, lexical_covered, store, worst
            )
        )
    pick, rule = pick_threshold(rows, min_precision)
    return HybridEvaluation(
        n=len(questions),
        rows=tuple(rows),
        chosen_threshold=pick,
        rule=rule,
        span_link_seconds=round(span_seconds, 3),
        graph_build=store.build_id if store is not None else None,
    )


def _threshold_report(
    threshold: float | None,
    grounding: GroundingEvaluation,
    prepared: list[LinkedQuestion],
    chosen: Mapping[str, list[Grounding]],
    roles: Mapping[str, str],
    lexical_covered: Mapping[str, bool],
    store: KGStore | None,
    worst: int,
) -> ThresholdReport:
    links = bridge = hits = newly = 0
    spurious: dict[tuple[str, str], list[tuple[str, float, str]]] = defaultdict(list)
    for p in prepared:
        groundings = chosen[p.question.pmid]
        bridges = [g for g in groundings if roles.get(g.ui) == Role.BRIDGE]
        newly += len(bridges) >= 2 and not lexical_covered[p.question.pmid]
        cosine = {(link.start, link.end): link.score for link in p.links}
        for g in groundings:
            if g.kind != DENSE_KIND:
                continue
            links += 1
            if roles.get(g.ui) != Role.BRIDGE:
                continue
            bridge += 1
            if g.ui in p.gold:
                hits += 1
            else:
                spurious[(g.surface, g.ui)].append(
                    (p.question.pmid, cosine[(g.start, g.end)], g.term)
                )
    ranked = sorted(
        spurious.items(), key=lambda kv: (-len(kv[1]), -max(c for _, c, _ in kv[1]), kv[0])
    )[:worst]
    names = {g.ui: g.name for p in prepared for g in chosen[p.question.pmid]}
    return ThresholdReport(
        threshold=threshold,
        grounding=grounding,
        dense_links=links,
        dense_bridge=bridge,
        dense_bridge_hits=hits,
        dense_precision=hits / bridge if bridge else 0.0,
        questions_newly_covered=int(newly),
        worst_dense=tuple(
            SpuriousDenseLink(
                span=span,
                ui=ui,
                name=names.get(ui, ui),
                term=seen[0][2],
                count=len(seen),
                best_cosine=round(max(c for _, c, _ in seen), 4),
                example_pmids=tuple(pmid for pmid, _, _ in seen[:3]),
            )
            for (span, ui), seen in ranked
        ),
        pair_selection=(
            pair_selection(prepared, chosen, roles, store)
            if store is not None and threshold is not None
            else None
        ),
    )


def pair_selection(
    prepared: list[LinkedQuestion],
    chosen: Mapping[str, list[Grounding]],
    roles: Mapping[str, str],
    store: KGStore,
) -> PairSelection:
    """Run the graph's pair choice on every question's BRIDGE groundings and count where
    the dense ones end up."""
    with_pair = supported = pairs_with_dense = 0
    in_graph = kept = discarded = spurious_kept = spurious_discarded = 0
    for p in prepared:
        bridges = [g for g in chosen[p.question.pmid] if roles.get(g.ui) == Role.BRIDGE]
        concepts = concepts_in_graph(store, bridges)
        dense = [c.grounding for c in concepts if c.grounding.kind == DENSE_KIND]
        in_graph += len(dense)
        pairs = score_pairs(store, concepts) if len(concepts) >= 2 else []
        if not pairs:
            discarded += len(dense)
            spurious_discarded += sum(1 for g in dense if g.ui not in p.gold)
            continue
        with_pair += 1
        best = pairs[0]
        supported += best.co_annotations > 0
        pair_uis = {best.a_ui, best.b_ui}
        in_pair = [g for g in dense if g.ui in pair_uis]
        pairs_with_dense += bool(in_pair)
        kept += len(in_pair)
        discarded += len(dense) - len(in_pair)
        spurious_kept += sum(1 for g in in_pair if g.ui not in p.gold)
        spurious_discarded += sum(1 for g in dense if g.ui not in pair_uis and g.ui not in p.gold)
    return PairSelection(
        questions_with_pair=with_pair,
        chosen_pairs_with_support=supported,
        chosen_pairs_with_dense=pairs_with_dense,
        dense_bridge_in_graph=in_graph,
        dense_in_chosen_pair=kept,
        dense_discarded=discarded,
        spurious_dense_in_chosen_pair=spurious_kept,
        spurious_dense_discarded=spurious_discarded,
    )


def pick_threshold(
    rows: Sequence[ThresholdReport], min_precision: float = MIN_PRECISION
) -> tuple[float | None, str]:
    """The threshold with the most coverage among those whose BRIDGE precision (lexical and
    dense links together) stays at least ``min_precision`` (ties: the higher threshold,
    fewer links); None when no threshold qualifies or none adds coverage."""
    rule = (
        f"most coverage among thresholds whose BRIDGE precision stays at least "
        f"{min_precision:.2f}; ties go to the higher threshold"
    )
    lexical = next(r for r in rows if r.threshold is None)
    fit = [
        r
        for r in rows
        if r.threshold is not None
        and r.grounding.precision >= min_precision
        and r.grounding.coverage > lexical.grounding.coverage
    ]
    if not fit:
        return None, rule + " (none qualifies: stay lexical)"
    best = max(fit, key=lambda r: (r.grounding.coverage, r.threshold))
    return best.threshold, rule


def surfaces_digest(terms: pl.DataFrame, fingerprint: str) -> str:
    """Names the cached concept index: the surfaces embedded, the MeSH flags they carry
    (so an index written before a flag existed is rebuilt, from cached vectors) and the
    model that did it."""
    surfaces = concept_surfaces(terms)
    digest = hashlib.sha256(fingerprint.encode())
    digest.update(b"flags: preferred_concept lexical_tag\n")
    rows = zip(
        surfaces["ui"].to_list(),
        surfaces["term"].to_list(),
        surfaces["preferred_concept"].to_list(),
        surfaces["lexical_tag"].to_list(),
        strict=True,
    )
    for ui, term, preferred, tag in rows:
        digest.update(f"{ui}\t{term}\t{preferred}\t{tag}\n".encode())
    return digest.hexdigest()[:16]


def provide_concept_index(
    terms: pl.DataFrame,
    encoder: Encoder,
    lake: Lake | None,
    cache_root: str | Path,
) -> tuple[ConceptIndex, ConceptIndexInfo]:
    """The lake's concept_index when it was built by this encoder; otherwise one cached
    under ``cache_root/<digest of surfaces and model>``, built once and then reused. Its
    vectors come from the vector cache under ``cache_root`` itself, shared by every digest:
    another vocabulary embeds only the surfaces no earlier one had."""
    if lake is not None and lake.exists(CONCEPT_MANIFEST):
        index = ConceptIndex.open(lake)
        if index.fingerprint == encoder.fingerprint:
            return index, _info(index, lake, built_now=False)
    cache = Lake(str(Path(cache_root) / surfaces_digest(terms, encoder.fingerprint)))
    built_now = not cache.exists(CONCEPT_MANIFEST)
    if built_now:
        cache.write_parquet(MESH_TERMS, terms.to_arrow())
        build_concept_index(cache, encoder, cache=Lake(str(cache_root)))
    index = ConceptIndex.open(cache)
    return index, _info(index, cache, built_now)


def _info(index: ConceptIndex, lake: Lake, built_now: bool) -> ConceptIndexInfo:
    manifest = json.loads(lake.read_bytes(CONCEPT_MANIFEST))
    seconds = manifest.get("seconds")
    return ConceptIndexInfo(
        surfaces=len(index.uis),
        descriptors=len(set(index.uis)),
        location=lake.path(CONCEPT_MANIFEST).rsplit("/", 1)[0],
        built_now=built_now,
        build_seconds=round(float(seconds), 1) if seconds is not None else None,
        embedded=manifest.get("embedded"),
        reused=manifest.get("reused"),
    )


def _concept_index_line(c: ConceptIndexInfo, span_link_seconds: float) -> str:
    """Where the concept index came from and what building it cost."""
    cached = (
        f" ({c.embedded:,} embedded, {c.reused:,} from the vector cache)"
        if c.embedded is not None and c.reused is not None
        else ""
    )
    how = (
        f"built now in {c.build_seconds} s{cached}"
        if c.built_now
        else "reused" + (f" (built in {c.build_seconds} s)" if c.build_seconds is not None else "")
    )
    return (
        f"Concept index: {c.surfaces:,} surfaces of {c.descriptors:,} descriptors at "
        f"`{c.location}`, {how}. Span links of all questions: {span_link_seconds} s."
    )


def render_report(evaluation: HybridEvaluation, source: str, command: str = "") -> str:
    """Markdown: the table of figures per threshold, the pick, the worst dense links."""
    e = evaluation
    lines = ["# Lexical vs hybrid grounding", "", f"Questions: {e.n} from `{source}`."]
    if command:
        lines += ["", f"Command: `{command}`"]
    if e.concept_index is not None:
        lines += ["", _concept_index_line(e.concept_index, e.span_link_seconds)]
    lines += [
        "",
        "| grounding | coverage | precision | recall | BRIDGE groundings | dense links "
        "(BRIDGE) | dense precision | newly covered |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in e.rows:
        g = r.grounding
        label = "lexical" if r.threshold is None else f"hybrid {r.threshold:.2f}"
        dense = "-" if r.threshold is None else f"{r.dense_links} ({r.dense_bridge})"
        dense_p = (
            "-"
            if r.threshold is None
            else f"{r.dense_precision:.3f} ({r.dense_bridge_hits}/{r.dense_bridge})"
        )
        lines.append(
            f"| {label} | {g.coverage:.1%} ({g.questions_with_two_bridge}/{g.n}) "
            f"| {g.precision:.3f} | {g.recall:.3f} | {g.bridge_groundings} | {dense} "
            f"| {dense_p} | {r.questions_newly_covered} |"
        )
    pick = "stay lexical" if e.chosen_threshold is None else f"{e.chosen_threshold:.2f}"
    lines += ["", f"Chosen threshold: **{pick}** ({e.rule})."]
    lines += ["", "## What the graph's pair selection keeps of the dense links", ""]
    if e.graph_build is None:
        lines.append("Not measured: the lake holds no graph.")
    else:
        lines += [
            f"Graph build `{e.graph_build}`.",
            "",
            "| threshold | questions with a pair | chosen pair supported | chosen pairs with a "
            "dense concept | dense BRIDGE in graph | kept in chosen pair | discarded | "
            "spurious kept | spurious discarded |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in e.rows:
            s = r.pair_selection
            if s is None:
                continue
            lines.append(
                f"| {r.threshold:.2f} | {s.questions_with_pair} | {s.chosen_pairs_with_support} "
                f"| {s.chosen_pairs_with_dense} | {s.dense_bridge_in_graph} "
                f"| {s.dense_in_chosen_pair} | {s.dense_discarded} "
                f"| {s.spurious_dense_in_chosen_pair} | {s.spurious_dense_discarded} |"
            )
    for r in e.rows:
        if r.threshold is None or not r.worst_dense:
            continue
        lines += [
            "",
            f"## Worst spurious dense links at {r.threshold:.2f}",
            "",
            "| span | descriptor (surface matched) | questions | best cosine | examples |",
            "| --- | --- | --- | --- | --- |",
        ]
        for s in r.worst_dense:
            lines.append(
                f"| {s.span} | {s.name} ({s.ui}; '{s.term}') | {s.count} | {s.best_cosine:.3f} "
                f"| {', '.join(s.example_pmids)} |"
            )
    return "\n".join(lines) + "\n"


def evaluate_on_lake(
    lake: Lake,
    pubmedqa: str | Path,
    encoder: Encoder,
    thresholds: Sequence[float],
    cache_root: str | Path,
    graph: Lake | None = None,
) -> HybridEvaluation:
    """Lexical vs hybrid on ``pubmedqa`` with the lake's MeSH tables and concept index (see
    ``provide_concept_index``); roles and the pair selection from the ``graph`` build's view
    when given, else roles from MeSH structure and no pair selection."""
    frames = mesh_frames(lake)
    store, counts, n_articles = graph_counts(graph)
    concepts, info = provide_concept_index(frames["terms"], encoder, lake, cache_root)
    descriptors, tree, terms = frames["descriptors"], frames["tree"], frames["terms"]
    roles = assign_roles(descriptors, tree, RoleConfig(), counts, n_articles)
    role_of = dict(zip(roles["ui"].to_list(), roles["role"].to_list(), strict=True))
    hybrid = HybridGrounder(Grounder.from_terms(terms, descriptors), encoder, concepts)
    questions = load_pubmedqa(pubmedqa)
    result = evaluate_hybrid(questions, hybrid, role_of, heading_index(terms), thresholds, store)
    return replace(result, concept_index=info)


def write_hybrid_report(lake: Lake, evaluation: HybridEvaluation, source: str) -> None:
    """reports/grounding/hybrid/{report.md, report.json}, naming the questions ``source``."""
    lake.write_bytes(f"{REPORT_PREFIX}/report.md", render_report(evaluation, source).encode())
    payload = json.dumps(evaluation.to_json(), indent=1).encode()
    lake.write_bytes(f"{REPORT_PREFIX}/report.json", payload)
