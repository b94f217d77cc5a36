"""What `kg build` asks Dagster for, on a small asset graph and a real (ephemeral) instance:
only what is missing, failed or stale, with a file's download beside its tables and
everything downstream of what is redone."""

from __future__ import annotations

import dagster as dg
import pytest

from kg_platform.orchestration.freshness import partitions_to_redo, requested_partitions

files = dg.DynamicPartitionsDefinition(name="f")
releases = dg.DynamicPartitionsDefinition(name="r")
FAIL = set()  # file partitions whose tables step fails
ALL = dg.AllPartitionMapping()  # files <-> release, as kg_platform.assets.partitions maps them


def small_graph(code_version: str = "1"):
    @dg.asset(partitions_def=files)
    def xml() -> None: ...

    @dg.asset(partitions_def=files, deps=[xml], code_version=code_version)
    def tables(context) -> None:
        if context.partition_key in FAIL:
            raise ValueError(f"{context.partition_key}.xml.gz: truncated")

    @dg.asset(
        partitions_def=releases, deps=[dg.AssetDep(tables, partition_mapping=ALL)], code_version="1"
    )
    def fold() -> None: ...

    @dg.asset(
        partitions_def=files, deps=[dg.AssetDep(fold, partition_mapping=ALL)], code_version="1"
    )
    def shards() -> None: ...

    @dg.asset(code_version="1")
    def vocabulary() -> None: ...

    @dg.asset(partitions_def=releases, deps=[fold, vocabulary], code_version="1")
    def index() -> None: ...

    assets = [xml, tables, fold, shards, vocabulary, index]
    return assets, dg.Definitions(assets=assets).resolve_asset_graph()


def keys_for(partitions_def):
    if partitions_def is None:
        return [None]
    return ["f1", "f2"] if partitions_def == files else ["r1"]


def names(partitions) -> list[str]:
    return sorted(f"{p.asset_key.to_user_string()}[{p.partition_key or ''}]" for p in partitions)


@pytest.fixture
def instance():
    FAIL.clear()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("f", ["f1", "f2"])
        instance.add_dynamic_partitions("r", ["r1"])
        yield instance


def materialise_all(assets, instance) -> None:
    for partition in ("f1", "f2"):
        dg.materialize(
            assets, selection=["xml", "tables"], partition_key=partition, instance=instance,
            raise_on_error=False,
        )  # fmt: skip
    dg.materialize(assets, selection=["vocabulary"], instance=instance)
    if not FAIL:
        dg.materialize(assets, selection=["fold", "index"], partition_key="r1", instance=instance)
        for partition in ("f1", "f2"):
            dg.materialize(assets, selection=["shards"], partition_key=partition, instance=instance)


def test_everything_missing_then_nothing_to_do(instance) -> None:
    assets, graph = small_graph()
    requested = requested_partitions(graph, graph.get_all_asset_keys(), keys_for)
    assert len(requested) == 9
    assert partitions_to_redo(instance, graph, requested) == requested
    materialise_all(assets, instance)
    assert partitions_to_redo(instance, graph, requested) == set()
    assert partitions_to_redo(instance, graph, requested, force=True) == requested


def test_a_failed_file_redoes_its_download_its_tables_and_what_is_downstream(instance) -> None:
    assets, graph = small_graph()
    requested = requested_partitions(graph, graph.get_all_asset_keys(), keys_for)
    materialise_all(assets, instance)
    FAIL.add("f2")
    result = dg.materialize(
        assets, selection=["xml", "tables"], partition_key="f2", instance=instance,
        raise_on_error=False,
    )  # fmt: skip
    assert not result.success
    assert names(partitions_to_redo(instance, graph, requested)) == [
        "fold[r1]", "index[r1]", "shards[f1]", "shards[f2]", "tables[f2]", "xml[f2]",
    ]  # fmt: skip


def test_a_new_code_version_makes_only_that_asset_and_its_downstream_stale(instance) -> None:
    assets, graph = small_graph()
    requested = requested_partitions(graph, graph.get_all_asset_keys(), keys_for)
    materialise_all(assets, instance)
    _, changed = small_graph(code_version="2")
    assert names(partitions_to_redo(instance, changed, requested)) == [
        "fold[r1]", "index[r1]", "shards[f1]", "shards[f2]",
        "tables[f1]", "tables[f2]", "xml[f1]", "xml[f2]",
    ]  # fmt: skip


def test_a_selection_is_planned_within_itself(instance) -> None:
    assets, graph = small_graph()
    materialise_all(assets, instance)
    FAIL.add("f1")
    dg.materialize(
        assets, selection=["tables"], partition_key="f1", instance=instance, raise_on_error=False
    )
    # only the file stage asked for: nothing downstream of it enters the plan
    selected = [dg.AssetKey("tables")]
    requested = requested_partitions(graph, selected, keys_for)
    assert names(partitions_to_redo(instance, graph, requested)) == ["tables[f1]"]
