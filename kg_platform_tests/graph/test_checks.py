from __future__ import annotations

import json

import duckdb
import numpy as np
import pytest

from kg_platform.graph import layout
from kg_platform.graph.build import array_sha256
from kg_platform.graph.checks import check_invariants, recount
from kg_platform.graph.store import KGStore
from kg_platform.storage.catalog import Catalog
from kg_platform.storage.lake import Lake


@pytest.fixture
def con(lake: Lake):
    catalog = Catalog(lake)
    connection = catalog.connect()
    catalog.refresh_views(connection)
    yield connection
    connection.close()


def _tamper(lake: Lake, build_id: str, name: str, change, fix_manifest: bool) -> None:
    """Rewrite one array; with fix_manifest the manifest agrees (a build bug, not bit rot)."""
    array = np.array(lake.read_npy(layout.array_key(build_id, name), mmap=False))
    change(array)
    lake.write_npy(layout.array_key(build_id, name), array)
    if fix_manifest:
        key = layout.manifest_key(build_id)
        manifest = json.loads(lake.read_bytes(key))
        manifest["arrays"][name]["sha256"] = array_sha256(array)
        lake.write_bytes(key, json.dumps(manifest).encode())


def test_a_good_build_passes_both(lake: Lake, tiny, con: duckdb.DuckDBPyConnection) -> None:
    store = KGStore.open(lake, tiny.build_id)
    inv = check_invariants(store)
    assert inv.passed, inv.description
    rc = recount(store, con, named_pmids=(40,), named_uis=("D000002", "D006801"))
    assert rc.passed, rc.description
    assert rc.metadata["named_descriptors_absent"] == 1
    assert rc.metadata["duckdb_citation_edges"] == 7
    assert rc.metadata["duckdb_dangling_citations"] == 2
    assert rc.metadata["duckdb_major_pairs"] == 3
    assert rc.metadata["articles_recounted"] == 5


def test_bit_rot_fails_the_sha256(lake: Lake, tiny) -> None:
    _tamper(lake, tiny.build_id, "cite_indices", lambda a: a.__setitem__(0, 1), False)
    out = check_invariants(KGStore.open(lake, tiny.build_id))
    assert not out.passed
    assert out.description == "cite_indices: sha256 differs from the manifest"


def test_unordered_list_fails_the_invariants(lake: Lake, tiny) -> None:
    # cited_by of node 0 becomes [2, 1, 3]: same degrees, no longer ascending
    _tamper(
        lake, tiny.build_id, "cited_by_indices", lambda a: a.__setitem__(slice(0, 2), [2, 1]), True
    )
    out = check_invariants(KGStore.open(lake, tiny.build_id))
    assert not out.passed
    assert out.description == "cited_by: 1 list(s) not strictly ascending"


def test_out_of_range_index_fails_the_invariants(lake: Lake, tiny) -> None:
    _tamper(lake, tiny.build_id, "art2mesh_indices", lambda a: a.__setitem__(-1, 9), True)
    out = check_invariants(KGStore.open(lake, tiny.build_id))
    assert out.description.startswith("art2mesh_indices out of range 0..4")


def test_a_flipped_major_flag_is_caught_by_both(lake: Lake, tiny, con) -> None:
    _tamper(lake, tiny.build_id, "mesh2art_major", lambda a: a.__setitem__(1, True), True)
    store = KGStore.open(lake, tiny.build_id)
    inv = check_invariants(store)
    assert not inv.passed and "mesh_major_count differs from mesh2art_major" in inv.description
    rc = recount(store, con, named_uis=("D000001",))
    assert not rc.passed
    assert "descriptor D000001: arrays (2, 2), DuckDB (2, 1)" in rc.description
    assert "major_pairs: arrays 4, DuckDB 3" in rc.description


def test_a_wrong_edge_is_caught_by_both(lake: Lake, tiny, con) -> None:
    # PMID 50 now cites 20 and 30 instead of 30 and 40: degrees out stay the same
    _tamper(lake, tiny.build_id, "cite_indices", lambda a: a.__setitem__(slice(5, 7), [1, 2]), True)
    store = KGStore.open(lake, tiny.build_id)
    inv = check_invariants(store)
    assert inv.description == "cite and cited_by disagree on degrees"
    rc = recount(store, con)
    assert not rc.passed
    assert (
        "PMID 50 (cites, in-degree, MeSH): arrays ((20, 30), 0, ('D000002',)), "
        "DuckDB ((30, 40), 0, ('D000002',))"
    ) in rc.description
