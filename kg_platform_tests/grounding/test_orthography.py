import pytest

from kg_platform.grounding.orthography import (
    ORTHOGRAPHY_CANDIDATES,
    ORTHOGRAPHY_RULES,
    americanise,
    spell_greek,
)


@pytest.mark.parametrize("rule", ORTHOGRAPHY_RULES, ids=lambda r: r.name)
def test_each_rule_on_its_own_example(rule) -> None:
    british, american = rule.example
    assert rule.needle in british
    assert americanise(british) == american
    # US spelling is a fixed point: applying the rules twice changes nothing
    assert americanise(american) == american


def test_rules_leave_ordinary_words_alone() -> None:
    text = "does aspirin prevent myocardial infarction in diseases of the toe"
    assert americanise(text) == text


def test_rules_apply_inside_a_sentence() -> None:
    assert (
        americanise("paediatric oesophageal tumours under anaesthesia in coeliac disease")
        == "pediatric esophageal tumors under anesthesia in celiac disease"
    )


def test_greek_letters_are_spelled_out() -> None:
    assert spell_greek("β-catenin and TNF-α") == " beta -catenin and TNF- alpha "


def test_candidates_hold_every_text_a_rule_changes(mesh_frames) -> None:
    """The vectorised pre-filter (``ORTHOGRAPHY_CANDIDATES``, run by Polars) lets through
    every normalised MeSH term ``americanise`` changes, and each rule's example; of the
    terms holding a needle, it passes a few thousand rather than ~175k."""
    import polars as pl

    from kg_platform.grounding.orthography import ORTHOGRAPHY_TRIGGERS

    keys = mesh_frames["terms"]["normalised"].unique()
    passed = keys.str.contains(ORTHOGRAPHY_CANDIDATES)
    changed = [k for k in keys.filter(~passed).to_list() if americanise(k) != k]
    assert changed == []
    examples = pl.Series([r.example[0] for r in ORTHOGRAPHY_RULES])
    assert examples.str.contains(ORTHOGRAPHY_CANDIDATES).all()
    assert keys.str.contains(ORTHOGRAPHY_TRIGGERS).sum() > 30 * passed.sum()
