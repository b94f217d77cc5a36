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
    # the thesaurus lists "Exercise Training" under Exercise: the longer span wins
    assert [f[:2] for f in found] == [
        ("D015444", "exercise training"),
        ("D006339", "heart rate"),
        ("D012727", "gender differences"),
    ]


def test_spans_do_not_overlap_and_record_positions(grounder: Grounder) -> None:
    groundings = grounder.ground("Is endothelin-1 an aggravating factor in acute pancreatitis?")
    assert [(g.ui, g.start, g.end) for g in groundings] == [
        ("D019332", 1, 3),  # Endothelin-1 <- "endothelin 1"
        ("D010195", 7, 9),  # Pancreatitis <- "acute pancreatitis", a concept of its own now
    ]


def test_british_spelling_and_neoplasm_head(grounder: Grounder) -> None:
    found = grounder.ground("Do paediatric oesophageal tumours respond to breast cancer drugs?")
    by_ui = {g.ui: g for g in found}
    # Breast Neoplasms <- "breast cancer", a term of one of its concepts (no variant needed)
    assert (by_ui["D001943"].term, by_ui["D001943"].variant) == ("Breast Cancer", None)
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
        ("cold", "D000001", "Cold", "name", False),
        ("colds", "D000003", "Colds", "scr_alias", False),
    ]


def test_bad_terms_table_is_named() -> None:
    with pytest.raises(ValueError, match="missing columns"):
        build_surface_table(pl.DataFrame({"ui": ["D000001"]}))


def test_of_inversion_reads_head_of_modifier_as_modifier_head() -> None:
    from kg_platform.grounding.grounder import of_inversion

    assert of_inversion(["resection", "of", "the", "prostate"]) == "prostate resection"
    assert of_inversion(["necrosis", "of", "bone"]) == "bone necrosis"
    assert of_inversion(["of", "bone"]) is None  # no head
    assert of_inversion(["quality", "of"]) is None  # no modifier
    assert of_inversion(["history", "of", "use", "of", "drugs"]) is None  # two "of"


def test_of_inversion_on_a_development_question(grounder: Grounder, dev_questions) -> None:
    question = dev_questions["21361755"].question
    assert question.endswith("ossification of the posterior longitudinal ligament?")
    last = grounder.ground(question)[-1]
    assert (last.ui, last.surface, last.variant) == (
        "D017887",  # Ossification of Posterior Longitudinal Ligament
        "posterior longitudinal ligament ossification",
        "of_inversion",
    )


def test_carcinoma_is_a_neoplasm_head(grounder: Grounder, dev_questions) -> None:
    found = _found(grounder, dev_questions["11799314"].question)
    assert found == [
        ("D011878", "radiotherapy", "name"),
        ("D005706", "gallbladder neoplasms", "name"),  # Gallbladder Neoplasms
    ]
    # a carcinoma MeSH names itself still matches as written
    assert _found(grounder, "hepatocellular carcinoma") == [
        ("D006528", "hepatocellular carcinoma", "entry")
    ]


def test_derived_surfaces_fill_unclaimed_keys(grounder: Grounder) -> None:
    assert _found(grounder, "Is computed tomography needed?") == [
        ("D014057", "computed tomography", "derived")  # Tomography, X-Ray Computed
    ]
    assert _found(grounder, "Is Ki-67 a prognostic marker?") == [
        ("D019394", "ki 67", "derived")  # Ki-67 Antigen
    ]
    # a key without a digit keeps its head: "dietary" is no surface of Dietary Proteins
    assert grounder.lookup("dietary") is None


def test_derived_surfaces_never_override_or_guess() -> None:
    from kg_platform.grounding.grounder import DERIVED_KIND

    terms = pl.DataFrame(
        {
            "ui": ["D1", "D2", "D3", "D4", "D5", "D6"],
            "term": [
                "Tomography, X-Ray",
                "Tomography",
                "P53 Protein",
                "P53 Genes",
                "X1 Antigen",
                "K-9 Antigen",
            ],
            "normalised": [
                "tomography x ray",
                "tomography",
                "p53 protein",
                "p53 genes",
                "x1 antigen",
                "k 9 antigen",
            ],
            "kind": ["name", "name", "name", "name", "scr_alias", "entry"],
        }
    )
    table = build_surface_table(terms)
    # "tomography" is claimed by D2; "p53" would name two descriptors; aliases derive nothing
    assert table.filter(pl.col("kind") == DERIVED_KIND).rows() == [
        ("k 9", "D6", "K-9 Antigen", DERIVED_KIND, False)
    ]
    assert table.filter(pl.col("key") == "tomography")["ui"].to_list() == ["D2"]


def test_every_variant_earns_its_place(roles, dev_groundings, gold_of) -> None:
    # (correct, all) BRIDGE groundings each variant and the derived surfaces made on the
    # 400 development questions: every one is at least as precise as the 0.70 target,
    # except two suffix rules kept for coverage, "-graphic" 3/4 and "-otic" 1/2
    # (see morphology.py). With every concept's terms most "<site> cancer" spans are MeSH
    # terms themselves ("Breast Cancer"), so the neoplasm head is needed twice, not 27 times.
    tally: dict[str, list[int]] = {}
    for pmid, groundings in dev_groundings.items():
        for g in groundings:
            kind = g.variant or ("derived" if g.kind == "derived" else None)
            if kind is None or roles[g.ui] != "BRIDGE":
                continue
            counts = tally.setdefault(kind, [0, 0])
            counts[0] += g.ui in gold_of[pmid]
            counts[1] += 1
    assert {k: tuple(v) for k, v in sorted(tally.items())} == {
        "derived": (5, 6),
        "neoplasm_head": (2, 2),
        "of_inversion": (3, 4),
        "singular": (2, 2),
        "suffix_graphic": (3, 4),
        "suffix_otic": (1, 2),
        "suffix_scopic": (8, 9),
        "suffix_tensive": (4, 4),
    }
