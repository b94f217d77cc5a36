"""Grounding evaluation against PubMedQA: do the BRIDGE groundings of a question name the
gold article's own MeSH headings?

Gold: each question's ``MESHES`` (heading names of the article the question came from),
mapped to descriptor UIs through the MeSH terms (names first, then entry terms). These are
headings NLM indexers assigned; nobody here wrote them.

- precision: BRIDGE groundings that are gold headings / all BRIDGE groundings;
- recall: those same hits / gold headings whose own role is BRIDGE (the concepts a BRIDGE
  grounding could ever hit); ``recall_all_headings`` divides by every mapped gold heading;
- coverage: share of questions with at least two BRIDGE concepts (the graph needs a pair).

Four coverage figures stand side by side (``coverages``), each with the precision and recall
of the groundings it counts, on the questions it covers:
- ``one_concept``: >= 1 non-IGNORE concept; precision over non-IGNORE groundings, recall
  over gold headings that are not IGNOREd;
- ``two_concepts``: >= 2 non-IGNORE concepts (the reference system's "found something
  usable"), scored as ``one_concept``;
- ``two_bridge``: >= 2 BRIDGE concepts (``coverage``), scored over BRIDGE groundings and
  gold BRIDGE headings;
- ``linkable``: the linker can pair two of the question's BRIDGE concepts (a DIRECT or
  BRIDGE path exists in the graph given); None without a graph.

The lexical ceiling says how far any grounder over the same surfaces could go: the same
matching with the common-word guard off and every descriptor that is not IGNOREd counted as
a concept. Its coverage is the most a lexical grounder on these MeSH surfaces can reach, its
precision what that costs, and ``questions_naming_two_headings`` how many questions name two
of their own article's headings at all (the questions a correct pair could come from).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from kg_platform.checks import CheckOutcome
from kg_platform.evaluation.common.contracts import MIN_PRECISION
from kg_platform.grounding.grounder import Grounder, build_surface_table
from kg_platform.grounding.roles import Role, RoleConfig, assign_roles
from kg_platform.storage.lake import Lake
from kg_platform.storage.mesh import read_mesh
from kg_platform.storage.reports import GROUNDING
from kg_platform.text.normalise import normalise

if TYPE_CHECKING:
    from kg_platform.graph.store import KGStore


@dataclass(frozen=True)
class PubmedqaQuestion:
    pmid: str
    question: str
    headings: tuple[str, ...]
    year: int | None


@dataclass(frozen=True)
class SpuriousMatch:
    """A BRIDGE grounding that was not among the gold headings, aggregated over questions."""

    surface: str
    ui: str
    name: str
    count: int
    example_pmids: tuple[str, ...]


@dataclass(frozen=True)
class MissedHeading:
    """A gold heading no grounding named, aggregated over questions."""

    ui: str
    name: str
    count: int
    example_pmids: tuple[str, ...]


@dataclass(frozen=True)
class CoverageFigure:
    """One coverage definition: the questions it covers, and the precision and recall of
    the groundings it counts on those questions (see the module doc)."""

    name: str
    questions: int
    coverage: float
    precision: float
    recall: float
    hits: int
    groundings: int
    gold: int


@dataclass(frozen=True)
class LexicalCeiling:
    """Every surface counted: no common-word guard, every non-IGNORE descriptor a concept."""

    coverage: float
    precision: float
    concepts: int
    hits: int
    questions_with_two_concepts: int
    questions_naming_two_headings: int


@dataclass(frozen=True)
class GroundingEvaluation:
    n: int
    precision: float
    recall: float
    recall_all_headings: float
    coverage: float
    bridge_groundings: int
    bridge_hits: int
    gold_bridge_headings: int
    gold_headings: int
    unmapped_headings: int
    questions_with_two_bridge: int
    worst_spurious: tuple[SpuriousMatch, ...] = field(default_factory=tuple)
    ceiling: LexicalCeiling | None = None
    coverages: tuple[CoverageFigure, ...] = field(default_factory=tuple)
    worst_misses: tuple[MissedHeading, ...] = field(default_factory=tuple)
    worst_concept_spurious: tuple[SpuriousMatch, ...] = field(default_factory=tuple)

    def figure(self, name: str) -> CoverageFigure | None:
        return next((f for f in self.coverages if f.name == name), None)

    def coverage_of(self, name: str) -> float | None:
        figure = self.figure(name)
        return None if figure is None else figure.coverage

    def to_json(self) -> dict:
        """Every field, with the four coverage figures also flat (``coverage_<name>``)."""
        flat = {f"coverage_{name}": self.coverage_of(name) for name in COVERAGE_NAMES}
        return {**asdict(self), **flat}


COVERAGE_NAMES = ("one_concept", "two_concepts", "two_bridge", "linkable")


def load_pubmedqa(path: str | Path) -> list[PubmedqaQuestion]:
    """Questions from a PubMedQA file (``{pmid: {QUESTION, MESHES, YEAR, ...}}``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: PubMedQA file not found")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a JSON object keyed by PMID")
    questions = []
    for pmid, record in raw.items():
        if not isinstance(record, dict) or "QUESTION" not in record or "MESHES" not in record:
            raise ValueError(f"{path}: record {pmid} lacks QUESTION or MESHES")
        year = record.get("YEAR")
        questions.append(
            PubmedqaQuestion(
                pmid=str(pmid),
                question=str(record["QUESTION"]),
                headings=tuple(str(h) for h in record["MESHES"]),
                year=int(year) if year not in (None, "") else None,
            )
        )
    return questions


