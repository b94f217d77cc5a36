"""Scoring folds of one question set from span links computed once gives exactly what
scoring each fold on its own gives (the grounding benchmark scores fit and held this way)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kg_platform.evaluation.grounding.evaluation import PubmedqaQuestion, heading_index
from kg_platform.evaluation.grounding.hybrid import evaluate_hybrid, link_questions
from kg_platform.grounding.roles import Role
from kg_platform_tests.support.hybrid import DESCRIPTORS, hybrid_grounder, mesh_terms

QUESTIONS = [
    PubmedqaQuestion(
        "1", "Does aspirin reduce cardiac infarctions in people with raised blood pressure?",
        ("Aspirin", "Myocardial Infarction", "Hypertension"), 2020,
    ),
    PubmedqaQuestion(
        "2", "Is high blood pressure a risk in diabetic patients after a heart attack?",
        ("Hypertension", "Diabetes Mellitus"), 2021,
    ),
    PubmedqaQuestion(
        "3", "Does acetylsalicylic acid help patients with sugar diabetes?",
        ("Aspirin", "Diabetes Mellitus"), 2019,
    ),
]  # fmt: skip
ROLES = {ui: Role.BRIDGE for ui in DESCRIPTORS}


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    return hybrid_grounder(str(tmp_path_factory.mktemp("folds")))


def test_folds_scored_from_shared_span_links_equal_folds_scored_alone(hybrid):
    headings = heading_index(mesh_terms())
    linked, _ = link_questions(QUESTIONS, hybrid, headings)
    for fold in (QUESTIONS[:2], QUESTIONS[2:], QUESTIONS[::-1]):
        shared = evaluate_hybrid(fold, hybrid, ROLES, headings, (0.5, 0.9), linked=linked)
        alone = evaluate_hybrid(fold, hybrid, ROLES, headings, (0.5, 0.9))
        assert shared.span_link_seconds == 0.0
        assert replace(shared, span_link_seconds=alone.span_link_seconds) == alone
        assert shared.n == len(fold)
    # not vacuous: at 0.5 dense links ground question 1's infarction and blood pressure and
    # question 2's "diabetic", all gold headings
    first_two = evaluate_hybrid(QUESTIONS[:2], hybrid, ROLES, headings, (0.5, 0.9), linked=linked)
    assert [
        (r.threshold, r.grounding.questions_with_two_bridge, r.dense_bridge, r.dense_bridge_hits)
        for r in first_two.rows
    ] == [(None, 1, 0, 0), (0.5, 2, 3, 3), (0.9, 1, 0, 0)]


def test_shared_span_links_must_cover_every_question(hybrid):
    headings = heading_index(mesh_terms())
    linked, _ = link_questions(QUESTIONS[:2], hybrid, headings)
    with pytest.raises(ValueError, match=r"^linked: no span links for questions \['3'\]"):
        evaluate_hybrid(QUESTIONS, hybrid, ROLES, headings, (0.5,), linked=linked)
