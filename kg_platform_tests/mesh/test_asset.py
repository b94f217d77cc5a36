"""The mesh_tables asset, materialised for real into a temporary lake."""

from __future__ import annotations

import dagster as dg
import polars as pl

from kg_platform.assets.mesh import mesh_tables
from kg_platform.mesh.checks import MESH_CHECK_NAMES
from kg_platform.resources.lake import LakeResource
from kg_platform.resources.mesh import MeshSourceResource
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference


def _materialize(lake_root: str, location: str) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [mesh_tables],
        resources={
            "lake": LakeResource(root=lake_root),
            "mesh_source": MeshSourceResource(location=location),
        },
        raise_on_error=False,
    )


def _checks(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def test_reference_tsvs_into_the_lake(tmp_path):
    lake_root = str(tmp_path / "lake")
    result = _materialize(lake_root, str(require_reference("mesh")))
    assert result.success
    checks = _checks(result)
    assert sorted(checks) == sorted(MESH_CHECK_NAMES)
    assert {name for name, e in checks.items() if not e.passed} == set()
    recount = checks["recount_matches_source"].metadata
    assert {k: recount[f"source_{k}"].value for k in ("descriptors", "tree_numbers")} == {
        "descriptors": 30_764,
        "tree_numbers": 64_457,
    }
    assert recount["written_entry_terms"].value == 137_409
    assert recount["written_supplementary_records"].value == 323_304
    assert checks["supplementary_mappings_known"].metadata["dangling_mappings_dropped"].value == 0

    metadata = result.asset_materializations_for_node("mesh_tables")[0].metadata
    assert metadata["rows_descriptors"].value == 30_764
    assert metadata["rows_tree"].value == 64_457
    assert metadata["rule_scr_short_removed"].value == 45_746
    assert metadata["rule_scr_claimed_removed"].value == 27
    assert metadata["rule_deinversion_added"].value == 1_126
    assert metadata["dangling_supplementary_mappings"].value == 0
    assert "using the TSVs" in metadata["source"].value

    lake = Lake(lake_root)
    descriptors = pl.from_arrow(lake.read_parquet("mesh/descriptors.parquet"))
    assert descriptors.height == 30_764
    assert descriptors.filter(pl.col("ui") == "D009203")["n_trees"].to_list() == [4]
    assert lake.exists("mesh/manifest.json")


def test_failed_blocking_check_keeps_the_previous_tables(tmp_path):
    lake_root = str(tmp_path / "lake")
    first = _materialize(lake_root, str(require_reference("mesh", "xml")))
    assert first.success
    checks = _checks(first)
    # the five-record sample lacks its descriptors' parents: reported, not blocking
    assert {name for name, e in checks.items() if not e.passed} == {"tree_parents_exist"}
    assert checks["tree_parents_exist"].metadata["missing_parents"].value == 10
    lake = Lake(lake_root)
    before = lake.read_bytes("mesh/descriptors.parquet")

    # a descriptor TSV listing one UI twice fails the blocking UI check
    bad = tmp_path / "bad"
    bad.mkdir()
    rows = "D000001\tCalcimycin\t\tD03.633.100.221.173\t\n" * 2
    (bad / "mesh_id_label_mappings.tsv").write_text(rows)
    second = _materialize(lake_root, str(bad))
    assert not second.success
    failure = second.get_step_failure_events()[0].event_specific_data.error
    assert "MeSH checks failed" in failure.message
    assert "uis_well_formed_unique" in failure.message
    assert lake.read_bytes("mesh/descriptors.parquet") == before
