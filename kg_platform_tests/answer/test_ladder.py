"""Each gate of the refusal ladder, triggered by a constructed case on a small real-shaped
graph (see graph_fixture), plus input validation."""

from __future__ import annotations

import pytest

from kg_platform.answer.api import AskConfig, KnowledgeGraph
from kg_platform.answer.ladder import LadderConfig
from kg_platform.answer.question import QuestionError


@pytest.mark.parametrize(
    ("question", "as_of", "reason", "gate"),
    [
        ("Is the sky blue today?", None, "no_mesh_entry_point", 1),
        ("Does aspirin help humans?", None, "too_few_specific_concepts", 2),
        ("Does warfarin prevent stroke?", None, "no_path", 3),
        ("Is heparin useful in pulmonary embolism?", None, "no_quotable_terminal", 4),
        ("Does ibuprofen worsen asthma?", None, "only_retracted_evidence", 5),
        ("Does aspirin prevent myocardial infarction?", 2000, "no_evidence_as_of_date", 5),
    ],
)
def test_each_gate(kg: KnowledgeGraph, question, as_of, reason, gate) -> None:
    answer = kg.ask(question, as_of=as_of)
    assert not answer.verdict.answerable
    assert (answer.verdict.reason, answer.verdict.gate) == (reason, gate)
    assert answer.evidence == ()
    assert answer.verdict.explanation


def test_gate_six_against_a_configured_minimum(question_lake) -> None:
    strict = KnowledgeGraph.open(question_lake, AskConfig(ladder=LadderConfig(min_paths=4)))
    verdict = strict.ask("Does aspirin prevent myocardial infarction?").verdict
    assert (verdict.reason, verdict.gate) == ("insufficient_paths", 6)
    assert verdict.counts["evidence_paths"] == 3


def test_counts_per_stage_on_a_refusal(kg: KnowledgeGraph) -> None:
    verdict = kg.ask("Does ibuprofen worsen asthma?").verdict
    assert verdict.counts == {
        "groundings": 2,
        "bridge_concepts": 2,
        "candidate_paths": 1,
        "quotable_paths": 1,
        "unretracted_paths": 0,
    }


def test_as_of_keeps_only_older_evidence(kg: KnowledgeGraph) -> None:
    answer = kg.ask("Does aspirin prevent myocardial infarction?", as_of=2010)
    assert answer.verdict.answerable
    assert [e.path.render() for e in answer.evidence] == [
        "DIRECT [Aspirin + Myocardial Infarction] 100 (2001)",
        "BRIDGE [Aspirin + Myocardial Infarction] 200 --cites--> 300 (2005)",
    ]
    # 200 (2010) -> 300 goes: a path is as old as its newest article
    answer = kg.ask("Does aspirin prevent myocardial infarction?", as_of=2005)
    assert [e.path.render() for e in answer.evidence] == [
        "DIRECT [Aspirin + Myocardial Infarction] 100 (2001)"
    ]


@pytest.mark.parametrize(
    ("question", "message"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("x" * 1001, "1001 characters, the limit is 1000"),
        ("aspirin\x00 and stroke", "control characters \\(U\\+0000\\)"),
        ("aspirin\x1b[31m", "control characters \\(U\\+001B\\)"),
    ],
)
def test_bad_questions_get_clear_errors(kg: KnowledgeGraph, question, message) -> None:
    with pytest.raises(QuestionError, match=message):
        kg.ask(question)
