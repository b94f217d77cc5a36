"""Grounding evaluation against PubMedQA: do the BRIDGE groundings of a question name the
gold article's own MeSH headings?

Gold: each question's ``MESHES`` (heading names of the article the question came from),
mapped to descriptor UIs through the MeSH terms (names first, then entry terms). These are
headings NLM indexers assigned; nobody here wrote them.

- precision: BRIDGE groundings that are gold headings / all BRIDGE groundings;
- recall: those same hits / gold headings whose own role is BRIDGE (the concepts a BRIDGE
  grounding could ever hit); ``recall_all_headings`` divides by every mapped gold heading;
- coverage: share of questions with at least two BRIDGE concepts (the graph needs a pair).

The lexical ceiling says how far any grounder over the same surfaces could go: the same
matching with the common-word guard off and every descriptor that is not IGNOREd counted as
a concept. Its coverage is the most a lexical grounder on these MeSH surfaces can reach, its
precision what that costs, and ``questions_naming_two_headings`` how many questions name two
of their own article's headings at all (the questions a correct pair could come from).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import polars as pl

from kg_platform.grounding.grounder import Grounder, build_surface_table
from kg_platform.grounding.normalise import normalise
from kg_platform.grounding.roles import Role, RoleConfig, assign_roles
from kg_platform.storage.lake import Lake


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

    def to_json(self) -> dict:
        return asdict(self)


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
) -> GroundingEvaluation:
    """Score the BRIDGE groundings of every question against its gold headings; with
    ``unguarded`` (the same surfaces, no common-word guard) also the lexical ceiling."""
    if not questions:
        raise ValueError("grounding evaluation: no questions")
    hits = predicted = gold_bridge = gold_all = unmapped = covered = 0
    spurious: dict[tuple[str, str], list[str]] = defaultdict(list)
    gold_of: list[set[str]] = []
    for q in questions:
        gold: set[str] = set()
        for heading in q.headings:
            ui = headings.get(normalise(heading))
            if ui is None:
                unmapped += 1
            else:
                gold.add(ui)
        gold_of.append(gold)
        gold_all += len(gold)
        gold_bridge += sum(1 for ui in gold if roles.get(ui) == Role.BRIDGE)
        bridge = [g for g in grounder.ground(q.question) if roles.get(g.ui) == Role.BRIDGE]
        predicted += len(bridge)
        covered += len(bridge) >= 2
        for g in bridge:
            if g.ui in gold:
                hits += 1
            else:
                spurious[(g.surface, g.ui)].append(q.pmid)
    ranked = sorted(spurious.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:worst]
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
        worst_spurious=tuple(
            SpuriousMatch(
                surface=surface,
                ui=ui,
                name=grounder.names.get(ui, ui),
                count=len(pmids),
                example_pmids=tuple(pmids[:3]),
            )
            for (surface, ui), pmids in ranked
        ),
        ceiling=None
        if unguarded is None
        else lexical_ceiling(questions, gold_of, unguarded, roles),
    )


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
        "## Worst spurious BRIDGE matches",
        "",
        "| surface | descriptor | questions | examples |",
        "| --- | --- | --- | --- |",
    ]
    for s in e.worst_spurious:
        lines.append(
            f"| {s.surface} | {s.name} ({s.ui}) | {s.count} | {', '.join(s.example_pmids)} |"
        )
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
) -> GroundingEvaluation:
    """The evaluation from MeSH tables alone (roles from MeSH structure), or with the
    graph's article counts when a graph is built."""
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
        unguarded=Grounder(surfaces, names, common_words=()),
    )


def write_grounding_report(
    lake: Lake, pubmedqa: str | Path, graph_counts: bool = True
) -> GroundingEvaluation:
    """Evaluate on ``pubmedqa`` with the lake's MeSH tables (and, with ``graph_counts``, the
    graph's article counts when one is built); write reports/grounding/{report.md, .json}."""
    frames = {}
    for table in ("descriptors", "tree", "terms"):
        key = f"mesh/{table}.parquet"
        if not lake.exists(key):
            raise FileNotFoundError(f"{lake.path(key)}: materialise `mesh_tables` first")
        frames[table] = pl.from_arrow(lake.read_parquet(key))
    counts, n_articles = None, None
    try:
        if not graph_counts:
            raise FileNotFoundError("roles from MeSH structure alone")
        from kg_platform.graph.store import KGStore

        store = KGStore.open(lake)
        uis = [u.decode("ascii") for u in store.array("mesh_uis")]
        counts = pl.DataFrame({"ui": uis, "n_articles": store.array("mesh_article_count")})
        n_articles = store.n_articles
    except FileNotFoundError:
        pass  # no graph: roles from MeSH structure alone
    result = evaluate_with_mesh(
        load_pubmedqa(pubmedqa),
        frames["descriptors"],
        frames["tree"],
        frames["terms"],
        article_counts=counts,
        n_articles=n_articles,
    )
    lake.write_bytes("reports/grounding/report.md", render_report(result, str(pubmedqa)).encode())
    lake.write_bytes(
        "reports/grounding/report.json", json.dumps(result.to_json(), indent=1).encode()
    )
    return result