def heading_index(terms: pl.DataFrame) -> dict[str, str]:
    """Normalised heading name -> descriptor UI: descriptor names first, then the other
    surfaces of descriptors (entry terms, de-inverted forms; never supplementary aliases),
    so a heading renamed since the article was indexed still maps."""
    rank = {"name": 0, "entry": 1, "deinverted": 2}
    table = (
        terms.filter(pl.col("kind").is_in(list(rank)))
        .with_columns(pl.col("kind").replace_strict(rank, return_dtype=pl.Int8).alias("rank"))
        .sort(["normalised", "rank", "ui"])
        .unique("normalised", keep="first")
    )
    return dict(zip(table["normalised"].to_list(), table["ui"].to_list(), strict=True))


def evaluate_grounding(
    questions: Sequence[PubmedqaQuestion],
    grounder: Grounder,
    roles: Mapping[str, str],
    headings: Mapping[str, str],
    worst: int = 10,
    unguarded: Grounder | None = None,
    linkable: Callable[[Sequence[str]], bool] | None = None,
) -> GroundingEvaluation:
    """Score the BRIDGE groundings of every question against its gold headings; with
    ``unguarded`` (the same surfaces, no common-word guard) also the lexical ceiling; with
    ``linkable`` (BRIDGE UIs -> can the graph pair two of them) the linkable coverage."""
    if not questions:
        raise ValueError("grounding evaluation: no questions")
    hits = predicted = gold_bridge = gold_all = unmapped = covered = 0
    spurious: dict[tuple[str, str], list[str]] = defaultdict(list)
    concept_spurious: dict[tuple[str, str], list[str]] = defaultdict(list)
    missed: dict[str, list[str]] = defaultdict(list)
    tallies = {name: _Tally() for name in COVERAGE_NAMES if name != "linkable" or linkable}
    gold_of: list[set[str]] = []
    for q in questions:
        uis = [headings.get(normalise(heading)) for heading in q.headings]
        gold = {ui for ui in uis if ui is not None}
        unmapped += uis.count(None)
        gold_of.append(gold)
        gold_all += len(gold)
        gold_bridge += sum(1 for ui in gold if roles.get(ui) == Role.BRIDGE)
        found = grounder.ground(q.question)
        concepts = [g for g in found if roles.get(g.ui, Role.IGNORE) != Role.IGNORE]
        bridge = [g for g in concepts if roles.get(g.ui) == Role.BRIDGE]
        predicted += len(bridge)
        covered += len(bridge) >= 2
        for g in bridge:
            if g.ui in gold:
                hits += 1
            else:
                spurious[(g.surface, g.ui)].append(q.pmid)
        for g in concepts:
            if g.ui not in gold:
                concept_spurious[(g.surface, g.ui)].append(q.pmid)
        named = {g.ui for g in found}
        for ui in gold:
            if roles.get(ui) == Role.BRIDGE and ui not in named:
                missed[ui].append(q.pmid)
        gold_concepts = {ui for ui in gold if roles.get(ui, Role.IGNORE) != Role.IGNORE}
        gold_bridges = {ui for ui in gold if roles.get(ui) == Role.BRIDGE}
        concept_uis = [g.ui for g in concepts]
        bridge_uis = [g.ui for g in bridge]
        tallies["one_concept"].add(len(concepts) >= 1, concept_uis, gold_concepts)
        tallies["two_concepts"].add(len(concepts) >= 2, concept_uis, gold_concepts)
        tallies["two_bridge"].add(len(bridge) >= 2, bridge_uis, gold_bridges)
        if linkable is not None:
            tallies["linkable"].add(
                len(bridge) >= 2 and linkable(bridge_uis), bridge_uis, gold_bridges
            )
    return GroundingEvaluation(
        n=len(questions),
        precision=hits / predicted if predicted else 0.0,
        recall=hits / gold_bridge if gold_bridge else 0.0,
        recall_all_headings=hits / gold_all if gold_all else 0.0,
        coverage=covered / len(questions),
        bridge_groundings=predicted,
        bridge_hits=hits,
        gold_bridge_headings=gold_bridge,
        gold_headings=gold_all,
        unmapped_headings=unmapped,
        questions_with_two_bridge=covered,
        worst_spurious=_worst_spurious(spurious, grounder, worst),
        ceiling=None
        if unguarded is None
        else lexical_ceiling(questions, gold_of, unguarded, roles),
        coverages=tuple(t.figure(name, len(questions)) for name, t in tallies.items()),
        worst_misses=tuple(
            MissedHeading(ui, grounder.names.get(ui, ui), len(pmids), tuple(pmids[:3]))
            for ui, pmids in sorted(missed.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:worst]
        ),
        worst_concept_spurious=_worst_spurious(concept_spurious, grounder, worst),
    )


