"""What the instance recorded of an asset partition, read in one place: its latest
materialisation or observation (storage id, run, time, data version, metadata), and the
data-version provenance for the events a step yields itself (a run over a range of file
partitions records each file's own materialisation). Dagster writes these tags only on the
``Output`` / ``MaterializeResult`` path; without them its staleness falls back to timestamps.
The tag names are Dagster's private constants, pinned by test_versions.py. Whether a
partition is fresh, stale or missing: freshness.py."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import dagster as dg
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)
from dagster._core.definitions.data_version import (
    CODE_VERSION_TAG,
    DATA_VERSION_IS_USER_PROVIDED_TAG,
    DATA_VERSION_TAG,
    DEFAULT_DATA_VERSION,
    NULL_EVENT_POINTER,
    get_input_data_version_tag,
    get_input_event_pointer_tag,
)


@dataclass(frozen=True)
class Recorded:
    """The latest recorded event of one asset partition: its storage id, run, time, data
    version and metadata (values unwrapped)."""

    asset: str
    partition: str | None
    storage_id: int
    run_id: str
    timestamp: float
    data_version: str | None
    metadata: dict = field(default_factory=dict, compare=False)

    @property
    def target(self) -> AssetCheckEvaluationTargetMaterializationData:
        """The pointer a check evaluation carries to the materialisation it judged."""
        return AssetCheckEvaluationTargetMaterializationData(
            storage_id=self.storage_id, run_id=self.run_id, timestamp=self.timestamp
        )


def recorded(asset: str, partition: str | None, record) -> Recorded:
    """The Recorded of an event log record of ``asset[partition]``."""
    entry = record.event_log_entry
    event = entry.asset_materialization or entry.asset_observation
    return Recorded(
        asset=asset,
        partition=partition,
        storage_id=record.storage_id,
        run_id=record.run_id,
        timestamp=record.timestamp,
        data_version=(event.tags or {}).get(DATA_VERSION_TAG) if event else None,
        metadata={k: getattr(v, "value", v) for k, v in (event.metadata or {}).items()}
        if event
        else {},
    )


def latest(
    instance, asset: str, partition: str | None, observation: bool = False, resolver=None
) -> Recorded | None:
    """The latest materialisation (or observation) of ``asset[partition]`` in the instance
    (``partition`` None: of an unpartitioned asset); None when there is none. With a
    BulkStaleStatusResolver (freshness.py), a materialisation is read from what it read of
    every partition of the asset at once."""
    key = dg.AssetKey.from_user_string(asset)
    bulk = getattr(resolver, "latest_records", None)
    if bulk is not None and not observation:
        found = bulk(key, dg.DagsterEventType.ASSET_MATERIALIZATION).get(partition)
        return recorded(asset, partition, found) if found is not None else None
    fetch = instance.fetch_observations if observation else instance.fetch_materializations
    records = fetch(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None),
        limit=1,
    ).records
    return recorded(asset, partition, records[0]) if records else None


def latest_observed(instance, asset: str) -> dict[str, str | None]:
    """partition -> the data version of its latest observation, for every observed partition
    of ``asset``, in two queries (the latest event id per partition, then those events)."""
    key = dg.AssetKey.from_user_string(asset)
    ids = instance.event_log_storage.get_latest_storage_id_by_partition(
        key, dg.DagsterEventType.ASSET_OBSERVATION
    )
    if not ids:
        return {}
    records = instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=key, storage_ids=list(ids.values())), limit=len(ids)
    ).records
    return {
        r.partition_key: (r.asset_observation.tags or {}).get(DATA_VERSION_TAG)
        for r in records
        if r.asset_observation is not None
    }


def partitions_version(versions: list[str]) -> str:
    """What Dagster records as the data version of a partitioned input: the sha256 of the
    input partitions' versions joined in partition order (the staleness resolver then follows
    the event pointer, not this value, for a partitioned input)."""
    return hashlib.sha256("".join(versions).encode()).hexdigest()


def provenance_tags(
    data_version: str, code_version: str, inputs: dict[str, Recorded | None]
) -> dict[str, str]:
    """The tags Dagster writes on a materialisation: its own data version (from content,
    so user-provided), the code version, and for each input (one partition of a partitioned
    asset: the one this partition reads) its data version and event pointer."""
    tags = {CODE_VERSION_TAG: code_version}
    for name, recorded in inputs.items():
        key = dg.AssetKey(name)
        version = (
            partitions_version([recorded.data_version])
            if recorded and recorded.data_version
            else DEFAULT_DATA_VERSION.value
        )
        tags[get_input_data_version_tag(key)] = version
        tags[get_input_event_pointer_tag(key)] = (
            str(recorded.storage_id) if recorded else NULL_EVENT_POINTER
        )
    tags[DATA_VERSION_TAG] = data_version
    tags[DATA_VERSION_IS_USER_PROVIDED_TAG] = "true"
    return tags
