"""The thesaurus terms table (every term of every concept): reading, resolution, the terms
it adds, its checks, and agreement with NLM's XML on the sample's descriptors."""

from __future__ import annotations

import gzip

import polars as pl
import pytest

from kg_platform.mesh.checks import check_mesh_build, recount_source
from kg_platform.mesh.source import resolve_mesh_source
from kg_platform.mesh.tables import build_mesh
from kg_platform.mesh.tsv import MeshTsvError, read_thesaurus_tsv
from kg_platform_tests.conftest import require_reference

DETAILS = ["ui", "term", "kind", "concept_ui", "term_ui", "concept_preferred", "permuted"]


def test_the_parent_folder_finds_the_thesaurus(reference_mesh_spec):
    mesh = require_reference("mesh")
    assert reference_mesh_spec.thesaurus == str(mesh / "thesaurus" / "desc2024_terms.tsv.gz")
    assert reference_mesh_spec.thesaurus in reference_mesh_spec.files
    assert reference_mesh_spec.missing == ()
    assert "terms of every concept: " in reference_mesh_spec.describe()
    # the TSV folder alone says what it lacks, without failing
    tsv_only = resolve_mesh_source(str(mesh / "tsv"))
    assert tsv_only.thesaurus is None
    assert any("no thesaurus terms TSV" in note for note in tsv_only.notes)


def test_terms_of_every_concept(reference_frames):
    terms = reference_frames["terms"]
    from_thesaurus = terms.filter(pl.col("kind").is_in(["name", "entry"]))
    assert from_thesaurus.height == 263_936
    assert from_thesaurus["ui"].n_unique() == 30_764
    assert from_thesaurus["concept_ui"].n_unique() == 61_048
    assert from_thesaurus["term_ui"].n_unique() == 132_802
    assert from_thesaurus.filter(pl.col("permuted")).height == 131_134
    assert from_thesaurus.filter(pl.col("concept_preferred")).height == 61_048
    assert from_thesaurus["lexical_tag"].value_counts().sort("lexical_tag").rows() == [
        ("ABB", 1_408),
        ("ABX", 10_971),
        ("ACR", 463),
        ("ACX", 4_917),
        ("EPO", 7_282),
        ("HIST", 30),
        ("LAB", 3_419),
        ("NAM", 1_046),
        ("NON", 226_171),
        ("TRD", 8_229),
    ]
    # the terms of non-preferred concepts, which the descriptors TSV lacks
    named = {
        term: terms.filter(pl.col("term") == term).select(*DETAILS, "lexical_tag").rows()
        for term in ("Breast Cancer", "Lung Cancer", "Gastric Cancer")
    }
    assert named == {
        "Breast Cancer": [("D001943", "Breast Cancer", "entry", *named["Breast Cancer"][0][3:])],
        "Lung Cancer": [("D008175", "Lung Cancer", "entry", *named["Lung Cancer"][0][3:])],
        "Gastric Cancer": [("D013274", "Gastric Cancer", "entry", *named["Gastric Cancer"][0][3:])],
    }
    gastric = named["Gastric Cancer"][0]
    assert gastric[3:] == (gastric[3], "T365268", False, False, "NON")
    # the name row carries the record-preferred term's concept and term UI
    assert terms.filter((pl.col("ui") == "D009203") & (pl.col("kind") == "name")).select(
        DETAILS
    ).rows() == [("D009203", "Myocardial Infarction", "name", "M0014340", "T027447", True, False)]
    # supplementary aliases come from no concept
    aliases = terms.filter(pl.col("kind") == "scr_alias")
    assert aliases["concept_ui"].null_count() == aliases.height


def test_thesaurus_checks(reference_build, reference_mesh_spec):
    recount = recount_source(reference_mesh_spec)
    assert recount.terms_dict() == {
        "term_rows": 263_936,
        "term_descriptors": 30_764,
        "concepts": 61_048,
    }
    outcomes = {o.name: o for o in check_mesh_build(reference_build, recount)}
    assert outcomes["terms_recount_matches_source"].passed
    assert outcomes["terms_recount_matches_source"].metadata["mismatched"] == "none"
    assert outcomes["terms_descriptors_known"].metadata == {
        "terms": 1_050_409,
        "terms_unknown_descriptor": 0,
    }


