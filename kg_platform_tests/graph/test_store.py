from __future__ import annotations

import os

import numpy as np
import pytest

from kg_platform.graph import layout
from kg_platform.graph.layout import CONCERN, QUOTABLE, RETRACTED
from kg_platform.graph.store import KGStore, intersect_sorted, sorted_unique
from kg_platform.storage.lake import Lake


def test_open_maps_the_edge_arrays_and_nothing_else(lake: Lake, tiny) -> None:
    store = KGStore.open(lake, tiny.build_id)
    edges = set(layout.CITATION_ARRAYS + layout.MESH_ARRAYS)
    assert set(store._arrays) == edges  # mapped for their shape checks
    assert store.n_articles == 5 and store.n_descriptors == 5
    mapped = store.cite_indices
    assert not mapped.flags.owndata and not mapped.flags.writeable  # a read-only file map
    assert set(store._arrays) == edges
    store.year(0)
    assert set(store._arrays) == edges | {"year"}


def test_open_without_id_follows_the_published_pointer(lake: Lake, tiny) -> None:
    with pytest.raises(FileNotFoundError, match="no published graph build"):
        KGStore.open(lake)
    layout.publish(lake, tiny.build_id)
    assert KGStore.open(lake).build_id == tiny.build_id


def test_accessors(lake: Lake, tiny) -> None:
    s = KGStore.open(lake, tiny.build_id)
    assert s.idx(30) == 2 and s.pmid(2) == 30
    with pytest.raises(KeyError, match="PMID 35 is not in graph build"):
        s.idx(35)
    assert s.idx_many(np.array([50, 1, 10, 99])).tolist() == [4, -1, 0, -1]
    # searched as the table's int32: keys beyond it are absent, never wrapped onto a PMID
    # (2**32 + 30 and -2**32 + 10 share their low 32 bits with PMIDs 30 and 10)
    wide = np.array([2**32 + 30, 30, -(2**32) + 10, 2**31 - 1, 2**31, 0, -1], dtype=np.int64)
    assert s.idx_many(wide).tolist() == [-1, 2, -1, -1, -1, -1, -1]
    assert s.idx_many([20, 40]).tolist() == [1, 3]
    assert s.idx_many(np.array([40, 20], dtype=np.int32)).tolist() == [3, 1]
    assert s.idx_many(np.array([], dtype=np.int64)).tolist() == []
    assert s.cites(s.idx(50)).tolist() == [2, 3]
    assert s.cited_by(s.idx(10)).tolist() == [1, 2, 3]
    assert s.cites(0).tolist() == [] and s.cited_by(4).tolist() == []
    d1 = s.desc_idx("D000001")
    assert (d1, s.mesh_ui(d1)) == (0, "D000001")
    assert s.desc_idx("D999999") == 4
    for missing in ("D000004", "D0000011111", "D00000"):
        with pytest.raises(KeyError, match=f"MeSH descriptor {missing} is not in"):
            s.desc_idx(missing)
    assert s.articles_of(d1).tolist() == [0, 1]
    assert s.articles_of(d1, major_only=True).tolist() == [0]
    assert s.articles_of(s.desc_idx("D000002"), major_only=True).tolist() == [4]
    assert s.mesh_of(2).tolist() == [2, 4]
    assert s.mesh_of(2, major_only=True).tolist() == [2]
    assert s.year(1) == 0 and s.year(4) == 2021
    flags = s.array("flags")[:5]
    assert (flags & QUOTABLE > 0).tolist() == [False, True, True, True, False]
    assert (flags & RETRACTED > 0).tolist() == [False, False, True, True, False]
    assert (flags & CONCERN > 0).tolist() == [False, False, False, False, True]
    assert (QUOTABLE, RETRACTED, CONCERN) == (1, 2, 4)


