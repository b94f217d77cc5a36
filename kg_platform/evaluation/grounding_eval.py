"""Grounding evaluation against PubMedQA: do the BRIDGE groundings of a question name the
gold article's own MeSH headings?

Gold: each question's ``MESHES`` (heading names of the article the question came from),
mapped to descriptor UIs through the MeSH terms (names first, then entry terms). These are
headings NLM indexers assigned; nobody here wrote them.

- precision: BRIDGE groundings that are gold headings / all BRIDGE groundings;
- recall: those same hits / gold headings whose own role is BRIDGE (the concepts a BRIDGE
  grounding could ever hit); ``recall_all_headings`` divides by every mapped gold heading;
- coverage: share of questions with at least two BRIDGE concepts (the graph needs a pair).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import polars as pl

from kg_platform.grounding.grounder import Grounder
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
) -> GroundingEvaluation:
    """Score the BRIDGE groundings of every question against its gold headings."""
    if not questions:
        raise ValueError("grounding evaluation: no questions")
    hits = predicted = gold_bridge = gold_all = unmapped = covered = 0
    spurious: dict[tuple[str, str], list[str]] = defaultdict(list)
    for q in questions:
        gold: set[str] = set()
        for heading in q.headings:
            ui = headings.get(normalise(heading))
            if ui is None:
                unmapped += 1
            else:
                gold.add(ui)
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
    grounder = Grounder.from_terms(terms, descriptors)
    roles = assign_roles(descriptors, tree, role_config or RoleConfig(), article_counts, n_articles)
    role_of = dict(zip(roles["ui"].to_list(), roles["role"].to_list(), strict=True))
    return evaluate_grounding(questions, grounder, role_of, heading_index(terms))


def write_grounding_report(lake: Lake, pubmedqa: str | Path) -> GroundingEvaluation:
    """Evaluate on ``pubmedqa`` with the lake's MeSH tables (and graph counts when built);
    write reports/grounding/{report.md, report.json}."""
    frames = {}
    for table in ("descriptors", "tree", "terms"):
        key = f"mesh/{table}.parquet"
        if not lake.exists(key):
            raise FileNotFoundError(f"{lake.path(key)}: materialise `mesh_tables` first")
        frames[table] = pl.from_arrow(lake.read_parquet(key))
    counts, n_articles = None, None
    try:
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
