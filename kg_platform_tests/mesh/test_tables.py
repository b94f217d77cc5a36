"""The seven MeSH tables built from the reference TSVs: counts, rows and loader rules."""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from kg_platform.mesh.checks import check_mesh_build, recount_source
from kg_platform.mesh.tables import (
    MESH_TABLE_NAMES,
    MIN_SCR_ALIAS_CHARS,
    _with_normalised,
    deinvert,
    normalised_column,
)
from kg_platform.schemas import MESH_TABLES
from kg_platform.text.normalise import normalise


def test_reference_counts(reference_build, reference_frames):
    assert reference_build.tables["descriptors"].num_rows == 30_764
    assert reference_build.tables["tree"].num_rows == 64_457
    terms = reference_frames["terms"]
    # every concept's terms from the thesaurus (the descriptor TSV alone: 137,409)
    assert terms.filter(pl.col("kind") == "entry").height == 233_172
    assert terms.filter(pl.col("kind") == "name").height == 30_764
    assert reference_build.n_supplementary == 323_304
    assert reference_build.row_counts() == {
        "descriptors": 30_764,
        "tree": 64_457,
        "broader": 42_021,
        "allowable": 626_380,
        "terms": 1_050_409,
        "qualifiers": 76,
        "scr_aliases": 798_621,
    }


def test_table_columns_are_the_contract(reference_build):
    columns = {name: reference_build.tables[name].column_names for name in MESH_TABLE_NAMES}
    assert columns == {
        "descriptors": ["ui", "name", "categories", "min_depth", "n_trees"],
        "tree": ["ui", "tree_number"],
        "broader": ["child_ui", "parent_ui"],
        "allowable": ["descriptor_ui", "qualifier_ui"],
        "terms": [
            "ui",
            "term",
            "normalised",
            "kind",
            "concept_ui",
            "term_ui",
            "concept_preferred",
            "permuted",
            "lexical_tag",
        ],
        "qualifiers": ["ui", "name", "abbreviation"],
        "scr_aliases": ["scr_ui", "surface", "heading_ui"],
    }
    assert pa.types.is_list(
        reference_build.tables["descriptors"].schema.field("categories").type
    ) or (
        pa.types.is_large_list(
            reference_build.tables["descriptors"].schema.field("categories").type
        )
    )
    assert set(MESH_TABLES) == set(MESH_TABLE_NAMES)


def test_myocardial_infarction_rows(reference_frames):
    row = reference_frames["descriptors"].filter(pl.col("ui") == "D009203").to_dicts()
    assert row == [
        {
            "ui": "D009203",
            "name": "Myocardial Infarction",
            "categories": ["C"],
            "min_depth": 4,
            "n_trees": 4,
        }
    ]
    trees = reference_frames["tree"].filter(pl.col("ui") == "D009203")["tree_number"].to_list()
    assert trees == [
        "C14.280.647.500",
        "C14.907.585.500",
        "C23.550.513.355.750",
        "C23.550.717.489.750",
    ]
    parents = (
        reference_frames["broader"].filter(pl.col("child_ui") == "D009203")["parent_ui"].to_list()
    )
    # Myocardial Ischemia (both C14 trees) and Infarction (both C23 trees)
    assert parents == ["D007238", "D017202"]
    terms = reference_frames["terms"].filter(pl.col("ui") == "D009203")
    assert terms.filter(pl.col("kind") == "entry").height == 13
    assert "heart attack" in terms["normalised"].to_list()


def test_descriptors_without_trees(reference_frames):
    no_tree = reference_frames["descriptors"].filter(pl.col("n_trees") == 0)
    assert no_tree.select("ui", "name", "min_depth").to_dicts() == [
        {"ui": "D005260", "name": "Female", "min_depth": None},
        {"ui": "D008297", "name": "Male", "min_depth": None},
    ]
    assert no_tree["categories"].to_list() == [[], []]


def test_normalised_is_the_grounders_normalise(reference_frames):
    sample = reference_frames["terms"].gather_every(997)
    assert sample["normalised"].to_list() == [normalise(t) for t in sample["term"].to_list()]


def test_vectorised_normalise_is_normalise_on_every_term(reference_frames):
    """The Polars form of ``normalise`` (ASCII text) gives what ``normalise`` gives for every
    term and supplementary alias of the reference MeSH; other text is left to ``normalise``."""
    texts = pl.concat(
        [reference_frames["terms"]["term"], reference_frames["scr_aliases"]["surface"]]
    ).unique()
    edge = ["  Tab\tand, Comma--", "Ångström", "ß-Lactam", "", "...", "A  B", "Été (Summer)"]
    frame = pl.DataFrame({"text": [*texts.to_list(), *edge]})
    vectorised = frame.select(normalised_column(pl.col("text"))).to_series().to_list()
    texts_list = frame["text"].to_list()
    ascii_only = [v for t, v in zip(texts_list, vectorised, strict=True) if t.isascii()]
    assert None not in ascii_only
    assert [v for t, v in zip(texts_list, vectorised, strict=True) if not t.isascii()] == [None] * (
        sum(not t.isascii() for t in texts_list)
    )
    assert [v for v in vectorised if v is not None] == [
        normalise(t) for t in texts_list if t.isascii()
    ]
    joined = _with_normalised(frame, "text")
    assert joined["normalised"].to_list() == [normalise(t) for t in texts_list]
    assert normalise("Été (Summer)") == "ete summer"


