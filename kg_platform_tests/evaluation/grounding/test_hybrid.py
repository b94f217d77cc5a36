"""The hybrid evaluation's mechanics on five real PubMedQA development questions, with a
concept index of a few dozen real MeSH descriptors (their gold headings, what the lexical
grounder finds, and a few near misses) embedded by the packaged all-MiniLM-L6-v2; and the
pair-selection count on the small real-shaped question graph. The full 400-question run
is a command (`kg eval hybrid`), not a test."""

from __future__ import annotations

import gzip
import json
from functools import lru_cache

import dagster as dg
import polars as pl
import pytest

from kg_platform.embeddings.concepts import ConceptIndex, build_concept_index
from kg_platform.embeddings.feeder import FeederSettings
from kg_platform.evaluation.common.question_sets import question_set_key
from kg_platform.evaluation.grounding.evaluation import (
    PubmedqaQuestion,
    evaluate_grounding,
    heading_index,
    load_pubmedqa,
)
from kg_platform.evaluation.grounding.hybrid import (
    HybridEvaluation,
    PairSelection,
    evaluate_hybrid,
    pick_threshold,
    provide_concept_index,
    render_report,
)
from kg_platform.graph.store import KGStore
from kg_platform.grounding.grounder import Grounder
from kg_platform.grounding.hybrid import HybridGrounder
from kg_platform.grounding.roles import RoleConfig, assign_roles
from kg_platform.storage.lake import Lake
from kg_platform_tests.answer.graph_fixture import build_question_graph, write_real_mesh
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.embeddings.models import packaged_encoder

PMIDS = ("9488747", "26578404", "22990761", "17919952", "10966943")
# descriptors the small concept index holds beyond the questions' own gold headings
EXTRA_NAMES = (
    "Dyspnea",
    "Amblyopia",
    "Facial Pain",
    "Somatoform Disorders",
    "Vision Disorders",
    "Blindness",
    "Analgesics, Opioid",
    "Bathing Beaches",
    "Heart Diseases",
    "Vision, Low",
    "Opioid-Related Disorders",
    "Rural Population",
    "Risk",
    "Cardiovascular System",
    "Child",
)
THRESHOLDS = (0.6, 0.75, 0.9)


def dev_questions() -> list[PubmedqaQuestion]:
    by_pmid = {q.pmid: q for q in load_pubmedqa(require_reference("pubmedqa", "pqal_dev400.json"))}
    return [by_pmid[p] for p in PMIDS]


