"""Evidence deletion on the small real-shaped question graph (answer/graph_fixture): an
exclusion set removes exactly the articles it names, from concepts, pair support and paths,
and with nothing excluded the question path is the one-pass structural path bit for bit."""

from __future__ import annotations

from itertools import combinations

import numpy as np

from kg_platform.answer.api import KnowledgeGraph
from kg_platform.grounding.grounder import Grounding
from kg_platform.retrieval.exclusion import (
    excluded_nodes,
    pair_evidence_excluding,
    pair_paths,
    without_articles,
)
from kg_platform.retrieval.linking import concepts_in_graph, score_pairs
from kg_platform.retrieval.paths import collect_candidates, pair_evidence
from kg_platform_tests.answer.graph_fixture import (
    ASPIRIN,
    ASTHMA,
    HEPARIN,
    IBUPROFEN,
    MI,
    PE,
    STROKE,
    WARFARIN,
)

BRIDGES = (ASPIRIN, MI, HEPARIN, PE, IBUPROFEN, ASTHMA, WARFARIN, STROKE)


def concepts(kg: KnowledgeGraph, uis=BRIDGES, excluded=None):
    found = [Grounding(ui, kg.grounder.names[ui], "s", "t", "name", 0, 1) for ui in uis]
    return concepts_in_graph(kg.store, found, excluded)


def pmids_of(kg: KnowledgeGraph, nodes: np.ndarray) -> list[int]:
    return [kg.store.pmid(int(i)) for i in nodes]


def test_excluded_nodes_ignore_pmids_the_graph_lacks(kg) -> None:
    nodes = excluded_nodes(kg.store, [400, 100, 999, 100])
    assert pmids_of(kg, nodes) == [100, 400]
    assert excluded_nodes(kg.store, []).size == 0


def test_nothing_excluded_is_the_one_pass_path_bit_for_bit(kg) -> None:
    none = np.zeros(0, dtype=np.int64)
    pairs = score_pairs(kg.store, concepts(kg))
    assert len(pairs) == 28
    for pair in pairs:
        for gates in ({}, {"quotable_gate": False, "retracted_gate": False}, {"as_of": 2004}):
            one = pair_evidence(kg.store, pair, [], 10, **gates)
            other = pair_evidence_excluding(kg.store, pair, [], 10, none, **gates)
            assert one.counts == other.counts, (pair.label, gates)
            for name in ("kind", "source", "terminal", "relation"):
                assert np.array_equal(getattr(one.top, name), getattr(other.top, name))
            assert one.scores.tobytes() == other.scores.tobytes()


def test_an_exclusion_set_removes_only_the_articles_it_names(kg) -> None:
    store = kg.store
    excluded = excluded_nodes(store, [100])
    # concepts: Aspirin and MI keep other articles; nothing else is touched
    assert [c.grounding.ui for c in concepts(kg, excluded=excluded)] == list(BRIDGES)
    # Warfarin's only article gone: the graph no longer knows it
    only = excluded_nodes(store, [700])
    assert [c.grounding.ui for c in concepts(kg, excluded=only)] == [
        u for u in BRIDGES if u != WARFARIN
    ]
    # pair support: 100 was Aspirin + MI's one co-annotation (major and not)
    full = {p.label: p for p in score_pairs(store, concepts(kg))}
    cut = {p.label: p for p in score_pairs(store, concepts(kg), excluded)}
    label = "Aspirin + Myocardial Infarction"
    assert (full[label].major_co_annotations, full[label].co_annotations) == (1, 1)
    assert (cut[label].major_co_annotations, cut[label].co_annotations) == (0, 0)
    assert {k: p for k, p in cut.items() if k != label} == {
        k: p for k, p in full.items() if k != label
    }
    # paths: DIRECT 100 and BRIDGE 100 <-- 400 touch 100; BRIDGE 200 --> 300 stays
    pair = full[label]
    every = collect_candidates(store, pair)
    assert sorted(zip(pmids_of(kg, every.source), pmids_of(kg, every.terminal), strict=True)) == [
        (100, 100),
        (100, 400),
        (200, 300),
    ]
    kept = without_articles(every, excluded)
    assert list(zip(pmids_of(kg, kept.source), pmids_of(kg, kept.terminal), strict=True)) == [
        (200, 300)
    ]
    evidence = pair_evidence_excluding(store, pair, [], 10, excluded)
    assert evidence.counts == {
        "candidates": 1,
        "quotable": 1,
        "unretracted": 1,
        "as_of": 0,
        "evidence": 1,
    }
    assert pmids_of(kg, evidence.top.terminal) == [300]
    # every other pair's paths are unchanged
    for a, b in combinations(concepts(kg), 2):
        p = next(x for x in full.values() if {x.a_ui, x.b_ui} == {a.grounding.ui, b.grounding.ui})
        if p.label != label:
            assert pair_evidence_excluding(store, p, [], 10, excluded).counts == (
                pair_evidence(store, p, [], 10).counts
            )


def test_pair_paths_are_its_direct_articles_and_bridge_terminals(kg) -> None:
    (pair,) = score_pairs(kg.store, concepts(kg, (ASPIRIN, MI)))
    direct, terminals = pair_paths(kg.store, pair)
    assert (pmids_of(kg, direct), pmids_of(kg, terminals)) == ([100], [300, 400])


def test_ask_with_an_exclusion_set(kg) -> None:
    question = "Does aspirin prevent myocardial infarction?"
    full = kg.ask(question)
    assert [e.path.terminal.pmid for e in full.evidence] == [100, 300, 400]
    answer = kg.ask(question, excluded=excluded_nodes(kg.store, [100]))
    assert answer.verdict.answerable
    assert [e.to_json()["rendered"] for e in answer.evidence] == [
        "BRIDGE [Aspirin + Myocardial Infarction] 200 --cites--> 300 (2005)"
    ]
    # every Myocardial Infarction article gone: the graph no longer knows the concept
    gone = kg.ask(question, excluded=excluded_nodes(kg.store, [100, 300, 400]))
    assert (gone.verdict.answerable, gone.verdict.reason) == (False, "too_few_specific_concepts")
    assert gone.verdict.counts == {"groundings": 2, "bridge_concepts": 1}
    # an empty exclusion set is no exclusion
    same = kg.ask(question, excluded=np.zeros(0, dtype=np.int64))
    assert same.to_json()["evidence"] == full.to_json()["evidence"]
