"""`kg eval ...`'s one verb: a study's partition keys added to the persistent instance, then
its assets materialised in order there (runs.materialise_in_order), so they show in the UI."""

from __future__ import annotations


def materialise(settings, assets, partitions: dict, steps, command: str, **options) -> str:
    """Add ``partitions`` (dynamic partitions definition -> keys), then run each ``(asset,
    partition)`` of ``steps`` (a dict partition is a multi-partition key) on the persistent
    instance with ``options`` (lake, configs, resources); the first failure, or ""."""
    import dagster as dg

    from kg_platform.orchestration.instance import prepare_instance
    from kg_platform.orchestration.runs import materialise_in_order

    instance = prepare_instance(settings)
    for definition, keys in partitions.items():
        instance.add_dynamic_partitions(definition.name, keys)
    steps = [(a, dg.MultiPartitionKey(k) if isinstance(k, dict) else k) for a, k in steps]
    return materialise_in_order(assets, steps, instance, command=command, **options)