def uis_named(names: set[str]) -> tuple[str, ...]:
    path = require_reference("mesh", "tsv", "mesh2024_descriptors.tsv.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = (line.rstrip("\n").split("\t") for line in f)
        return tuple(sorted(p[0] for p in rows if p[1] in names))


def _mesh_and_roles(lake: Lake) -> tuple[dict[str, pl.DataFrame], dict[str, str]]:
    """The lake's MeSH descriptors, tree and terms, and each descriptor's role."""
    frames = {
        t: pl.from_arrow(lake.read_parquet(f"mesh/{t}.parquet"))
        for t in ("descriptors", "tree", "terms")
    }
    roles = assign_roles(frames["descriptors"], frames["tree"], RoleConfig())
    return frames, dict(zip(roles["ui"].to_list(), roles["role"].to_list(), strict=True))


@lru_cache(maxsize=1)
def _setup(root: str):
    lake = Lake(root)
    questions = dev_questions()
    names = {h for q in questions for h in q.headings} | set(EXTRA_NAMES)
    write_real_mesh(lake, uis_named(names))
    build_concept_index(lake, packaged_encoder(), FeederSettings(workers=0))
    frames, role_of = _mesh_and_roles(lake)
    lexical = Grounder.from_terms(frames["terms"], frames["descriptors"])
    hybrid = HybridGrounder(lexical, packaged_encoder(), ConceptIndex.open(lake))
    return lake, questions, frames, role_of, hybrid


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return _setup(str(tmp_path_factory.mktemp("hybrid_eval") / "lake"))


@pytest.fixture(scope="module")
def result(setup) -> HybridEvaluation:
    lake, questions, frames, role_of, hybrid = setup
    return evaluate_hybrid(questions, hybrid, role_of, heading_index(frames["terms"]), THRESHOLDS)


def test_lexical_row_is_the_grounding_evaluation_and_thresholds_only_add(setup, result) -> None:
    lake, questions, frames, role_of, hybrid = setup
    headings = heading_index(frames["terms"])
    assert [r.threshold for r in result.rows] == [None, 0.6, 0.75, 0.9]
    direct = evaluate_grounding(questions, hybrid.lexical, role_of, headings)
    assert result.rows[0].grounding == direct
    assert result.rows[0].dense_links == 0
    # a higher threshold keeps a subset of the dense links
    links = [r.dense_links for r in result.rows[1:]]
    assert links == sorted(links, reverse=True)
    for r in result.rows[1:]:
        g = r.grounding
        assert g.bridge_groundings == direct.bridge_groundings + r.dense_bridge
        assert g.bridge_hits == direct.bridge_hits + r.dense_bridge_hits
        assert g.gold_bridge_headings == direct.gold_bridge_headings
    figures = [
        (r.dense_links, r.dense_bridge, r.dense_bridge_hits, r.grounding.questions_with_two_bridge)
        for r in result.rows
    ]
    assert figures == EXPECTED_FIGURES
    assert result.graph_build is None
    assert all(r.pair_selection is None for r in result.rows)


def test_worst_spurious_dense_links_name_span_descriptor_and_cosine(result) -> None:
    worst = result.rows[1].worst_dense
    assert [(s.span, s.name, s.count) for s in worst] == EXPECTED_WORST
    for s in worst:
        assert 0.6 <= s.best_cosine <= 1.0
    report = render_report(result, "dev5.json")
    assert "| hybrid 0.60 |" in report and "Not measured: the lake holds no graph." in report


def test_pick_threshold_takes_most_coverage_with_trustworthy_dense_links(result) -> None:
    precision = [r.grounding.precision for r in result.rows]
    assert precision == pytest.approx(EXPECTED_PRECISION, abs=5e-4)
    assert result.chosen_threshold == EXPECTED_PICK
    # a stricter floor leaves 0.75; stricter still, only 0.9, which adds no coverage
    assert pick_threshold(result.rows, min_precision=0.85)[0] == 0.75
    assert pick_threshold(result.rows, min_precision=0.95)[0] is None


def test_dense_spans_skip_the_lexical_common_word_guard(setup) -> None:
    lake, questions, frames, role_of, hybrid = setup
    question = "Does the role of opioid therapy affect survival?"
    spans = {link.span for link in hybrid.span_links(question)}
    assert {"role", "affect", "therapy"} <= hybrid.lexical.common_words
    assert not spans & {"role", "affect", "therapy"}
    # only a lone guarded word is dropped: spans that hold one still compete
    assert {"role of opioid", "opioid therapy", "opioid therapy affect survival"} <= spans


def test_pair_selection_keeps_the_supported_pair_and_discards_the_rest(tmp_path) -> None:
    lake = Lake(str(tmp_path / "graph"))
    build_question_graph(lake)
    build_concept_index(lake, packaged_encoder(), FeederSettings(workers=0))
    frames, role_of = _mesh_and_roles(lake)
    hybrid = HybridGrounder(
        Grounder.from_terms(frames["terms"], frames["descriptors"]),
        packaged_encoder(),
        ConceptIndex.open(lake),
    )
    questions = [
        # aspirin lexical, "cardiac infarctions" dense: the supported pair, kept
        PubmedqaQuestion("1", "Does aspirin prevent cardiac infarctions?", ("Aspirin", "Myocardial Infarction"), 2001),
        # aspirin + MI lexical; "brain attack" links densely to Stroke (not gold here), and
        # the graph's pair choice (Aspirin + MI, co-annotated once) discards it
        PubmedqaQuestion("2", "Does aspirin prevent myocardial infarction or a brain attack?", ("Aspirin",), 2001),
        # "coumadin" links densely to Warfarin (gold), in the chosen pair Stroke + Warfarin,
        # which no article supports
        PubmedqaQuestion("3", "Is blood thinning by coumadin useful after a cerebral stroke?", ("Warfarin", "Stroke"), 2001),
    ]  # fmt: skip
    store = KGStore.open(lake)
    result = evaluate_hybrid(
        questions, hybrid, role_of, heading_index(frames["terms"]), (0.5,), store
    )
    assert result.graph_build == store.build_id
    assert [g.questions_with_two_bridge for g in (r.grounding for r in result.rows)] == [1, 3]
    assert result.rows[1].pair_selection == PairSelection(
        questions_with_pair=3,
        chosen_pairs_with_support=2,
        chosen_pairs_with_dense=2,
        dense_bridge_in_graph=3,
        dense_in_chosen_pair=2,
        dense_discarded=1,
        spurious_dense_in_chosen_pair=0,
        spurious_dense_discarded=1,
    )
    assert [(s.span, s.name) for s in result.rows[1].worst_dense] == [("brain attack", "Stroke")]
    assert result.rows[0].pair_selection is None  # lexical row: nothing dense to follow


def test_cli_builds_the_concept_index_once_into_the_cache_then_reuses_it(
    setup, eval_home, tmp_path, capsys
):
    from kg_platform.cli import main

    lake, questions, frames, role_of, hybrid = setup
    bare = Lake(str(tmp_path / "bare"))  # MeSH 2024 tables, no concept_index, no graph
    for t in ("descriptors", "tree", "terms"):
        bare.write_parquet(f"mesh/2024/{t}.parquet", lake.read_parquet(f"mesh/{t}.parquet"))
    bare.write_bytes("mesh/2024/manifest.json", b"{}")
    subset = {q.pmid: {"QUESTION": q.question, "MESHES": list(q.headings)} for q in questions[:2]}
    qfile = tmp_path / "dev5.json"
    qfile.write_text(json.dumps(subset))
    cache = tmp_path / "cache"
    argv = ["eval", "hybrid", "--pubmedqa", str(qfile), "--lake", bare.root, "--cache", str(cache)]
    assert main([*argv, "--json", "--thresholds", "0.6", "0.9"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["n"] == 2 and [r["threshold"] for r in doc["rows"]] == [None, 0.6, 0.9]
    assert doc["partition"] == {"release": None, "mesh_year": "2024"}
    assert doc["concept_index"]["built_now"] is True
    assert doc["concept_index"]["location"].startswith(str(cache))
    index, info = provide_concept_index(frames["terms"], packaged_encoder(), bare, cache)
    assert info.built_now is False and info.location == doc["concept_index"]["location"]
    assert len(index.uis) == info.surfaces == doc["concept_index"]["surfaces"]
    # published by grounding_report, beside its lexical report, on the instance
    folder = f"reports/grounding/{question_set_key(qfile)}/2024"
    published = json.loads(bare.read_bytes(f"{folder}/hybrid/report.json"))
    assert published["rows"] == doc["rows"]
    lexical = json.loads(bare.read_bytes(f"{folder}/report.json"))
    assert (lexical["n"], lexical["precision"]) == (2, doc["rows"][0]["grounding"]["precision"])
    instance = dg.DagsterInstance.from_config(str(eval_home / "dagster"))
    event = instance.get_latest_materialization_event(dg.AssetKey("grounding_report"))
    assert event.asset_materialization.metadata["hybrid_thresholds"].value == [0.6, 0.9]
    # `kg eval grounding` materialises the same asset without the hybrid thresholds
    assert main(["eval", "grounding", "--pubmedqa", str(qfile), "--lake", bare.root, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {**lexical, "partition": doc["partition"]}
    assert main([*argv, "--thresholds", "0"]) == 2
    assert "--thresholds [0.0]: each must be in (0, 1]" in capsys.readouterr().err


# (dense links, dense BRIDGE links, of those gold headings, questions with two BRIDGE)
# per row: lexical, 0.6, 0.75, 0.9. At 0.6 "bathing" -> Baths and "mechanical" ->
# Stress, Mechanical are gold; "opioid" -> Opioid-Related Disorders and "visual loss" ->
# Vision, Low are not (their gold is Analgesics, Opioid and Visual Acuity).
EXPECTED_FIGURES = [(0, 0, 0, 1), (10, 4, 2, 4), (6, 2, 1, 2), (0, 0, 0, 1)]
EXPECTED_WORST = [
    ("opioid", "Opioid-Related Disorders", 1),
    ("visual loss", "Vision, Low", 1),
]
# BRIDGE precision per row; all stay above 0.70, and 0.6 covers the most questions
EXPECTED_PRECISION = [1.0, 9 / 11, 8 / 9, 1.0]
EXPECTED_PICK = 0.6