def test_expand_many_nodes_at_once(lake: Lake, tiny) -> None:
    s = KGStore.open(lake, tiny.build_id)
    e = s.expand("cited_by", np.array([0, 4, 2, 0]))
    assert e.indptr.tolist() == [0, 3, 3, 5, 8]
    assert e.neighbours.tolist() == [1, 2, 3, 3, 4, 1, 2, 3]
    assert e.of(2).tolist() == s.cited_by(2).tolist()
    m = s.expand("mesh2art", np.array([1, 3, 4]))
    assert m.neighbours.tolist() == [0, 4, 2]
    assert s.expand("cite", np.array([], dtype=np.int64)).neighbours.size == 0


def test_intersect_sorted() -> None:
    a = np.array([1, 3, 5, 7, 9, 11], dtype=np.int32)
    b = np.array([0, 3, 4, 9, 12], dtype=np.int32)
    assert intersect_sorted(a, b).tolist() == [3, 9]
    assert intersect_sorted(b, a).tolist() == [3, 9]
    assert intersect_sorted(a, b[:0]).tolist() == []
    assert intersect_sorted(a, np.array([100])).tolist() == []
    # with the node count: a table over 13 nodes (dense), a merge over 10,000 (sparse), the
    # binary search again for lists more than 16 times apart; the same answer every way
    for n_nodes in (13, 10_000):
        assert intersect_sorted(a, b, n_nodes).tolist() == [3, 9]
        assert intersect_sorted(b, a, n_nodes).tolist() == [3, 9]
        assert intersect_sorted(a, b[:0], n_nodes).tolist() == []
    many = np.arange(0, 340, 2, dtype=np.int32)
    assert intersect_sorted(np.array([4, 5, 338]), many, 10_000).tolist() == [4, 338]


def test_sorted_unique() -> None:
    # np.unique's values by a sort: repeats, a negative, unsorted; one value; none
    values = np.array([7, -2, 7, 3, 3, 3, 1 << 40, -2], dtype=np.int64)
    assert sorted_unique(values).tolist() == [-2, 3, 7, 1 << 40] == np.unique(values).tolist()
    assert sorted_unique(values).dtype == np.int64
    assert sorted_unique(values[:1]).tolist() == [7]
    assert sorted_unique(values[:0]).tolist() == []


def test_a_damaged_array_is_named_with_its_file_array_and_build(lake: Lake, tiny) -> None:
    path = lake.path(layout.array_key(tiny.build_id, "cite_indices"))
    with open(path, "rb") as f:
        good = f.read()
    info = tiny.arrays["cite_indices"]
    assert (info.size, info.nbytes) == (len(good), 7 * 4) == (128 + 28, 28)
    # cut short: every open checks the sizes against the manifest
    with open(path, "wb") as f:
        f.write(good[:-4])
    with pytest.raises(ValueError) as cut:
        KGStore.open(lake, tiny.build_id)
    assert str(cut.value) == (
        f"{path}: array cite_indices of graph build {tiny.build_id} is {len(good) - 4} bytes, "
        f"its manifest says {len(good)} bytes; `kg build` rebuilds it"
    )
    # the right size, but no .npy header: opening the store names the array
    with open(path, "wb") as f:
        f.write(b"x" * len(good))
    with pytest.raises(ValueError) as garbage:
        KGStore.open(lake, tiny.build_id)
    assert str(garbage.value).startswith(
        f"{path}: array cite_indices of graph build {tiny.build_id} cannot be opened ("
    )
    # a missing array and a garbage manifest
    with open(path, "wb") as f:
        f.write(good)
    os.remove(lake.path(layout.array_key(tiny.build_id, "year")))
    with pytest.raises(ValueError, match=r"/year\.npy: array year of graph build \w+ is missing"):
        KGStore.open(lake, tiny.build_id)
    lake.write_bytes(layout.manifest_key(tiny.build_id), b"[1, 2]")
    with pytest.raises(ValueError, match=r"manifest\.json: not a graph manifest \("):
        KGStore.open(lake, tiny.build_id)
