"""What `kg build` asks Dagster to materialise: the asset partitions of this build's
selection and keys, less those that are fresh. Dagster plans and runs what is asked (an
asset backfill); this module only says *what*, from Dagster's own partition statuses and
staleness, so a rebuild redoes only what is missing, failed or stale."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class BuildKeys:
    """The partitions this build materialises, per dimension."""

    files: list[str]
    release: str
    mesh_year: str
    pubmedqa_sets: list[str]
    hotpotqa_sets: list[str]

    def for_partitions(self, partitions_def) -> list:
        """This build's keys of one partitions definition ([None] when unpartitioned)."""
        import dagster as dg

        from kg_platform.assets import partitions as p

        d = partitions_def
        if d is None:
            return [None]
        if d == p.pubmed_files:
            return list(self.files)
        if d == p.pubmed_releases:
            return [self.release]
        if d == p.mesh_years:
            return [self.mesh_year]
        if d in (p.reader_configs, p.answering_evaluations):
            # reader configurations and their caches are registered by `kg eval pubmedqa`
            return []
        if d in (
            p.verifier_configs,
            p.scifact_claim_sets,
            p.scifact_heldout_sets,
            p.refusal_evaluations,
        ):
            # verifiers train on request only: their configurations, claim sets and ladder
            # configurations are registered by whoever asks for them, never by a build
            return []
        if d == p.graph_builds:
            return [dg.MultiPartitionKey({"release": self.release, "mesh_year": self.mesh_year})]
        if d == p.grounding_evaluations:
            return [
                dg.MultiPartitionKey({"question_set": q, "mesh_year": self.mesh_year})
                for q in self.pubmedqa_sets
            ]
        if d == p.allocation_evaluations:
            return [
                dg.MultiPartitionKey({"question_set": q, "configuration": c})
                for q in self.hotpotqa_sets
                for c in p.allocation_configurations.get_partition_keys()
            ]
        raise ValueError(f"kg build: no partition keys for {d}")


def requested_partitions(asset_graph, selected: Iterable, keys_for) -> set:
    """Every (asset, partition) of the selection, with ``keys_for(partitions_def)`` giving
    the partition keys of each asset."""
    from kg_platform.orchestration.dagster_internals import AssetKeyPartitionKey

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
    was published, integrity.py), with, inside the request:
    - the parents of the same partition (a file's download is redone with its tables, so a
      source file restored after a failure is fetched again);
    - everything downstream of a partition redone (its input is about to change)."""
    import dagster as dg

    from kg_platform.orchestration.freshness import FRESH, partition_state, stale_resolver

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
