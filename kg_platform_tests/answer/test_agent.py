"""The agent loop on the small real-shaped question graph (answer/graph_fixture) with real
MeSH ancestors: Cerebrovascular Disorders (D002561, parent of Stroke at C10.228.140.300 and
C14.907.253) and Myocardial Ischemia (D017202), and three more articles: 930 (Warfarin +
Cerebrovascular Disorders, 2015), 940 (Myocardial Ischemia, 2016) and 950 (Aspirin, 2017)."""

from __future__ import annotations

import pytest

from kg_platform.answer.agent import AgentLoop
from kg_platform_tests.answer.graph_fixture import MI, STROKE, WARFARIN
from kg_platform_tests.support import agent as agent_graph
from kg_platform_tests.support.agent import CEREBROVASCULAR, ISCHEMIA

wide = agent_graph.wide  # the fixture


def test_a_question_answered_in_one_pass_takes_no_hop(wide) -> None:
    result = AgentLoop(wide).run("Does aspirin prevent myocardial infarction?")
    assert (result.hops, result.answered_at_hop) == (0, 0)
    assert [t["step"] for t in result.trace] == ["retrieve"]
    one_pass = wide.ask("Does aspirin prevent myocardial infarction?")
    assert result.answer.to_json()["evidence"] == one_pass.to_json()["evidence"]


def test_broadening_names_the_ancestor_and_the_tree_numbers_walked(wide) -> None:
    question = "Does warfarin prevent stroke?"
    assert wide.ask(question).verdict.reason == "no_path"
    result = AgentLoop(wide).run(question)
    assert (result.hops, result.answered_at_hop) == (1, 1)
    first, broaden = result.trace
    assert (first["step"], first["reason"], first["pair"]) == (
        "retrieve",
        "no_path",
        [WARFARIN, STROKE],
    )
    assert broaden["step"] == "broaden" and broaden["why"] == "no_path"
    # Stroke has one article, Warfarin two: Stroke is the most specific and is broadened
    assert broaden["changed"] == {
        "from": {"ui": STROKE, "name": "Stroke", "articles": 1},
        "to": {"ui": CEREBROVASCULAR, "name": "Cerebrovascular Disorders", "articles": 1},
        "tree_numbers_walked": ["C10.228.140.300.775", "C10.228.140.300"],
    }
    assert broaden["pair"] == [WARFARIN, CEREBROVASCULAR] and broaden["answerable"]
    doc = result.to_json()
    assert [e["pmid"] for e in doc["evidence"]] == [930]
    assert doc["agent"]["hops"] == 1 and doc["agent"]["budget"] == 3
    (stroke,) = [g for g in doc["groundings"] if g["ui"] == CEREBROVASCULAR]
    assert (stroke["kind"], stroke["role_reason"]) == ("broadened", f"broadened_from_{STROKE}")


def test_refinements_in_order_each_once_then_stop(wide) -> None:
    # Ibuprofen + Asthma: only a retracted article; broadening finds no ancestor in these
    # tables, two concepts cannot be dropped, min_paths 1 cannot be halved
    result = AgentLoop(wide).run("Does ibuprofen worsen asthma?")
    assert result.hops == 0 and result.answered_at_hop is None
    assert [(t["step"], t["why"]) for t in result.trace] == [
        ("retrieve", None),
        ("stop", "only_retracted_evidence"),
    ]
    assert result.answer.verdict.reason == "only_retracted_evidence"


def test_halving_min_paths_is_the_last_step(wide) -> None:
    from dataclasses import replace

    strict = wide.with_config(replace(wide.config, ladder=replace(wide.config.ladder, min_paths=4)))
    # Aspirin + MI has 3 evidence paths: refused at 4. Aspirin (3 articles, deeper) has no
    # ancestor in these tables, so MI (3 articles) broadens to Myocardial Ischemia, whose
    # one article 940 carries no Aspirin: no path. Nothing to drop; 4 -> 2 keeps the
    # broadened plan (the refinements accumulate), still no path; then nothing is left
    result = AgentLoop(strict, hops=3).run("Does aspirin prevent myocardial infarction?")
    steps = [(t["step"], t.get("reason"), t["why"]) for t in result.trace]
    assert steps == [
        ("retrieve", "insufficient_paths", None),
        ("broaden", "no_path", "insufficient_paths"),
        ("halve_min_paths", "no_path", "no_path"),
        ("stop", None, "no_path"),
    ]
    assert (result.hops, result.answer.verdict.reason, result.min_paths) == (2, "no_path", 2)
    assert result.trace[1]["changed"]["to"]["ui"] == ISCHEMIA
    assert result.trace[1]["changed"]["tree_numbers_walked"] == [
        "C14.280.647.500",
        "C14.280.647",
    ]
    assert result.trace[2]["changed"] == {"min_paths": [4, 2]}
    # the budget bounds the hops
    assert AgentLoop(strict, hops=1).run("Does aspirin prevent myocardial infarction?").hops == 1
    assert MI in {c["ui"] for c in result.trace[0]["concepts"]}


def test_a_negative_budget_is_an_error(wide) -> None:
    with pytest.raises(ValueError, match="agent hops -1: must be at least 0"):
        AgentLoop(wide, hops=-1)
