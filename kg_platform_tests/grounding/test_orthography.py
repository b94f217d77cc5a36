import pytest

from kg_platform.grounding.orthography import ORTHOGRAPHY_RULES, americanise, spell_greek


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
