"""The provenance a batched step writes by hand is the provenance Dagster writes on its own
path: same tag names, same input data version and event pointer (the names are private
constants of Dagster 1.13; this pins them)."""

from __future__ import annotations

import hashlib

import dagster as dg

from kg_platform.orchestration import records as versions

PARTS = dg.StaticPartitionsDefinition(["p1"])


@dg.asset(partitions_def=PARTS, code_version="7")
def upstream() -> dg.MaterializeResult:
    return dg.MaterializeResult(data_version=dg.DataVersion("up-v1"))


@dg.asset(partitions_def=PARTS, code_version="3", deps=[upstream])
def downstream() -> dg.MaterializeResult:
    return dg.MaterializeResult(data_version=dg.DataVersion("down-v1"))


def test_hand_written_provenance_equals_dagsters() -> None:
    instance = dg.DagsterInstance.ephemeral()
    assert dg.materialize([upstream, downstream], partition_key="p1", instance=instance).success
    recorded_up = versions.latest(instance, "upstream", "p1")
    assert recorded_up is not None and recorded_up.data_version == "up-v1"
    down = versions.latest(instance, "downstream", "p1")
    [record] = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("downstream"), asset_partitions=["p1"]),
        limit=1,
    ).records
    dagsters = dict(record.event_log_entry.asset_materialization.tags)
    dagsters.pop("dagster/backfill", None)
    assert versions.provenance_tags("down-v1", "3", {"upstream": recorded_up}) == dagsters
    assert dagsters == {
        "dagster/code_version": "3",
        # a partitioned input's version: the sha256 of its partitions' versions
        "dagster/input_data_version/upstream": hashlib.sha256(b"up-v1").hexdigest(),
        "dagster/input_event_pointer/upstream": str(recorded_up.storage_id),
        "dagster/data_version": "down-v1",
        "dagster/data_version_is_user_provided": "true",
    }
    # the pointer a check evaluation carries is that materialisation
    assert down is not None and down.target.storage_id == record.storage_id
    assert down.target.run_id == record.run_id


def test_an_input_never_recorded_is_dagsters_initial_version() -> None:
    tags = versions.provenance_tags("v", "1", {"pubmed_source_file": None})
    assert tags["dagster/input_data_version/pubmed_source_file"] == "INITIAL"
    assert tags["dagster/input_event_pointer/pubmed_source_file"] == "NULL"
