"""Whether an asset partition is fresh, stale, missing or failed, read from the instance as the
UI reads it (Dagster's partition statuses and its own staleness resolver). `kg status` says
it; `kg build` redoes what is not fresh.

Dagster's resolver asks the instance for one partition at a time: the partition's latest
materialisation, then whether each input partition has a newer one (two event-log queries per
partition, ~1,350 for a release of 335 files, 10 of the 12 s `kg build` spent planning at 10M
records). The resolver here is Dagster's own, reading those records of every partition of an
asset at once (two queries per asset and event type); what it concludes is the same, and it
falls back to Dagster's own per-partition query wherever an input did change."""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg
from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView, TemporalContext
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.definitions.events import AssetKeyPartitionKey
from dagster._time import get_current_datetime

# the private methods BulkStaleStatusResolver overrides and the queryer method it calls: an
# upgrade that renames or drops one would leave Dagster's per-partition queries in place, or
# call nothing (test_dagster_internals.py checks them against the installed Dagster)
OVERRIDDEN = ("_get_latest_data_version_record", "_is_dep_updated", "instance_queryer")
FRESH, STALE, MISSING, FAILED, IN_PROGRESS = "fresh", "stale", "missing", "failed", "in progress"
# storage ids per query when fetching the records they name (SQLite's bound parameters)
RECORDS_PER_QUERY = 500


