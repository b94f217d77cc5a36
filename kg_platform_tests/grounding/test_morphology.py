"""Each derivational suffix rule on its own example, and its evidence replayed on the 400
development questions with the real MeSH 2024 surfaces."""

from __future__ import annotations

import pytest

from kg_platform.grounding.grounder import Grounder, derived_variants
from kg_platform.grounding.morphology import SUFFIX_RULES, derived_forms

# the descriptor each rule's example reaches through the real MeSH surfaces
EXPECTED_UI = {
    "scopic": "D010535",  # Laparoscopy
    "graphic": "D008327",  # Mammography
    "tensive": "D006973",  # Hypertension
    "otic": "D011618",  # Psychotic Disorders (entry term "psychosis")
}


@pytest.mark.parametrize("rule", SUFFIX_RULES, ids=lambda r: r.name)
def test_each_rule_on_its_own_example(rule, grounder: Grounder) -> None:
    adjective, surface = rule.example
    assert (surface, rule.name) in derived_forms(adjective)
    # the question's adjective alone grounds to the descriptor, through the rule
    found = [(g.ui, g.surface, g.variant) for g in grounder.ground(adjective)]
    assert found == [(EXPECTED_UI[rule.name], surface, "suffix_" + rule.name)]


@pytest.mark.parametrize("rule", SUFFIX_RULES, ids=lambda r: r.name)
def test_each_rule_replays_its_evidence(rule, roles, dev_groundings, gold_of) -> None:
    # (correct, all) new BRIDGE groundings the rule made on the development questions
    correct = total = 0
    for pmid, groundings in dev_groundings.items():
        for g in groundings:
            if g.variant == "suffix_" + rule.name and roles[g.ui] == "BRIDGE":
                total += 1
                correct += g.ui in gold_of[pmid]
    assert (correct, total) == rule.evidence
    assert correct / total >= 0.5


def test_exact_surface_wins_over_a_derived_form(grounder: Grounder) -> None:
    # "hypertensive retinopathy" is a MeSH name; the rule would have made "hypertension"
    found = [(g.ui, g.variant) for g in grounder.ground("hypertensive retinopathy")]
    assert found == [("D058437", None)]  # Hypertensive Retinopathy


def test_short_stems_are_not_words() -> None:
    assert derived_forms("otic") == ()
    assert derived_forms("scopic") == ()
    assert derived_forms("exotic") == ()  # "ex" is no stem: not "exosis"
    assert derived_forms("hypnotic") == (("hypnosis", "otic"),)
    assert derived_forms("septic") == ()  # no rule ends it


def test_derived_variants_change_one_word_at_a_time() -> None:
    assert derived_variants(["laparoscopic", "hypertensive", "repair"]) == [
        ("laparoscopy hypertensive repair", "suffix_scopic"),
        ("laparoscopic hypertension repair", "suffix_tensive"),
    ]
