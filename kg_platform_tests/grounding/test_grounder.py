"""Exact groundings of real development questions on the real MeSH 2024 tables."""

from __future__ import annotations

import polars as pl
import pytest

from kg_platform.grounding.grounder import Grounder, build_surface_table


def _found(grounder: Grounder, question: str) -> list[tuple[str, str, str]]:
    return [(g.ui, g.surface, g.kind) for g in grounder.ground(question)]


def test_longest_match_wins_over_its_parts(grounder: Grounder) -> None:
    # "myocardial infarction" beats "infarction"; "heart rate" beats "heart"
    assert _found(grounder, "Does aspirin prevent myocardial infarction?") == [
        ("D001241", "aspirin", "name"),
        ("D009203", "myocardial infarction", "name"),
    ]
    found = _found(
        grounder,
        "Effects of exercise training on heart rate and QT interval in healthy young "
        "individuals: are there gender differences?",
    )
    assert [f[:2] for f in found] == [
        ("D015444", "exercise"),
        ("D006339", "heart rate"),
        ("D012727", "gender differences"),
    ]


def test_spans_do_not_overlap_and_record_positions(grounder: Grounder) -> None:
    groundings = grounder.ground("Is endothelin-1 an aggravating factor in acute pancreatitis?")
    assert [(g.ui, g.start, g.end) for g in groundings] == [
        ("D019332", 1, 3),  # Endothelin-1 <- "endothelin 1"
        ("D010195", 8, 9),  # pancreatitis (acute pancreatitis has no surface of its own)
    ]


def test_british_spelling_and_neoplasm_head(grounder: Grounder) -> None:
    found = grounder.ground("Do paediatric oesophageal tumours respond to breast cancer drugs?")
    by_ui = {g.ui: g for g in found}
    assert by_ui["D001943"].variant == "neoplasm_head"  # Breast Neoplasms <- "breast cancer"
    assert "D004938" in by_ui  # Esophageal Neoplasms <- "esophageal tumors"


def test_greek_letter_question(grounder: Grounder, dev_questions) -> None:
    text = dev_questions["20813740"].question
    assert text.startswith("Does β-catenin have a role")
    # without spelling β out, only "catenin" (Catenins) would match
    assert "D051176" in {g.ui for g in grounder.ground(text)}  # beta Catenin


def test_surface_table_prefers_names_then_lowest_ui() -> None:
    terms = pl.DataFrame(
        {
            "ui": ["D000002", "D000001", "D000003"],
            "term": ["Cold", "Cold", "Colds"],
            "normalised": ["cold", "cold", "colds"],
            "kind": ["entry", "name", "scr_alias"],
        }
    )
    table = build_surface_table(terms)
    assert table.rows() == [
        ("cold", "D000001", "Cold", "name"),
        ("colds", "D000003", "Colds", "scr_alias"),
    ]


def test_bad_terms_table_is_named() -> None:
    with pytest.raises(ValueError, match="missing columns"):
        build_surface_table(pl.DataFrame({"ui": ["D000001"]}))
