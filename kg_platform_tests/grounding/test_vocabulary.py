"""The vocabulary rules over MeSH's own term facts, on the real thesaurus and small frames."""

from __future__ import annotations

import polars as pl

from kg_platform.grounding.grounder import Grounder, build_surface_table
from kg_platform.text.vocabulary import NO_RULES, usable_terms, with_concept_features


def _found(grounder: Grounder, question: str) -> list[tuple[str, str]]:
    return [(g.ui, g.surface) for g in grounder.ground(question)]


def test_terms_of_non_preferred_concepts_ground(grounder: Grounder) -> None:
    # none of these is a term of its descriptor's preferred concept
    assert _found(grounder, "Is breast cancer screening worth it?")[0] == (
        "D001943",  # Breast Neoplasms
        "breast cancer",
    )
    assert ("D008175", "lung cancer") in _found(grounder, "Does smoking cause lung cancer?")
    found = {g.ui: g for g in grounder.ground("Is gastric cancer curable?")}
    assert (found["D013274"].term, found["D013274"].variant) == ("Gastric Cancer", None)


def test_lone_words_come_from_the_preferred_concept(mesh_frames, grounder: Grounder) -> None:
    terms = with_concept_features(mesh_frames["terms"])
    # "Self" is a concept of Ego, not its preferred one: alone it no longer grounds
    self_term = terms.filter((pl.col("ui") == "D004532") & (pl.col("normalised") == "self"))
    assert self_term.select("kind", "preferred_concept").rows() == [("entry", False)]
    assert "self" not in usable_terms(mesh_frames["terms"])["normalised"].to_list()
    assert "D004532" not in {g.ui for g in grounder.ground("Is self efficacy stable?")}
    # a multi-word term of another concept still grounds ("Exercise Training")
    assert _found(grounder, "Does exercise training help?") == [("D015444", "exercise training")]
    # without the rules the lone word is a surface again
    everything = Grounder(build_surface_table(mesh_frames["terms"], NO_RULES), grounder.names)
    assert everything.lookup("self").ui == "D004532"


def test_abbreviations_ground_only_as_written(grounder: Grounder) -> None:
    # "ICSI" is tagged ACR: as written it is the procedure, lower case it is nothing
    assert _found(grounder, "Is ICSI better than IVF?")[0][0] == "D020554"
    assert "D020554" not in {g.ui for g in grounder.ground("is icsi better than ivf?")}
    entry = grounder.lookup("icsi")
    assert (entry.ui, entry.term, entry.as_written) == ("D020554", "ICSI", True)


def test_concept_features_on_a_small_table() -> None:
    terms = pl.DataFrame(
        {
            "ui": ["D1", "D1", "D1", "D1"],
            "term": ["Heart", "Cardiac", "Heart Thing", "HT"],
            "normalised": ["heart", "cardiac", "heart thing", "ht"],
            "kind": ["name", "entry", "entry", "entry"],
            "concept_ui": ["M1", "M2", "M2", "M1"],
            "term_ui": ["T1", "T2", "T3", "T4"],
            "concept_preferred": [True, True, False, False],
            "permuted": [False, False, False, False],
            "lexical_tag": ["NON", "NON", "NON", "ABB"],
        }
    )
    table = build_surface_table(terms)
    # "cardiac" is a lone word of concept M2, not the preferred M1: dropped
    assert table.select("key", "as_written").rows() == [
        ("heart", False),
        ("heart thing", False),
        ("ht", True),
    ]
    # a terms table without concept columns (an older lake) keeps every term
    bare = terms.select("ui", "term", "normalised", "kind")
    assert build_surface_table(bare)["key"].to_list() == ["cardiac", "heart", "heart thing", "ht"]