@dataclass
class _Tally:
    """Running counts of one coverage figure."""

    questions: int = 0
    hits: int = 0
    groundings: int = 0
    gold: int = 0

    def add(self, covered: bool, found: Sequence[str], gold: set[str]) -> None:
        if not covered:
            return
        self.questions += 1
        self.groundings += len(found)
        self.hits += sum(1 for ui in found if ui in gold)
        self.gold += len(gold)

    def figure(self, name: str, n: int) -> CoverageFigure:
        return CoverageFigure(
            name=name,
            questions=self.questions,
            coverage=self.questions / n,
            precision=self.hits / self.groundings if self.groundings else 0.0,
            recall=self.hits / self.gold if self.gold else 0.0,
            hits=self.hits,
            groundings=self.groundings,
            gold=self.gold,
        )


def _worst_spurious(
    spurious: Mapping[tuple[str, str], list[str]], grounder: Grounder, worst: int
) -> tuple[SpuriousMatch, ...]:
    ranked = sorted(spurious.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:worst]
    return tuple(
        SpuriousMatch(
            surface=surface,
            ui=ui,
            name=grounder.names.get(ui, ui),
            count=len(pmids),
            example_pmids=tuple(pmids[:3]),
        )
        for (surface, ui), pmids in ranked
    )


def graph_linkable(store: KGStore) -> Callable[[Sequence[str]], bool]:
    """BRIDGE UIs -> whether the linker can pair two of them in ``store``: both index
    articles and a DIRECT or BRIDGE path joins them (``retrieval.paths``)."""
    from kg_platform.retrieval.linking import ConceptPair
    from kg_platform.retrieval.paths import collect_candidates

    def in_graph(ui: str) -> bool:
        try:
            return store.articles_of(store.desc_idx(ui)).size > 0
        except KeyError:
            return False

    def linkable(uis: Sequence[str]) -> bool:
        known = [ui for ui in dict.fromkeys(uis) if in_graph(ui)]
        for a, b in combinations(known, 2):
            pair = ConceptPair(a, a, b, b, 0, 0)
            if collect_candidates(store, pair).kind.size:
                return True
        return False

    return linkable


