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


def test_graph_and_profile_materialise_on_a_tmp_lake(lake: Lake) -> None:
    tiny_corpus(lake)
    result = dg.materialize(
        [graph, corpus_profile],
        resources={
            "lake": LakeResource(root=lake.root),
            "catalog": CatalogResource(database=":memory:"),
        },
    )
    assert result.success
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks == {"graph_invariants": True, "graph_recount": True}
    meta = result.asset_materializations_for_node("graph")[0].metadata
    assert meta["citation_edges"].value == 7
    assert meta["dangling_citations"].value == 2
    assert meta["unknown_descriptors"].value == 1
    assert meta["published"].value is True
    store = KGStore.open(lake)
    assert store.build_id == meta["build_id"].value
    assert store.cites(store.idx(30)).tolist() == [0, 1]

    profile = result.asset_materializations_for_node("corpus_profile")[0].metadata
    assert profile["retention"].value == 0.8
    assert profile["retention_recent_1_of_4"].value == 0.8
    assert "**in-corpus retention 80.0%**" in profile["report"].value
    saved = json.loads(lake.read_bytes("reports/corpus_profile/profile.json"))
    assert saved["articles"] == 5
    assert lake.exists("reports/corpus_profile/profile.png")
    assert lake.exists("reports/corpus_profile/report.md")
    assert json.loads(lake.read_bytes(layout.CURRENT_POINTER))["build_id"] == store.build_id
