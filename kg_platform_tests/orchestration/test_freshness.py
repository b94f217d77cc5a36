"""The staleness `kg build` plans from and `kg status` reports, read in bulk
(freshness.BulkStaleStatusResolver), against Dagster's own resolver querying one partition at
a time, on a real instance holding every kind of partition: fresh, missing, failed, stale
from an observed source whose version changed, from an input with a new data version, from a
new code version, and re-materialised inputs with the same version (not stale)."""

from __future__ import annotations

import dagster as dg
import pytest

from kg_platform.orchestration.freshness import (
    BulkStaleStatusResolver,
    partition_state,
    partitions_to_redo,
    requested_partitions,
    stale_resolver,
)

files = dg.DynamicPartitionsDefinition(name="f")
releases = dg.DynamicPartitionsDefinition(name="r")
FILES = ["f1", "f2", "f3", "f4", "f5"]
MD5 = {}  # file -> the md5 the source publishes
XML_VERSION = {}  # file -> the data version its xml step reports
FAIL = set()  # files whose tables step fails


def graph_of(index_version: str = "1"):
    @dg.observable_source_asset(partitions_def=files)
    def source(context) -> dg.DataVersionsByPartition:
        return dg.DataVersionsByPartition({f: dg.DataVersion(m) for f, m in MD5.items()})

    @dg.asset(partitions_def=files, deps=[source], code_version="1")
    def xml(context) -> dg.MaterializeResult:
        return dg.MaterializeResult(data_version=dg.DataVersion(XML_VERSION[context.partition_key]))

    @dg.asset(partitions_def=files, deps=[xml], code_version="1")
    def tables(context) -> None:
        if context.partition_key in FAIL:
            raise ValueError(f"{context.partition_key}.xml.gz: truncated")

    @dg.asset(
        partitions_def=releases,
        deps=[dg.AssetDep(tables, partition_mapping=dg.AllPartitionMapping())],
        code_version="1",
    )
    def fold() -> None: ...

    @dg.asset(code_version="1")
    def vocabulary() -> None: ...

    @dg.asset(partitions_def=releases, deps=[fold, vocabulary], code_version=index_version)
    def index() -> None: ...

    assets = [source, xml, tables, fold, vocabulary, index]
    return assets, dg.Definitions(assets=assets).resolve_asset_graph()


@pytest.fixture(scope="module")
def built():
    """(instance, asset graph): the history of built_with_every_kind_of_partition, built once
    (both tests only read it)."""
    MD5.update({f: f"md5-{f}" for f in FILES})
    XML_VERSION.update({f: f"{f}-1" for f in FILES})
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("f", FILES)
        instance.add_dynamic_partitions("r", ["r1"])
        _, graph = built_with_every_kind_of_partition(instance)
        yield instance, graph


def observe(assets, instance) -> None:
    """The source's observation, as `kg build` runs it (a job selecting the source)."""
    job = dg.define_asset_job("observe", selection=dg.AssetSelection.assets(assets[0].key))
    defs = dg.Definitions(assets=assets, jobs=[job])
    assert defs.resolve_job_def("observe").execute_in_process(instance=instance).success


def materialise(assets, instance, selection, partition=None) -> bool:
    return dg.materialize(
        assets, selection=selection, partition_key=partition, instance=instance,
        raise_on_error=False,
    ).success  # fmt: skip


def built_with_every_kind_of_partition(instance):
    """The instance's history (f4 never built), and the asset graph after index's code
    version changed."""
    assets, _ = graph_of()
    observe(assets, instance)
    for f in ("f1", "f2", "f3", "f5"):
        assert materialise(assets, instance, ["xml", "tables"], f)
    assert materialise(assets, instance, ["vocabulary"])
    assert materialise(assets, instance, ["fold", "index"], "r1")
    MD5["f2"] = "md5-f2-revised"  # the source publishes f2 again: xml[f2] stale
    observe(assets, instance)
    XML_VERSION["f3"] = "f3-2"  # xml[f3] changes, its tables are not rebuilt: tables[f3] stale
    assert materialise(assets, instance, ["xml"], "f3")
    assert materialise(assets, instance, ["xml"], "f5")  # the same version again: nothing stale
    assert materialise(assets, instance, ["tables"], "f5")  # ... and fold not stale from it
    FAIL.add("f1")
    assert not materialise(assets, instance, ["tables"], "f1")  # tables[f1] failed
    XML_VERSION["f2"] = "f2-2"
    # a version of xml[f1] like the last: tables[f1]'s input unchanged
    assert materialise(assets, instance, ["xml"], "f1")
    return graph_of(index_version="2")


EXPECTED = {
    "source": dict.fromkeys(FILES, "fresh"),
    "xml": {"f1": "fresh", "f2": "stale", "f3": "fresh", "f4": "missing", "f5": "fresh"},
    "tables": {"f1": "failed", "f2": "fresh", "f3": "stale", "f4": "missing", "f5": "fresh"},
    "fold": {"r1": "fresh"},
    "vocabulary": {None: "fresh"},
    "index": {"r1": "stale"},
}


def states_and_causes(instance, graph, bulk: bool) -> tuple[dict, dict]:
    resolver = stale_resolver(instance, graph, bulk=bulk)
    assert isinstance(resolver, BulkStaleStatusResolver) == bulk
    states, causes = {}, {}
    for name, partitions in EXPECTED.items():
        key = dg.AssetKey(name)
        states[name] = partition_state(instance, graph, resolver, key, list(partitions))
        for p in partitions:
            causes[(name, p)] = [
                (c.asset_key, c.partition_key, c.category.value, c.reason)
                for c in resolver.get_stale_causes(key, p)
            ]
    return states, causes


def test_bulk_staleness_is_dagsters_own_on_every_kind_of_partition(built) -> None:
    instance, graph = built
    bulk_states, bulk_causes = states_and_causes(instance, graph, bulk=True)
    plain_states, plain_causes = states_and_causes(instance, graph, bulk=False)
    assert bulk_states == plain_states == EXPECTED
    assert bulk_causes == plain_causes
    assert [r for (a, p), r in sorted(bulk_causes.items(), key=str) if r] == [
        [(dg.AssetKey("index"), "r1", "CODE", "has a new code version")],
        [(dg.AssetKey("tables"), "f3", "DATA", "has a new dependency data version")],
        [(dg.AssetKey("xml"), "f2", "DATA", "has a new dependency data version")],
    ]


def test_the_plan_from_bulk_staleness(built) -> None:
    instance, graph = built
    materialisable = [k for k in graph.get_all_asset_keys() if graph.get(k).is_materializable]
    requested = requested_partitions(
        graph,
        materialisable,
        lambda d: [None] if d is None else (FILES if d == files else ["r1"]),
    )
    redo = partitions_to_redo(instance, graph, requested)
    assert sorted(f"{p.asset_key.to_user_string()}[{p.partition_key or ''}]" for p in redo) == [
        "fold[r1]", "index[r1]",
        "tables[f1]", "tables[f2]", "tables[f3]", "tables[f4]",
        "xml[f1]", "xml[f2]", "xml[f3]", "xml[f4]",
    ]  # fmt: skip
