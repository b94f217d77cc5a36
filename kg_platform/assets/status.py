"""Each partition's state as `kg status` reports it: what Dagster's instance says (fresh,
stale, failed, missing, in progress), a failure whose process was gone, a published object
that no longer matches (`corrupt`, ``assets.integrity``), and a partition built from one
that is not fresh (`stale`, naming it)."""

from __future__ import annotations

from collections import Counter

GONE = "failed (process gone)"
STATES = ("fresh", "stale", "failed", GONE, "corrupt", "missing", "in progress")


def process_gone(instance, key, partition: str | None) -> bool:
    """The partition's latest run was failed because its process was gone, or is still
    recorded as running while its process is gone (a killed build, before the next one)."""
    from kg_platform.orchestration.recovery import FAILURE_TAG, PROCESS_GONE, worker_gone

    info = instance.get_latest_planned_materialization_info(key, partition)
    run = instance.get_run_by_id(info.run_id) if info is not None else None
    if run is None:
        return False
    if run.is_finished:
        return run.tags.get(FAILURE_TAG) == PROCESS_GONE
    return worker_gone(instance, run) is not None


def partition_states(
    instance, asset_graph, problems: dict | None = None, lake=None, verify: bool = False
) -> dict[str, dict[str, str]]:
    """asset -> partition key -> one of STATES, for every partition of every partitioned
    asset (unpartitioned assets under the key ''). With ``lake``, a materialised partition
    whose published object no longer matches is `corrupt`, its one line in ``problems``
    (``verify``: hashes compared too, where recorded). A partition built from one that is
    not fresh is `stale`, naming it in ``problems``."""
    from kg_platform.assets.integrity import Integrity
    from kg_platform.orchestration import freshness as f

    resolver = f.stale_resolver(instance, asset_graph)
    integrity = Integrity(lake, instance, resolver, verify) if lake is not None else None
    states: dict[str, dict[str, str]] = {}
    for key in sorted(asset_graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = asset_graph.get(key)
        if not node.is_materializable:
            continue
        keys: list[str | None] = [None]
        if node.partitions_def is not None:
            keys = list(node.partitions_def.get_partition_keys(dynamic_partitions_store=instance))
        per: dict[str, str] = {}
        for partition, state in f.partition_state(
            instance, asset_graph, resolver, key, keys
        ).items():
            if state in (f.FAILED, f.IN_PROGRESS) and process_gone(instance, key, partition):
                state = GONE
            elif state in (f.FRESH, f.STALE) and integrity is not None:
                problem = integrity.problem(key.to_user_string(), partition)
                if problem is not None:
                    state = "corrupt"
                    if problems is not None:
                        problems[(key.to_user_string(), partition or "")] = problem
            per[partition or ""] = state
        states[key.to_user_string()] = per
    # the resolver's queryer caches the dynamic partitions the mappings ask for
    _upstream_not_fresh(asset_graph, resolver.instance_queryer, states, problems)
    return states


def _name(asset: str, partition: str) -> str:
    return f"{asset}[{partition}]" if partition else asset


def _upstream_not_fresh(asset_graph, partitions_store, states: dict, problems) -> None:
    """A partition Dagster's resolver rates fresh is still out of date when a partition it is
    built from is not fresh: Dagster's resolver compares direct inputs' data versions only, so
    a file whose tables failed (or went stale, missing, corrupt) leaves the corpus and the
    graph built from it `fresh` there. Such a partition is `stale`, naming the first partition
    upstream that is not fresh (the same partitions `kg build` redoes: the parents mapped by
    Dagster's own partition mappings, walked in Dagster's topological order)."""
    import dagster as dg

    cause: dict[tuple[str, str], str] = {}  # (asset, partition) -> its root upstream cause
    with dg.partition_loading_context(dynamic_partitions_store=partitions_store):
        for key in asset_graph.toposorted_asset_keys:
            asset = key.to_user_string()
            per = states.get(asset)
            if not per:
                continue
            for partition, state in per.items():
                if state != "fresh":
                    continue
                parents = asset_graph.get_parents_partitions(key, partition or None)
                behind: set[str] = set()
                for parent in parents.parent_partitions:
                    name = parent.asset_key.to_user_string()
                    upstream = states.get(name, {}).get(parent.partition_key or "")
                    if upstream not in (None, "fresh"):
                        own = (name, parent.partition_key or "")
                        behind.add(cause.get(own) or f"{_name(*own)} {upstream}")
                if not behind:
                    continue
                first, *others = sorted(behind)
                more = f" (and {len(others)} more)" if others else ""
                cause[(asset, partition)] = first
                per[partition] = "stale"
                if problems is not None:
                    problems[(asset, partition)] = f"upstream {first}{more}"


# what makes `kg status` exit 1: a published object damaged or gone, a run that failed, or a
# partition of an asset built before that is not built (a new file, a deleted lake)
BAD = ("corrupt", "failed", GONE, "missing")


def not_ok(states: dict[str, dict[str, str]]) -> dict[str, int]:
    """state -> how many partitions are in it, of the states in BAD. A `missing` partition
    counts where its asset has some other partition built: an asset nothing was ever built
    of (the dense layer without a GPU, the evaluation reports without reference data) is
    outside what was asked for, not a fault."""
    counts: Counter = Counter()
    for per in states.values():
        built = any(state not in ("missing", "in progress") for state in per.values())
        for state in per.values():
            if state in BAD and (state != "missing" or built):
                counts[state] += 1
    return {state: counts[state] for state in BAD if counts[state]}


def record_verified(home, lake_root: str, instance, states: dict, problems: dict) -> None:
    """What the hashes found, for the next `kg build` (integrity.record_findings)."""
    from kg_platform.assets.integrity import record_findings
    from kg_platform.orchestration.records import latest

    found = []
    for asset, per in states.items():
        for partition, state in per.items():
            line = problems.get((asset, partition))
            if state != "corrupt" or not line or not partition:
                continue
            m = latest(instance, asset, partition)
            if m is not None:
                found.append((m, line))
    record_findings(home, lake_root, found)