def test_a_thesaurus_naming_an_unknown_descriptor_fails_its_check(tmp_path):
    """A thesaurus row whose descriptor the descriptor TSV lacks, and a recount that
    disagrees with what was loaded, are both reported."""
    tsv = require_reference("mesh", "tsv")
    (tmp_path / "tsv").mkdir()
    (tmp_path / "thesaurus").mkdir()
    with gzip.open(tsv / "mesh2024_descriptors.tsv.gz", "rt", encoding="utf-8") as f:
        head = [next(f) for _ in range(3)]  # D000001 .. D000003
    with gzip.open(tmp_path / "tsv" / "mesh2024_descriptors.tsv.gz", "wt") as f:
        f.writelines(head)
    header = "\t".join(
        [
            "DescriptorUI",
            "DescriptorName",
            "ConceptUI",
            "TermUI",
            "TermName",
            "ConceptPreferredTermYN",
            "IsPermutedTermYN",
            "LexicalTag",
            "RecordPreferredTermYN",
        ]
    )
    rows = [
        "D000001\tCalcimycin\tM0000001\tT000002\tCalcimycin\tY\tN\tNON\tY",
        "D000001\tCalcimycin\tM0353609\tT000001\tA-23187\tY\tN\tLAB\tN",
        "D000002\tTemefos\tM0000002\tT000008\tTemefos\tY\tN\tNON\tY",
        "D000003\tAbattoirs\tM0000003\tT000009\tAbattoirs\tY\tN\tNON\tY",
        "D999999\tNowhere\tM9999999\tT999999\tNowhere\tY\tN\tNON\tY",
    ]
    with gzip.open(tmp_path / "thesaurus" / "desc2024_terms.tsv.gz", "wt") as f:
        f.write("\n".join([header, *rows]) + "\n")
    spec = resolve_mesh_source(str(tmp_path))
    build = build_mesh(spec)
    outcomes = {o.name: o for o in check_mesh_build(build, recount_source(spec))}
    known = outcomes["terms_descriptors_known"]
    assert (known.passed, known.metadata["examples"]) == (False, ["D999999"])
    # the blocking UI check sees it too, so such tables are never written
    assert outcomes["uis_well_formed_unique"].metadata["term_rows_unknown_descriptor"] == 1
    assert not outcomes["uis_well_formed_unique"].passed
    recount = outcomes["terms_recount_matches_source"]
    assert recount.metadata["source_term_rows"] == 5
    assert recount.metadata["written_term_rows"] == 5
    assert recount.passed


def test_bad_thesaurus_files_are_named(tmp_path):
    wrong = tmp_path / "desc2024_terms.tsv"
    wrong.write_text("DescriptorUI\tTermName\nD000001\tCalcimycin\n", encoding="utf-8")
    with pytest.raises(MeshTsvError, match=r"desc2024_terms.tsv: thesaurus terms TSV lacks"):
        read_thesaurus_tsv(str(wrong))


@pytest.fixture(scope="module")
def xml_terms(xml_sample_dir) -> pl.DataFrame:
    tables = build_mesh(resolve_mesh_source(str(xml_sample_dir))).tables
    return pl.from_arrow(tables["terms"])


def test_xml_and_thesaurus_agree_on_the_sample(xml_terms, reference_frames):
    """The 2020 XML sample's five descriptors: every term, with its concept, term UI and
    flags, is the same in the 2024 thesaurus; 2024 added one systematic name."""
    columns = [*DETAILS, "lexical_tag"]
    from_xml = xml_terms.filter(pl.col("kind").is_in(["name", "entry"])).select(columns)
    sample = from_xml["ui"].unique().to_list()
    from_thesaurus = (
        reference_frames["terms"]
        .filter(pl.col("ui").is_in(sample) & pl.col("kind").is_in(["name", "entry"]))
        .select(columns)
    )
    assert from_xml.height == 31
    assert from_xml.join(from_thesaurus, on=columns, how="anti").height == 0
    added = from_thesaurus.join(from_xml, on=columns, how="anti")
    assert added.select("ui", "concept_ui", "kind", "lexical_tag").rows() == [
        ("D000001", "M0000001", "entry", "NON")
    ]
    assert added["term"][0].startswith("4-Benzoxazolecarboxylic acid, 5-(methylamino)-2-")


def test_without_a_thesaurus_the_concept_columns_are_null(tmp_path):
    tsv = require_reference("mesh", "tsv")
    with gzip.open(tsv / "mesh2024_descriptors.tsv.gz", "rt", encoding="utf-8") as f:
        head = [next(f) for _ in range(3)]  # D000001 .. D000003
    with gzip.open(tmp_path / "mesh2024_descriptors.tsv.gz", "wt") as f:
        f.writelines(head)
    spec = resolve_mesh_source(str(tmp_path))
    build = build_mesh(spec)
    terms = pl.from_arrow(build.tables["terms"])
    assert (
        terms.filter(pl.col("kind") == "entry")["concept_ui"].null_count()
        == terms.filter(pl.col("kind") == "entry").height
    )
    outcomes = {o.name: o for o in check_mesh_build(build, recount_source(spec))}
    recount = outcomes["terms_recount_matches_source"]
    assert recount.passed
    assert recount.metadata["note"] == "the source has no concept-level terms"