def lexical_ceiling(
    questions: Sequence[PubmedqaQuestion],
    gold_of: Sequence[set[str]],
    unguarded: Grounder,
    roles: Mapping[str, str],
) -> LexicalCeiling:
    """Coverage and precision when every surface a question holds counts (see module doc)."""
    concepts = hits = two = named_two = 0
    for q, gold in zip(questions, gold_of, strict=True):
        found = [g.ui for g in unguarded.ground(q.question) if roles.get(g.ui) != Role.IGNORE]
        correct = sum(1 for ui in found if ui in gold)
        concepts += len(found)
        hits += correct
        two += len(found) >= 2
        named_two += correct >= 2
    return LexicalCeiling(
        coverage=two / len(questions),
        precision=hits / concepts if concepts else 0.0,
        concepts=concepts,
        hits=hits,
        questions_with_two_concepts=two,
        questions_naming_two_headings=named_two,
    )


def _spurious_lines(title: str, spurious: Sequence[SpuriousMatch]) -> list[str]:
    lines = ["", f"## {title}", "", "| surface | descriptor | questions | examples |"]
    lines.append("| --- | --- | --- | --- |")
    for s in spurious:
        examples = ", ".join(s.example_pmids)
        lines.append(f"| {s.surface} | {s.name} ({s.ui}) | {s.count} | {examples} |")
    return lines


def render_report(evaluation: GroundingEvaluation, source: str) -> str:
    """Markdown report of one grounding evaluation."""
    e = evaluation
    lines = [
        "# Grounding evaluation",
        "",
        f"Questions: {e.n} from `{source}`.",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| precision (BRIDGE groundings that are gold headings) | {e.precision:.3f} ({e.bridge_hits}/{e.bridge_groundings}) |",
        f"| recall (of gold headings whose role is BRIDGE) | {e.recall:.3f} ({e.bridge_hits}/{e.gold_bridge_headings}) |",
        f"| recall (of all gold headings) | {e.recall_all_headings:.3f} ({e.bridge_hits}/{e.gold_headings}) |",
        f"| coverage (questions with >= 2 BRIDGE concepts) | {e.coverage:.1%} ({e.questions_with_two_bridge}/{e.n}) |",
        f"| gold heading names not found in MeSH | {e.unmapped_headings} |",
        "",
        "## Coverage, four ways",
        "",
        "Each figure's precision and recall are of the groundings it counts (non-IGNORE "
        "concepts, or BRIDGE concepts), on the questions it covers.",
        "",
        "| coverage | questions | precision | recall |",
        "| --- | --- | --- | --- |",
    ]
    labels = {
        "one_concept": ">= 1 non-IGNORE concept",
        "two_concepts": ">= 2 non-IGNORE concepts",
        "two_bridge": ">= 2 BRIDGE concepts",
        "linkable": "linkable (a DIRECT or BRIDGE path in the graph)",
    }
    for name in COVERAGE_NAMES:
        f = e.figure(name)
        if f is None:
            lines.append(f"| {labels[name]} | n/a (no graph given) | | |")
            continue
        lines.append(
            f"| {labels[name]} | {f.coverage:.1%} ({f.questions}/{e.n}) | "
            f"{f.precision:.3f} ({f.hits}/{f.groundings}) | {f.recall:.3f} ({f.hits}/{f.gold}) |"
        )
    lines += _spurious_lines("Worst spurious BRIDGE matches", e.worst_spurious)
    lines += _spurious_lines("Worst spurious non-IGNORE matches", e.worst_concept_spurious)
    lines += [
        "",
        "## Most missed gold BRIDGE headings",
        "",
        "| descriptor | questions | examples |",
        "| --- | --- | --- |",
    ]
    for m in e.worst_misses:
        lines.append(f"| {m.name} ({m.ui}) | {m.count} | {', '.join(m.example_pmids)} |")
    if e.ceiling is not None:
        c = e.ceiling
        lines += [
            "",
            "## Lexical ceiling",
            "",
            "Every surface counted: no common-word guard, every descriptor that is not "
            "IGNOREd a concept.",
            "",
            "| measure | value |",
            "| --- | --- |",
            f"| coverage (questions with >= 2 concepts) | {c.coverage:.1%} "
            f"({c.questions_with_two_concepts}/{e.n}) |",
            f"| precision | {c.precision:.3f} ({c.hits}/{c.concepts}) |",
            f"| questions naming two of their own headings | "
            f"{c.questions_naming_two_headings}/{e.n} |",
        ]
    return "\n".join(lines) + "\n"