class BulkStaleStatusResolver(CachingStaleStatusResolver):
    """Dagster's CachingStaleStatusResolver with every partition's latest record of an asset
    read in one pass: the two methods that query the instance per partition answer from it.

    - ``_get_latest_data_version_record`` (the partition's current data version and
      provenance): the latest materialisation, and for an observable asset the latest
      observation, the later of the two by timestamp, as Dagster's instance queryer picks;
    - ``_is_dep_updated`` (an input partition changed since the provenance's storage id): no
      record of the input's event type after that id is no change; otherwise Dagster's own
      comparison of the input's data versions, queried as before (only inputs that changed)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._ids: dict[tuple, dict[str, int]] = {}  # (asset, event type) -> partition -> id
        self._records: dict[tuple, dict[str, object]] = {}  # ... -> partition -> record

    def latest_ids(self, key: dg.AssetKey, event_type) -> dict[str, int]:
        """partition -> the storage id of its latest event of ``event_type`` (one query)."""
        found = self._ids.get((key, event_type))
        if found is None:
            found = dict(self._instance.get_latest_storage_id_by_partition(key, event_type))
            self._ids[(key, event_type)] = found
        return found

    def latest_records(self, key: dg.AssetKey, event_type) -> dict[str, object]:
        """partition -> its latest event record of ``event_type`` (one query per
        RECORDS_PER_QUERY partitions, by storage id)."""
        found = self._records.get((key, event_type))
        if found is not None:
            return found
        partition_of = {i: p for p, i in self.latest_ids(key, event_type).items()}
        fetch = (
            self._instance.fetch_observations
            if event_type == dg.DagsterEventType.ASSET_OBSERVATION
            else self._instance.fetch_materializations
        )
        ids = sorted(partition_of)
        found = {}
        for start in range(0, len(ids), RECORDS_PER_QUERY):
            chunk = ids[start : start + RECORDS_PER_QUERY]
            records = fetch(dg.AssetRecordsFilter(asset_key=key, storage_ids=chunk), len(chunk))
            for record in records.records:
                found[partition_of[record.storage_id]] = record
        self._records[(key, event_type)] = found
        return found

    def _get_latest_data_version_record(self, key):
        if key.partition_key is None:
            return super()._get_latest_data_version_record(key=key)
        # Dagster's own check first: no record at all (the asset record, the ids by partition)
        if not self.instance_queryer.asset_partition_has_materialization_or_observation(key):
            return None
        events = [dg.DagsterEventType.ASSET_MATERIALIZATION]
        if self.asset_graph.get(key.asset_key).is_observable:
            events.append(dg.DagsterEventType.ASSET_OBSERVATION)
        found = [self.latest_records(key.asset_key, e).get(key.partition_key) for e in events]
        latest = sorted(
            (r for r in found if r is not None), key=lambda r: r.timestamp, reverse=True
        )
        return latest[0] if latest else None

    def _is_dep_updated(self, provenance, dep_key) -> bool:
        if dep_key.partition_key is not None:
            # what Dagster asks: the input's latest observation (an external asset) or
            # materialisation after the provenance's storage id
            event_type = (
                dg.DagsterEventType.ASSET_OBSERVATION
                if self.asset_graph.get(dep_key.asset_key).is_external
                else dg.DagsterEventType.ASSET_MATERIALIZATION
            )
            latest = self.latest_ids(dep_key.asset_key, event_type).get(dep_key.partition_key)
            cursor = provenance.input_storage_ids[dep_key.asset_key]
            if latest is None or (cursor and latest <= cursor):
                return False
        return super()._is_dep_updated(provenance, dep_key)


def stale_resolver(instance, asset_graph, bulk: bool = True):
    """Dagster's own staleness resolver (the one the UI asks) over this code's asset graph;
    ``bulk``: reading each asset's partitions' records at once (BulkStaleStatusResolver)."""
    view = AssetGraphView(
        temporal_context=TemporalContext(effective_dt=get_current_datetime(), last_event_id=None),
        instance=instance,
        asset_graph=asset_graph,
    )
    kind = BulkStaleStatusResolver if bulk else CachingStaleStatusResolver
    return kind(instance, asset_graph, loading_context=view)


def partition_state(
    instance, asset_graph, resolver, key, partitions: list, running: bool = True
) -> dict:
    """partition key -> fresh | stale | missing | failed | in progress (with ``running``; a
    build leaves a partition another run is materialising to the resolver's answer)."""
    partitions_def = asset_graph.get(key).partitions_def
    status_of = {}
    if partitions_def is not None and partitions:
        status_of = instance.get_status_by_partition(key, partitions, partitions_def) or {}
    by_stale = {StaleStatus.FRESH: FRESH, StaleStatus.STALE: STALE, StaleStatus.MISSING: MISSING}
    states = {}
    for partition in partitions:
        status = status_of.get(partition)
        if status == dg.AssetPartitionStatus.FAILED:
            states[partition] = FAILED
        elif running and status == dg.AssetPartitionStatus.IN_PROGRESS:
            states[partition] = IN_PROGRESS
        else:
            states[partition] = by_stale[resolver.get_status(key, partition)]
    return states


def requested_partitions(asset_graph, selected: Iterable, keys_for) -> set:
    """Every (asset, partition) of the selection, with ``keys_for(partitions_def)`` giving
    the partition keys of each asset."""
    return {
        AssetKeyPartitionKey(key, partition)
        for key in selected
        for partition in keys_for(asset_graph.get(key).partitions_def)
    }


def partitions_to_redo(
    instance, asset_graph, requested: set, force: bool = False, damaged=None
) -> set:
    """The requested partitions that are not fresh (or fresh in the instance, but
    ``damaged(partition, instance, resolver)``: their published files no longer match what
    was published, assets/integrity.py), with, inside the request:
    - the parents of the same partition (a file's download is redone with its tables, so a
      source file restored after a failure is fetched again);
    - everything downstream of a partition redone (its input is about to change)."""
    if force:
        return set(requested)
    by_asset: dict = {}
    for ap in requested:
        by_asset.setdefault(ap.asset_key, []).append(ap.partition_key)
    resolver = stale_resolver(instance, asset_graph)
    redo = set()
    for key, partitions in by_asset.items():
        states = partition_state(instance, asset_graph, resolver, key, partitions, running=False)
        redo |= {
            ap
            for ap in requested
            if ap.asset_key == key
            and (
                states[ap.partition_key] != FRESH
                or (damaged is not None and damaged(ap, instance, resolver))
            )
        }
    with dg.partition_loading_context(dynamic_partitions_store=instance):
        changed = True
        while changed:
            before = len(redo)
            for ap in list(redo):
                node = asset_graph.get(ap.asset_key)
                for parent in node.parent_keys:
                    same = type(ap)(parent, ap.partition_key)
                    if same in requested and asset_graph.get(parent).partitions_def == (
                        node.partitions_def
                    ):
                        redo.add(same)
                redo |= asset_graph.get_children_partitions(ap.asset_key, ap.partition_key) & (
                    requested
                )
            changed = len(redo) != before
    return redo
