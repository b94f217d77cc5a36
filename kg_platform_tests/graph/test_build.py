from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from kg_platform.graph import layout
from kg_platform.graph.build import GraphInputError, array_sha256, build_graph
from kg_platform.storage.corpus import read_corpus, write_corpus_table
from kg_platform.storage.lake import Lake
from kg_platform_tests.graph.corpus import corpus_frame, tiny_corpus

EXPECTED = {
    "pmids": [10, 20, 30, 40, 50],
    "year": [1999, 0, 2001, 2020, 2021],
    "flags": [0, 1, 3, 3, 4],
    "cite_indptr": [0, 0, 1, 3, 5, 7],
    "cite_indices": [0, 0, 1, 0, 2, 2, 3],
    "cited_by_indptr": [0, 3, 4, 6, 7, 7],
    "cited_by_indices": [1, 2, 3, 2, 3, 4, 4],
    "mesh2art_indptr": [0, 2, 4, 5, 5, 6],
    "mesh2art_indices": [0, 1, 0, 4, 2, 2],
    "mesh2art_major": [True, False, False, True, True, False],
    "art2mesh_indptr": [0, 2, 3, 5, 5, 6],
    "art2mesh_indices": [0, 1, 0, 2, 4, 1],
    "art2mesh_major": [True, False, False, True, False, True],
    "mesh_uis": [b"D000001", b"D000002", b"D000003", b"D000068116", b"D999999"],
    "mesh_article_count": [2, 2, 1, 0, 1],
    "mesh_major_count": [1, 1, 1, 0, 0],
    "mesh_categories": [0b100, 0b1001, 0b10, 0b10000, 0],
    "mesh_min_depth": [1, 2, 3, 2, -1],
}
DTYPES = {
    "pmids": "<i4",
    "year": "<i2",
    "flags": "|u1",
    "cite_indptr": "<i8",
    "cite_indices": "<i4",
    "mesh2art_major": "|b1",
    "mesh_uis": "|S10",
    "mesh_categories": "<u4",
    "mesh_min_depth": "<i2",
}


def test_arrays_match_the_hand_worked_corpus(lake: Lake, tiny) -> None:
    assert set(tiny.arrays) == set(layout.ALL_ARRAYS)
    for name, expected in EXPECTED.items():
        array = lake.read_npy(layout.array_key(tiny.build_id, name))
        assert array.tolist() == expected, name
    for name, dtype in DTYPES.items():
        assert tiny.arrays[name].dtype == dtype, name


def test_stats_count_dangling_duplicates_and_unknown_descriptors(tiny) -> None:
    s = tiny.stats
    assert (s.n_articles, s.n_descriptors, s.n_unknown_descriptors) == (5, 5, 1)
    assert (s.citation_rows, s.citation_edges, s.dangling_citations) == (10, 7, 2)
    assert s.duplicate_citations == 1
    assert s.citation_retention == 0.8
    assert (s.mesh_rows, s.mesh_pairs, s.major_pairs) == (8, 6, 3)
    assert (s.quotable, s.retracted, s.concern) == (3, 2, 1)
    assert s.edges == 13


def test_manifest_lists_every_array_with_dtype_length_sha256(lake: Lake, tiny) -> None:
    manifest = json.loads(lake.read_bytes(layout.manifest_key(tiny.build_id)))
    assert manifest["build_id"] == tiny.build_id
    assert set(manifest["inputs"]) == {*layout.CORPUS_INPUTS, *layout.MESH_INPUTS}
    for name, info in manifest["arrays"].items():
        array = lake.read_npy(layout.array_key(tiny.build_id, name))
        assert info["dtype"] == array.dtype.str
        assert info["length"] == len(array)
        assert info["sha256"] == array_sha256(array)
    # the build is not published: the caller does that after the checks
    assert not lake.exists(layout.CURRENT_POINTER)


def test_build_id_names_the_inputs(lake: Lake, tiny) -> None:
    assert build_graph(lake).build_id == tiny.build_id
    frame = corpus_frame("citations", [(20, 10)])
    write_corpus_table(lake, "citations", frame.to_arrow())
    rebuilt = build_graph(lake)
    assert rebuilt.build_id != tiny.build_id
    assert rebuilt.stats.citation_edges == 1
    # the earlier build is still complete on disk
    assert lake.exists(layout.manifest_key(tiny.build_id))


def test_batches_smaller_than_tables_give_the_same_arrays(lake: Lake, tiny) -> None:
    small = build_graph(lake, build_id="small-batches", batch_rows=3)
    for name in layout.ALL_ARRAYS:
        assert small.arrays[name].sha256 == tiny.arrays[name].sha256, name


def test_missing_input_is_named(lake: Lake) -> None:
    tiny_corpus(lake)
    lake.remove("mesh/tree.parquet")
    with pytest.raises(
        GraphInputError, match=r"mesh/tree.parquet: missing; materialise `mesh_tables`"
    ):
        build_graph(lake)


def test_child_row_outside_the_corpus_is_an_error(lake: Lake) -> None:
    tiny_corpus(lake)
    frame = corpus_frame("citations", [(20, 10), (77, 10)])
    write_corpus_table(lake, "citations", frame.to_arrow())
    with pytest.raises(
        GraphInputError, match=r"corpus/citations: 1 row\(s\) whose citing_pmid .*\[77\]"
    ):
        build_graph(lake)


def test_descriptor_ui_not_a_mesh_ui_is_named(lake: Lake) -> None:
    tiny_corpus(lake)
    edges = pl.from_arrow(read_corpus(lake, "mesh_edges"))
    bad = edges[:1].with_columns(pl.lit("X12").alias("descriptor_ui"))
    write_corpus_table(lake, "mesh_edges", pl.concat([edges, bad]).to_arrow())
    with pytest.raises(
        GraphInputError,
        match=r"corpus/mesh_edges: descriptor_ui not a MeSH UI: \['X12'\]",
    ):
        build_graph(lake)


def test_repeated_pmid_is_an_error(lake: Lake) -> None:
    tiny_corpus(lake)
    articles = pl.from_arrow(read_corpus(lake, "articles"))
    write_corpus_table(lake, "articles", pl.concat([articles, articles[:1]]).to_arrow())
    with pytest.raises(GraphInputError, match=r"1 PMID\(s\) appear more than once \(e.g. \[30\]\)"):
        build_graph(lake)


def test_missing_column_is_named(lake: Lake) -> None:
    tiny_corpus(lake)
    edges = pl.from_arrow(read_corpus(lake, "mesh_edges")).drop("qualifier_major")
    write_corpus_table(lake, "mesh_edges", edges.to_arrow())
    with pytest.raises(
        GraphInputError,
        match=r"mesh_edges/part-00000.parquet: missing column\(s\) \['qualifier_major'\]",
    ):
        build_graph(lake)


def test_empty_citations_give_empty_csr(lake: Lake) -> None:
    tiny_corpus(lake)
    write_corpus_table(lake, "citations", corpus_frame("citations", []).to_arrow(), [0])
    build = build_graph(lake)
    indptr = lake.read_npy(layout.array_key(build.build_id, "cited_by_indptr"))
    assert indptr.tolist() == [0] * 6
    assert build.stats.citation_retention == 0.0
    assert np.asarray(lake.read_npy(layout.array_key(build.build_id, "cite_indices"))).size == 0