def evaluate_with_mesh(
    questions: Sequence[PubmedqaQuestion],
    descriptors: pl.DataFrame,
    tree: pl.DataFrame,
    terms: pl.DataFrame,
    role_config: RoleConfig | None = None,
    article_counts: pl.DataFrame | None = None,
    n_articles: int | None = None,
    linkable: Callable[[Sequence[str]], bool] | None = None,
) -> GroundingEvaluation:
    """The evaluation from MeSH tables alone (roles from MeSH structure), or with the
    graph's article counts and ``linkable`` (see ``graph_linkable``) when a graph is built."""
    surfaces = build_surface_table(terms)
    names = dict(zip(descriptors["ui"].to_list(), descriptors["name"].to_list(), strict=True))
    grounder = Grounder(surfaces, names)
    roles = assign_roles(descriptors, tree, role_config or RoleConfig(), article_counts, n_articles)
    role_of = dict(zip(roles["ui"].to_list(), roles["role"].to_list(), strict=True))
    return evaluate_grounding(
        questions,
        grounder,
        role_of,
        heading_index(terms),
        unguarded=grounder.with_common_words(()),
        linkable=linkable,
    )


def report_checks(result: GroundingEvaluation) -> list[CheckOutcome]:
    """The grounding report's check (contracts.GROUNDING_REPORT_CHECKS): BRIDGE precision
    against the articles' own headings at least MIN_PRECISION."""
    return [
        CheckOutcome(
            "precision_target",
            result.precision >= MIN_PRECISION,
            f"precision {result.precision:.3f}",
        )
    ]


def mesh_frames(lake: Lake) -> dict[str, pl.DataFrame]:
    """The lake's MeSH descriptors, tree and terms; an error names a missing table."""
    return {t: pl.from_arrow(read_mesh(lake, t)) for t in ("descriptors", "tree", "terms")}


def graph_counts(graph: Lake | None) -> tuple[KGStore | None, pl.DataFrame | None, int | None]:
    """The graph build's store, article count per descriptor and article total (None
    without a graph: roles from MeSH structure alone)."""
    if graph is None:
        return None, None, None
    from kg_platform.graph.store import KGStore
    from kg_platform.grounding.loading import graph_article_counts

    store = KGStore.open(graph)
    return store, graph_article_counts(store), store.n_articles


def write_grounding_report(
    lake: Lake, pubmedqa: str | Path, source: str, graph: Lake | None = None
) -> GroundingEvaluation:
    """Evaluate on ``pubmedqa`` (named ``source`` in the report) with the lake's MeSH tables,
    roles from MeSH structure or, given the ``graph`` build's view, from its article counts
    with the linkable coverage; write reports/grounding/{report.md, report.json}."""
    frames = mesh_frames(lake)
    store, counts, n_articles = graph_counts(graph)
    linkable = None if store is None else graph_linkable(store)
    result = evaluate_with_mesh(
        load_pubmedqa(pubmedqa),
        frames["descriptors"],
        frames["tree"],
        frames["terms"],
        article_counts=counts,
        n_articles=n_articles,
        linkable=linkable,
    )
    lake.write_bytes(f"{GROUNDING}/report.md", render_report(result, source).encode())
    lake.write_bytes(f"{GROUNDING}/report.json", json.dumps(result.to_json(), indent=1).encode())
    return result
