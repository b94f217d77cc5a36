"""Whether an asset partition is fresh, stale, missing or failed, read from the instance as the
UI reads it (Dagster's partition statuses and its own staleness resolver). `kg status` says
it; `kg build` redoes what is not fresh."""

from __future__ import annotations

import dagster as dg

from kg_platform.orchestration import dagster_internals as internals

FRESH, STALE, MISSING, FAILED, IN_PROGRESS = "fresh", "stale", "missing", "failed", "in progress"


def stale_resolver(instance, asset_graph):
    """Dagster's own staleness resolver (the one the UI asks) over this code's asset graph."""
    view = internals.AssetGraphView(
        temporal_context=internals.TemporalContext(
            effective_dt=internals.get_current_datetime(), last_event_id=None
        ),
        instance=instance,
        asset_graph=asset_graph,
    )
    return internals.CachingStaleStatusResolver(instance, asset_graph, loading_context=view)


def partition_state(
    instance, asset_graph, resolver, key, partitions: list, running: bool = True
) -> dict:
    """partition key -> fresh | stale | missing | failed | in progress (with ``running``; a
    build leaves a partition another run is materialising to the resolver's answer)."""
    partitions_def = asset_graph.get(key).partitions_def
    status_of = {}
    if partitions_def is not None and partitions:
        status_of = instance.get_status_by_partition(key, partitions, partitions_def) or {}
    stale = internals.StaleStatus
    by_stale = {stale.FRESH: FRESH, stale.STALE: STALE, stale.MISSING: MISSING}
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
