"""The mesh_tables asset, materialised for real into a temporary lake."""

from __future__ import annotations

import dagster as dg
import polars as pl

from kg_platform.assets.mesh import mesh_tables
from kg_platform.mesh.contracts import CHECKS
from kg_platform.mesh.source import mesh_year, resolve_mesh_source
from kg_platform.resources.lake import LakeResource
from kg_platform.resources.mesh import MeshSourceResource
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference


def _materialize(
    lake_root: str, location: str, instance: dg.DagsterInstance | None = None
) -> dg.ExecuteInProcessResult:
    """mesh_tables for the MeSH year of ``location`` (registered on the instance first)."""
    year = mesh_year(resolve_mesh_source(location))
    instance = instance or dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("mesh_years", [year])
    return dg.materialize(
        [mesh_tables],
        partition_key=year,
        instance=instance,
        resources={
            "lake": LakeResource(root=lake_root),
            "mesh_source": MeshSourceResource(location=location),
        },
        raise_on_error=False,
    )


def _checks(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def _recorded_checks(
    instance: dg.DagsterInstance, result: dg.ExecuteInProcessResult
) -> dict[str, dg.AssetCheckEvaluation]:
    """The check evaluations the run recorded on the instance (a step that fails logs them
    before raising, so they are in the event log but not among the result's own events)."""
    records = instance.get_records_for_run(
        result.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
    ).records
    return {
        e.check_name: e
        for e in (r.event_log_entry.dagster_event.asset_check_evaluation_data for r in records)
    }


def test_reference_tsvs_into_the_lake(tmp_path):
    lake_root = str(tmp_path / "lake")
    result = _materialize(lake_root, str(require_reference("mesh")))
    assert result.success
    checks = _checks(result)
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

    lake = Lake(lake_root)
    descriptors = pl.from_arrow(lake.read_parquet("mesh/2024/descriptors.parquet"))
    assert descriptors.height == 30_764
    assert descriptors.filter(pl.col("ui") == "D009203")["n_trees"].to_list() == [4]
    assert lake.exists("mesh/2024/manifest.json")
    assert lake.scoped(mesh_year="2024").exists("mesh/manifest.json")


def test_failed_blocking_check_keeps_the_previous_tables(tmp_path):
    lake_root = str(tmp_path / "lake")
    instance = dg.DagsterInstance.ephemeral()
    first = _materialize(lake_root, str(require_reference("mesh", "xml")), instance)
    assert first.success
    checks = _checks(first)
    # the five-record sample lacks its descriptors' parents: reported, not blocking
    assert {name for name, e in checks.items() if not e.passed} == {"tree_parents_exist"}
    assert checks["tree_parents_exist"].metadata["missing_parents"].value == 10
    lake = Lake(lake_root)
    before = lake.read_bytes("mesh/2020/descriptors.parquet")

    # a descriptor TSV (named for the same MeSH year, so the same partition) listing one
    # UI twice fails the blocking UI check
    bad = tmp_path / "bad"
    bad.mkdir()
    rows = "D000001\tCalcimycin\t\tD03.633.100.221.173\t\n" * 2
    (bad / "mesh2020_descriptors.tsv").write_text(rows)
    second = _materialize(lake_root, str(bad), instance)
    assert not second.success
    failure = second.get_step_failure_events()[0].event_specific_data.error
    assert "blocking check failed" in failure.message
    assert "uis_well_formed_unique" in failure.message
    # the evaluations are still recorded, with the blocking one failed, for this partition
    checks = _recorded_checks(instance, second)
    assert sorted(checks) == sorted(CHECKS)
    assert checks["uis_well_formed_unique"].passed is False
    assert checks["uis_well_formed_unique"].blocking
    assert checks["uis_well_formed_unique"].partition == "2020"
    assert second.asset_materializations_for_node("mesh_tables") == []
    # nothing published: the previous partition's tables are untouched
    assert lake.read_bytes("mesh/2020/descriptors.parquet") == before
