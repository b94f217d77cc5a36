"""Refusal under evidence deletion on the small real-shaped question graph
(answer/graph_fixture) with two more articles, 910 (Aspirin, 2012) and 920 (Myocardial
Infarction, 2013), citing nothing: deleting every path of Aspirin + MI leaves both concepts
known, so T3 refuses with ``no_path``."""

from __future__ import annotations

import pytest

from kg_platform.answer.api import KnowledgeGraph
from kg_platform.evaluation.refusal.evaluation import evaluate_refusal
from kg_platform.evaluation.refusal.evidence_deletion import (
    deletion_sets,
    evaluate_evidence_deletion,
    random_deletion,
    render_deletion,
)
from kg_platform.retrieval.exclusion import excluded_nodes
from kg_platform.storage.lake import Lake
from kg_platform_tests.answer.graph_fixture import ASPIRIN, MI, build_question_graph

QUESTIONS = [
    ("100", "Does aspirin prevent myocardial infarction?"),
    ("700", "Does warfarin prevent stroke?"),
    ("999", "Does aspirin prevent myocardial infarction?"),  # no article 999 in the graph
]


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> KnowledgeGraph:
    lake = Lake(str(tmp_path_factory.mktemp("deletion") / "lake"))
    build_question_graph(lake, extra={910: (2012, (ASPIRIN,)), 920: (2013, (MI,))})
    return KnowledgeGraph.open(lake)


def pmids(kg: KnowledgeGraph, nodes) -> list[int]:
    return [kg.store.pmid(int(i)) for i in nodes]


def test_the_tiers_delete_source_direct_then_bridge_terminals(wide) -> None:
    answer = wide.ask(QUESTIONS[0][1])
    sets = deletion_sets(wide, wide.store.idx(100), answer.chosen_pair)
    assert [pmids(wide, s) for s in sets.tiers] == [[], [100], [100], [100, 300, 400]]
    # no pair at all: only the source is deleted at T2 and T3
    none = deletion_sets(wide, wide.store.idx(700), None)
    assert [pmids(wide, s) for s in none.tiers] == [[], [700], [700], [700]]


def test_t3_with_every_path_deleted_refuses_no_path(wide) -> None:
    excluded = excluded_nodes(wide.store, [100, 300, 400])
    verdict = wide.ask(QUESTIONS[0][1], excluded=excluded).verdict
    assert (verdict.answerable, verdict.reason) == (False, "no_path")
    assert verdict.counts == {"groundings": 2, "bridge_concepts": 2, "candidate_paths": 0}


def test_random_deletion_is_seeded_and_size_matched(wide) -> None:
    import numpy as np

    one = random_deletion(wide.store.n_articles, 3, np.random.default_rng([0, 5]))
    two = random_deletion(wide.store.n_articles, 3, np.random.default_rng([0, 5]))
    assert one.tolist() == two.tolist() and len(set(one.tolist())) == 3
    assert random_deletion(4, 9, np.random.default_rng(0)).tolist() == [0, 1, 2, 3]


def test_refusal_per_tier_and_its_controls(wide) -> None:
    result = evaluate_evidence_deletion(wide, QUESTIONS, seed=0, resamples=200)
    assert (result.n, result.missing_sources) == (2, ("999",))
    aspirin, warfarin = result.outcomes
    assert aspirin.pair == (ASPIRIN, MI) and aspirin.excluded == (0, 1, 1, 3)
    assert aspirin.tiers == ("answered", "answered", "answered", "no_path")
    assert warfarin.tiers == (
        "no_path",
        "too_few_specific_concepts",
        "too_few_specific_concepts",
        "too_few_specific_concepts",
    )
    doc = result.to_json()
    assert [t["refusal_rate"] for t in doc["tiers"]] == [0.5, 0.5, 0.5, 1.0]
    assert [t["minus_previous"]["difference"] for t in doc["tiers"][1:]] == [0.0, 0.0, 0.5]
    assert doc["tiers"][3]["reasons"] == {"no_path": 1, "too_few_specific_concepts": 1}
    assert aspirin.controls == CONTROLS_ASPIRIN
    assert [t["control_refusal_rate"] for t in doc["tiers"][1:]] == CONTROL_RATES
    # the same seed gives the same figures, bit for bit
    again = evaluate_evidence_deletion(wide, QUESTIONS, seed=0, resamples=200).to_json()
    assert again == doc
    assert render_deletion(doc)[0].startswith("  evidence deletion: 2 questions")


CONTROLS_ASPIRIN = ("answered", "answered", "answered")
CONTROL_RATES = [0.5, 0.5, 0.5]


def test_refusal_report_carries_the_deletion_tiers(wide) -> None:
    report = evaluate_refusal(wide, QUESTIONS, min_paths=1, per_class=2, resamples=200)
    doc = report.to_json()["evidence_deletion"]
    assert (doc["n"], doc["missing_sources"], doc["with_pair_at_t0"]) == (2, 1, 2)
    assert [t["tier"] for t in doc["tiers"]] == ["T0", "T1", "T2", "T3"]


def test_no_source_in_the_graph_gives_no_tiers(wide) -> None:
    doc = evaluate_evidence_deletion(wide, [("q1", "Is the sky blue?")], resamples=10).to_json()
    assert doc == {"n": 0, "missing_sources": 1, "tiers": None}
    with pytest.raises(ValueError, match="evidence deletion: no questions"):
        evaluate_evidence_deletion(wide, [])
