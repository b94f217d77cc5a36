"""NLM MeSH XML readers on the real sample records."""

from __future__ import annotations

import gzip

import polars as pl
import pytest
import requests

from kg_platform.mesh.checks import check_mesh_build, recount_source
from kg_platform.mesh.source import resolve_mesh_source
from kg_platform.mesh.tables import build_mesh
from kg_platform.mesh.xml import (
    MeshXmlError,
    read_descriptor_xml,
    read_qualifier_xml,
    read_supplementary_xml,
)
from kg_platform_tests.sources.mirror_server import serve_mirror


def test_descriptor_records(xml_sample_dir):
    frames = read_descriptor_xml(str(xml_sample_dir / "mesh_desc_sample.xml"))
    assert frames["descriptors"].rows() == [
        ("D000001", "Calcimycin"),
        ("D000002", "Temefos"),
        ("D000003", "Abattoirs"),
        ("D000077594", "Nivolumab"),
        ("D006406", "Hematoma"),
    ]
    assert frames["tree"].height == 10
    assert frames["tree"].filter(pl.col("ui") == "D000003")["tree_number"].to_list() == [
        "J01.576.423.200.700.100",
        "J03.540.020",
    ]
    entries = frames["entries"]
    # every concept's terms, the record-preferred term (the name) flagged
    assert entries.height == 31
    assert entries.filter(~pl.col("record_preferred")).height == 26
    assert entries.filter(pl.col("ui") == "D000001").drop("ui").rows() == [
        ("Calcimycin", "M0000001", "T000002", True, False, "NON", True),
        ("A-23187", "M0353609", "T000001", True, False, "LAB", False),
        ("A 23187", "M0353609", "T000001", False, True, "LAB", False),
        ("A23187", "M0353609", "T000004", False, False, "LAB", False),
        ("Antibiotic A23187", "M0353609", "T000003", False, False, "NON", False),
        ("A23187, Antibiotic", "M0353609", "T000003", False, True, "NON", False),
    ]
    assert frames["allowable"].height == 119
    assert frames["allowable"].filter(pl.col("descriptor_ui") == "D000001").height == 26
    assert frames["qualifiers"].filter(pl.col("ui") == "Q000302").rows() == [
        ("Q000302", "isolation & purification", "IP")
    ]


def test_qualifier_and_supplementary_records(xml_sample_dir):
    qualifiers = read_qualifier_xml(str(xml_sample_dir / "mesh_qual_sample.xml"))
    assert qualifiers.rows() == [
        ("Q000037", "antagonists & inhibitors", "AI"),
        ("Q000819", "agonists", "AG"),
    ]
    supplementary = read_supplementary_xml(str(xml_sample_dir / "mesh_supp_sample.xml"))
    assert supplementary["n_supplementary"] == 1
    assert supplementary["scr_surfaces"].rows() == [
        ("C117343", "red yeast rice"),
        ("C117343", "Chinese red-yeast-rice dietary supplement"),
        ("C117343", "Cholestin"),
    ]
    # NLM writes "*D001688" for a major heading; the star is not part of the UI
    assert supplementary["scr_headings"].rows() == [("C117343", "D001688")]


def test_the_remote_dtd_is_never_fetched(xml_sample_dir, tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    (served / "nlmdescriptorrecordset.dtd").write_text("<!ENTITY oops 'fetched'>\n")
    with serve_mirror(served) as (base, state):
        # the harness does see a fetch when one happens
        assert requests.get(f"{base}nlmdescriptorrecordset.dtd", timeout=5).status_code == 200
        assert state.requests == ["/nlmdescriptorrecordset.dtd"]
        state.requests.clear()
        text = (xml_sample_dir / "mesh_desc_sample.xml").read_text()
        remote = "https://www.nlm.nih.gov/databases/dtd/nlmdescriptorrecordset_20200101.dtd"
        assert remote in text
        local = tmp_path / "desc_local_dtd.xml"
        local.write_text(text.replace(remote, f"{base}nlmdescriptorrecordset.dtd"))
        frames = read_descriptor_xml(str(local))
        assert state.requests == []
    assert frames["descriptors"].height == 5
    # and the original, naming NLM's DTD, parses offline
    assert read_descriptor_xml(str(xml_sample_dir / "mesh_desc_sample.xml"))["tree"].height == 10


def test_gzipped_xml_reads_the_same(xml_sample_dir, tmp_path):
    packed = tmp_path / "desc2020.xml.gz"
    packed.write_bytes(gzip.compress((xml_sample_dir / "mesh_desc_sample.xml").read_bytes()))
    plain = read_descriptor_xml(str(xml_sample_dir / "mesh_desc_sample.xml"))
    zipped = read_descriptor_xml(str(packed))
    for name in plain:
        assert zipped[name].equals(plain[name])


def test_malformed_xml_names_the_file(xml_sample_dir, tmp_path):
    broken = tmp_path / "desc_broken.xml"
    broken.write_bytes((xml_sample_dir / "mesh_desc_sample.xml").read_bytes()[:20_000])
    with pytest.raises(MeshXmlError, match="desc_broken.xml: malformed MeSH XML"):
        read_descriptor_xml(str(broken))
    with pytest.raises(MeshXmlError, match="no DescriptorRecord elements"):
        read_descriptor_xml(str(xml_sample_dir / "mesh_qual_sample.xml"))


def test_build_and_checks_from_the_xml_samples(xml_sample_dir):
    spec = resolve_mesh_source(str(xml_sample_dir))
    build = build_mesh(spec)
    assert build.row_counts() == {
        "descriptors": 5,
        "tree": 10,
        "broader": 0,
        "allowable": 119,
        "terms": 31,
        "qualifiers": 2,
        "scr_aliases": 0,
    }
    # the sample's only supplementary record maps to Biological Products, not in the sample
    assert build.stats.scr_dangling_mappings == 1
    recount = recount_source(spec)
    assert recount.as_dict() == {
        "descriptors": 5,
        "tree_numbers": 10,
        "entry_terms": 26,
        "supplementary_records": 1,
    }
    assert recount.terms_dict() == {"term_rows": 31, "term_descriptors": 5, "concepts": 12}
    outcomes = {o.name: o for o in check_mesh_build(build, recount)}
    failed = sorted(name for name, o in outcomes.items() if not o.passed)
    # a five-record sample holds none of its descriptors' parents
    assert failed == ["tree_parents_exist"]
    assert outcomes["tree_parents_exist"].metadata["missing_parents"] == 10
    assert outcomes["supplementary_mappings_known"].metadata["dangling_mappings_dropped"] == 1