def test_deinversion_rule(reference_build, reference_frames):
    frame = pl.DataFrame(
        {
            "term": [
                "Circumcision, Male",
                "Rust, Asian Soybean",
                "Health Care, Failures to Rescue",
                "Benzoxazole, 5-(methylamino)",
                "Heart Attack",
            ]
        }
    )
    assert frame.select(deinvert(pl.col("term")).alias("natural"))["natural"].to_list() == [
        "Male Circumcision",
        "Asian Soybean Rust",
        None,
        None,
        None,
    ]
    assert normalise("Male Circumcision") == "male circumcision"
    circumcision = reference_frames["terms"].filter(pl.col("ui") == "D002944")
    # MeSH already lists "Male Circumcision", so de-inversion adds nothing new here
    assert circumcision.select("normalised", "kind").rows() == [
        ("circumcision male", "name"),
        ("male circumcision", "entry"),
        ("circumcisions male", "entry"),
        ("male circumcisions", "entry"),
    ]
    deinverted = reference_frames["terms"].filter(pl.col("kind") == "deinverted")
    # permuted terms of every concept are candidates too: more candidates, more new forms
    assert deinverted.height == reference_build.stats.deinversion_added == 2_086
    assert reference_build.stats.deinversion_candidates == 71_964
    # "Health Care, Failures to Rescue" is a topic, not an inversion: nothing added for it
    assert deinverted.filter(pl.col("ui") == "D000067248").height == 0


def test_scr_alias_rules(reference_build, reference_frames):
    stats = reference_build.stats
    assert stats.scr_alias_candidates == 844_399
    assert stats.scr_short_removed == 45_746
    # the thesaurus claims 5 more aliases than the descriptor TSV's entry terms did (27)
    assert stats.scr_claimed_removed == 32
    assert stats.scr_dangling_mappings == 0
    assert stats.scr_aliases_kept == 798_621
    aliases = reference_frames["scr_aliases"]
    assert aliases["surface"].str.len_chars().min() == MIN_SCR_ALIAS_CHARS
    # "9-AMA" (C000078) is too short; "cao ma huang" (C099950) is claimed by descriptor D029790
    assert aliases.filter(pl.col("surface") == "9-AMA").height == 0
    assert aliases.filter(pl.col("surface") == "cao ma huang").height == 0
    claimed = reference_frames["terms"].filter(pl.col("normalised") == "cao ma huang")
    assert claimed.select("ui", "kind").rows() == [("D029790", "entry")]
    ackr1 = aliases.filter(pl.col("scr_ui") == "C483025")
    # the one record whose quoted synonym list holds a tab; it maps to two descriptors
    assert sorted(set(ackr1["heading_ui"].to_list())) == ["D004375", "D011956"]
    assert "Ackr1 protein mouse" in ackr1["surface"].to_list()
    alias_terms = reference_frames["terms"].filter(pl.col("kind") == "scr_alias")
    assert alias_terms.height == stats.scr_alias_terms_added == 784_387


def test_allowable_pairs_from_the_csv(reference_build, reference_frames):
    allowable = reference_frames["allowable"]
    calcimycin = allowable.filter(pl.col("descriptor_ui") == "D000001")["qualifier_ui"]
    assert calcimycin.len() == 26
    assert "Q000031" in calcimycin.to_list()
    # pairs of MeSH 2026 descriptors that the 2024 TSVs do not have are dropped, counted
    assert reference_build.stats.allowable_unknown_descriptor_removed == 7_061
    qualifiers = reference_frames["qualifiers"]
    assert qualifiers.filter(pl.col("ui") == "Q000031").to_dicts() == [
        {"ui": "Q000031", "name": "analogs & derivatives", "abbreviation": None}
    ]


def test_checks_pass_on_the_reference(reference_build, reference_mesh_spec):
    recount = recount_source(reference_mesh_spec)
    assert recount.as_dict() == {
        "descriptors": 30_764,
        "tree_numbers": 64_457,
        "entry_terms": 233_172,
        "supplementary_records": 323_304,
    }
    assert recount.terms_dict() == {
        "term_rows": 263_936,
        "term_descriptors": 30_764,
        "concepts": 61_048,
    }
    outcomes = {o.name: o for o in check_mesh_build(reference_build, recount)}
    assert {name: o.passed for name, o in outcomes.items() if not o.passed} == {}
    assert outcomes["tree_parents_exist"].metadata == {
        "tree_numbers": 64_457,
        "category_roots": 115,
        "missing_parents": 0,
    }
