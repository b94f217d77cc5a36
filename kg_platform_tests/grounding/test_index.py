"""The published grounding index is verified as the graph and the embedding index are: its
manifest records each file's size and sha256 (the surface table's rows too), `kg status`
and `kg build` compare the sizes and the index file's header on every plan, hash a file
written after the partition's materialisation, and `kg status --verify` hashes them all.
The assets are materialised for real (mesh_tables from the reference TSVs, then
grounding_index) on a real instance, and the files damaged in place; the same run's
mesh_tables is checked as mesh_tables of the reference TSVs."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from kg_platform.assets.grounding import grounding_index
from kg_platform.assets.integrity import published_problem
from kg_platform.assets.mesh import mesh_tables
from kg_platform.grounding.surface_index import SurfaceIndex
from kg_platform.mesh.contracts import CHECKS
from kg_platform.resources.lake import LakeResource
from kg_platform.resources.mesh import MeshSourceResource
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference

YEAR = "2024"
TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"


@pytest.fixture(scope="module")
def materialised(tmp_path_factory) -> tuple[Lake, dg.DagsterInstance, dg.ExecuteInProcessResult]:
    """(the lake, the instance, the run's result) after mesh_tables and grounding_index of
    MeSH 2024 from the reference TSVs: the one materialisation of both in this suite."""
    lake = Lake(str(tmp_path_factory.mktemp("grounding") / "lake"))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("mesh_years", [YEAR])
    result = dg.materialize(
        [mesh_tables, grounding_index],
        partition_key=YEAR,
        instance=instance,
        resources={
            "lake": LakeResource(root=lake.root),
            "mesh_source": MeshSourceResource(location=str(require_reference("mesh"))),
        },
    )
    assert result.success
    return lake, instance, result


@pytest.fixture(scope="module")
def published(materialised) -> tuple[Lake, dg.DagsterInstance]:
    """(the lake root, the instance) after mesh_tables and grounding_index of MeSH 2024."""
    lake, instance, _ = materialised
    return lake, instance


def test_reference_tsvs_into_the_lake(materialised) -> None:
    """mesh_tables of the reference TSVs: its checks, its metadata and its tables (the
    mesh_tables half of this module's materialisation)."""
    lake, _, result = materialised
    checks = {
        e.check_name: e
        for e in result.get_asset_check_evaluations()
        if e.asset_key == dg.AssetKey("mesh_tables")
    }
    assert sorted(checks) == sorted(CHECKS)
    assert {name for name, e in checks.items() if not e.passed} == set()
    recount = checks["recount_matches_source"].metadata
    assert {k: recount[f"source_{k}"].value for k in ("descriptors", "tree_numbers")} == {
        "descriptors": 30_764,
        "tree_numbers": 64_457,
    }
    # the thesaurus's entry terms of every concept (the descriptor TSV alone had 137,409)
    assert recount["written_entry_terms"].value == 233_172
    terms_recount = checks["terms_recount_matches_source"].metadata
    assert {k: terms_recount[f"source_{k}"].value for k in ("term_rows", "concepts")} == {
        "term_rows": 263_936,
        "concepts": 61_048,
    }
    assert checks["terms_descriptors_known"].metadata["terms_unknown_descriptor"].value == 0
    assert recount["written_supplementary_records"].value == 323_304
    assert checks["supplementary_mappings_known"].metadata["dangling_mappings_dropped"].value == 0

    metadata = result.asset_materializations_for_node("mesh_tables")[0].metadata
    assert metadata["rows_descriptors"].value == 30_764
    assert metadata["rows_tree"].value == 64_457
    assert metadata["rule_scr_short_removed"].value == 45_746
    assert metadata["rule_scr_claimed_removed"].value == 32
    assert metadata["rule_deinversion_added"].value == 2_086
    assert metadata["dangling_supplementary_mappings"].value == 0
    assert "using the TSVs" in metadata["source"].value

    descriptors = pl.from_arrow(lake.read_parquet("mesh/2024/descriptors.parquet"))
    assert descriptors.height == 30_764
    assert descriptors.filter(pl.col("ui") == "D009203")["n_trees"].to_list() == [4]
    assert lake.exists("mesh/2024/manifest.json")
    assert lake.scoped(mesh_year="2024").exists("mesh/manifest.json")


def folder(lake: Lake) -> Path:
    return Path(lake.root) / "grounding" / YEAR


def test_the_manifest_records_each_published_file(published) -> None:
    lake, _ = published
    manifest = json.loads((folder(lake) / "manifest.json").read_text())
    surfaces = (folder(lake) / "surfaces.parquet").read_bytes()
    index = SurfaceIndex.open(lake.scoped(mesh_year=YEAR))
    assert manifest["files"] == {
        "grounding/surfaces.parquet": {
            "rows": manifest["surfaces"],
            "size": len(surfaces),
            "sha256": hashlib.sha256(surfaces).hexdigest(),
        },
        "grounding/index.kgi": {
            "size": os.path.getsize(folder(lake) / "index.kgi"),
            "sha256": index.header["sha256"],
        },
    }
    assert len(index) == manifest["surfaces"]


def check(lake: Lake, instance=None, verify: bool = False) -> str | None:
    return published_problem(lake, "grounding_index", YEAR, verify, instance=instance)


def test_a_damaged_grounding_index_is_named(published) -> None:
    lake, instance = published
    surfaces, index = folder(lake) / "surfaces.parquet", folder(lake) / "index.kgi"
    good_surfaces, good_index = surfaces.read_bytes(), index.read_bytes()
    stat = {p: os.stat(p) for p in (surfaces, index)}
    assert check(lake, instance) is None
    assert check(lake, instance, verify=True) is None

    # the same bytes written again: later than the materialisation, hashed, not corrupt
    surfaces.write_bytes(good_surfaces)
    assert check(lake, instance) is None

    # other bytes at the same size: the sizes match; only the stamp and the hashes see it
    middle = len(good_surfaces) // 2
    surfaces.write_bytes(
        good_surfaces[:middle] + bytes([good_surfaces[middle] ^ 0xFF]) + good_surfaces[middle + 1 :]
    )
    changed = (
        f"{surfaces}: sha256 differs from the grounding manifest's "
        f"({hashlib.sha256(good_surfaces).hexdigest()[:12]}…); rebuild grounding_index"
    )
    assert check(lake) is None  # without the instance: sizes and header only
    assert check(lake, verify=True) == changed
    assert re.fullmatch(
        re.escape(f"{changed} (written after grounding_index[{YEAR}] was materialised at ")
        + TIME
        + re.escape(": surfaces.parquet)"),
        check(lake, instance),
    )

    # a file whose times are put back is seen by the hashes alone
    os.utime(surfaces, ns=(stat[surfaces].st_atime_ns, stat[surfaces].st_mtime_ns))
    assert check(lake, instance) is None
    assert check(lake, instance, verify=True) == changed
    surfaces.write_bytes(good_surfaces)

    # the index's data changed in place: its own header's sha256 names it
    index.write_bytes(good_index[:-5] + bytes([good_index[-5] ^ 0xFF]) + good_index[-4:])
    assert check(lake, verify=True) == (
        f"{index}: content does not match its SHA-256 (corrupt); rebuild grounding_index"
    )
    assert re.fullmatch(
        re.escape(
            f"{index}: content does not match its SHA-256 (corrupt); rebuild grounding_index "
            f"(written after grounding_index[{YEAR}] was materialised at "
        )
        + TIME
        + re.escape(": surfaces.parquet, index.kgi)"),
        check(lake, instance),
    )

    # cut short: the size against the manifest, on every check
    index.write_bytes(good_index[:-1000])
    assert check(lake) == (
        f"{index}: {len(good_index) - 1000} bytes, the grounding manifest says "
        f"{len(good_index)} bytes; rebuild grounding_index"
    )
    index.write_bytes(good_index)
    surfaces.unlink()
    assert check(lake) == f"{surfaces}: missing (the grounding manifest lists it)"
    surfaces.write_bytes(good_surfaces)
    assert check(lake, verify=True) is None
