"""The mesh_tables asset, materialised for real into a temporary lake."""

from __future__ import annotations

import dagster as dg

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
