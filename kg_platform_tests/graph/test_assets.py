from __future__ import annotations

import json

import dagster as dg

from kg_platform.assets.graph import corpus_profile, graph
from kg_platform.graph import layout
from kg_platform.graph.store import KGStore
from kg_platform.resources.catalog import CatalogResource
from kg_platform.resources.lake import LakeResource
from kg_platform.storage.lake import Lake
from kg_platform_tests.graph.corpus import tiny_corpus

RELEASE, YEAR = "pubmed26", "2024"


def test_graph_and_profile_materialise_on_a_tmp_lake(lake: Lake) -> None:
    scoped = lake.scoped(release=RELEASE, mesh_year=YEAR)
    tiny_corpus(scoped)
    resources = {
        "lake": LakeResource(root=lake.root),
        "catalog": CatalogResource(database=":memory:"),
    }
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("pubmed_releases", [RELEASE])
        instance.add_dynamic_partitions("mesh_years", [YEAR])
        result = dg.materialize(
            [graph],
            partition_key=dg.MultiPartitionKey({"release": RELEASE, "mesh_year": YEAR}),
            instance=instance,
            resources=resources,
        )
        assert result.success
        profiled = dg.materialize(
            [corpus_profile], partition_key=RELEASE, instance=instance, resources=resources
        )
        assert profiled.success
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks == {"graph_invariants": True, "graph_recount": True}
    meta = result.asset_materializations_for_node("graph")[0].metadata
    assert meta["citation_edges"].value == 7
    assert meta["dangling_citations"].value == 2
    assert meta["unknown_descriptors"].value == 1
    assert meta["published"].value is True
    assert meta["corpus_partition"].value == RELEASE
    assert meta["mesh_partition"].value == YEAR
    store = KGStore.open(scoped)
    assert store.build_id == meta["build_id"].value
    assert store.cites(store.idx(30)).tolist() == [0, 1]

    profile = profiled.asset_materializations_for_node("corpus_profile")[0].metadata
    assert profile["retention"].value == 0.8
    assert profile["retention_recent_1_of_4"].value == 0.8
    assert "**in-corpus retention 80.0%**" in profile["report"].value
    saved = json.loads(lake.read_bytes(f"reports/corpus_profile/{RELEASE}/profile.json"))
    assert saved["articles"] == 5
    assert lake.exists(f"reports/corpus_profile/{RELEASE}/profile.png")
    assert lake.exists(f"reports/corpus_profile/{RELEASE}/report.md")
    pointer = json.loads(lake.read_bytes(f"graph/{RELEASE}/{YEAR}/current.json"))
    assert pointer["build_id"] == store.build_id
    assert json.loads(scoped.read_bytes(layout.CURRENT_POINTER)) == pointer
    assert layout.published_pairs(lake) == [(RELEASE, YEAR)]


def test_the_graph_recount_holds_to_the_fold_memory_limit(lake: Lake, monkeypatch) -> None:
    """The recount's DuckDB takes KG_FOLD_MEMORY_LIMIT (and spills past it): a limit DuckDB
    cannot read fails the step naming the variable, before anything is published."""
    from kg_platform.storage.catalog import Catalog

    con = Catalog(lake).connect(memory_limit="1GB", spill_dir=str(lake.root))
    assert con.execute("SELECT current_setting('memory_limit')").fetchone() == ("953.6 MiB",)
    scoped = lake.scoped(release=RELEASE, mesh_year=YEAR)
    tiny_corpus(scoped)
    monkeypatch.setenv("KG_FOLD_MEMORY_LIMIT", "plenty")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("pubmed_releases", [RELEASE])
        instance.add_dynamic_partitions("mesh_years", [YEAR])
        result = dg.materialize(
            [graph],
            partition_key=dg.MultiPartitionKey({"release": RELEASE, "mesh_year": YEAR}),
            instance=instance,
            resources={"lake": LakeResource(root=lake.root), "catalog": CatalogResource()},
            raise_on_error=False,
        )
    assert not result.success
    error = result.failure_data_for_node("graph").error
    assert "KG_FOLD_MEMORY_LIMIT: 'plenty': not a DuckDB memory limit" in str(error)
    assert not lake.exists(f"graph/{RELEASE}/{YEAR}/current.json")
