"""The fast paths of the graph build: bitmaps read without Arrow's converters, the
reference passes' in-place de-duplication and cutting across slice boundaries, the parallel and sequential builds, the
hashing writer, and a generated corpus checked against a plain numpy construction."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pytest

from kg_platform.graph import build as build_module
from kg_platform.graph import layout
from kg_platform.graph.arrays import ArrayWriter, ints, true_mask
from kg_platform.graph.build import GraphInputError, build_graph
from kg_platform.storage.lake import Lake
from kg_platform_tests.graph.corpus import write_corpus, write_mesh
from kg_platform_tests.support import sorting_csr as sorting


def test_true_reads_bitmaps_with_nulls_and_offsets() -> None:
    values = [True, None, False, True, None, True, False, True, True, None, True]
    column = pa.array(values, pa.bool_())
    batch = pa.record_batch({"major": column})
    assert true_mask(batch, "major", "t").tolist() == [bool(v) for v in values]
    sliced = pa.record_batch({"major": column.slice(3, 7)})  # offset 3: not byte-aligned
    assert true_mask(sliced, "major", "t").tolist() == [
        True,
        False,
        True,
        False,
        True,
        True,
        False,
    ]
    with pytest.raises(GraphInputError, match=r"t: column major is int64, expected booleans"):
        true_mask(pa.record_batch({"major": pa.array([1])}), "major", "t")


def test_ints_are_zero_copy_views_that_respect_offsets_and_refuse_nulls() -> None:
    column = pa.array(np.arange(20, dtype=np.int32)).slice(5, 7)
    assert ints(pa.record_batch({"pmid": column}), "pmid", "t").tolist() == [
        5,
        6,
        7,
        8,
        9,
        10,
        11,
    ]
    with_null = pa.record_batch({"pmid": pa.array([1, None, 3], pa.int64())})
    with pytest.raises(GraphInputError, match=r"t: column pmid has 1 null\(s\)"):
        ints(with_null, "pmid", "t")
    as_text = pa.record_batch({"pmid": pa.array(["1"])})
    with pytest.raises(GraphInputError, match=r"t: column pmid is string, expected integers"):
        ints(as_text, "pmid", "t")


def test_dedup_keeps_the_flagged_key_of_runs_that_cross_slices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sorting, "_CHUNK", 3)
    # (column << 1 | flag): columns 5, 2, 7, 9 with flags mixed and repeated
    keys = np.array([10, 11, 10, 4, 15, 5, 18, 18], dtype=np.int64)
    assert sorting._sort_and_dedup(keys, flag_bits=1).tolist() == [5, 11, 15, 18]
    plain = np.array([3, 1, 3, 3, 2, 1, 3], dtype=np.int64)
    assert sorting._sort_and_dedup(plain, flag_bits=0).tolist() == [1, 2, 3]
    assert sorting._sort_and_dedup(np.empty(0, np.int64), flag_bits=0).size == 0


def test_cut_counts_rows_and_flags_across_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sorting, "_CHUNK", 2)
    # rows 0, 0, 2, 2, 2, 4 of 5; columns 1, 3, 0, 2, 9, 7; flags 1, 0, 0, 1, 1, 0
    entries = [(0, 1, 1), (0, 3, 0), (2, 0, 0), (2, 2, 1), (2, 9, 1), (4, 7, 0)]
    keys = np.array([r << 32 | c << 1 | f for r, c, f in entries], dtype=np.int64)
    art2mesh, mesh2art = layout.EDGE_KINDS["art2mesh"], layout.EDGE_KINDS["mesh2art"]
    csr, flag_counts = sorting._cut(keys, art2mesh, 5, 10, count_flags=True)
    assert csr.indptr.tolist() == [0, 2, 2, 5, 5, 6]
    assert csr.indices.tolist() == [1, 3, 0, 2, 9, 7]
    assert csr.flag is not None and csr.flag.tolist() == [True, False, False, True, True, False]
    assert flag_counts.tolist() == [1, 0, 2, 0, 0]
    # the reverse: columns become rows, each list ascending, flags travelling along
    keys = sorting._reverse_in_place(keys, csr)
    reverse, _ = sorting._cut(keys, mesh2art, 10, 5, count_flags=False)
    assert reverse.indptr.tolist() == [0, 1, 2, 3, 4, 4, 4, 4, 5, 5, 6]
    assert reverse.indices.tolist() == [2, 0, 2, 0, 4, 2]
    assert reverse.flag is not None
    assert reverse.flag.tolist() == [False, True, True, False, False, True]


def test_writer_writes_the_bytes_np_save_writes(lake: Lake) -> None:
    arrays = {
        "cite_indices": np.arange(7, dtype=np.int32),
        "mesh_uis": np.array([b"D000001", b"D999999"], dtype="S7"),
        "mesh2art_major": np.array([True, False, True]),
        "cite_indptr": np.zeros(0, dtype=np.int64),
    }
    with ArrayWriter(lake, "w") as out:
        for name, array in arrays.items():
            out.put(name, array)
        infos = out.finish()
    assert list(infos) == ["cite_indptr", "cite_indices", "mesh2art_major", "mesh_uis"]
    for name, array in arrays.items():
        expected = io.BytesIO()
        np.save(expected, array, allow_pickle=False)
        assert lake.read_bytes(layout.array_key("w", name)) == expected.getvalue(), name
        assert infos[name].sha256 == build_module.array_sha256(array), name


def test_sequential_build_gives_the_same_arrays(lake: Lake, tiny) -> None:
    sequential = build_graph(lake, build_id="sequential", parallel=False)
    for name in layout.ALL_ARRAYS:
        assert sequential.arrays[name].sha256 == tiny.arrays[name].sha256, name
    assert sequential.stats.edges == tiny.stats.edges == 13
    assert {"citations: sort, dedup", "mesh: reverse sort"} <= set(tiny.phase_seconds)
    assert set(tiny.phase_cpu_seconds) == set(tiny.phase_seconds)


def _generated_corpus(lake: Lake, seed: int = 3) -> dict[str, np.ndarray]:
    """600 articles with gapped PMIDs, 5,000 citation rows (duplicates, dangling), 4,000
    MeSH rows over 40 descriptors (3 unknown to mesh/descriptors, repeated pairs with mixed
    major flags); returns what the build needs to recompute the arrays independently."""
    rng = np.random.default_rng(seed)
    pmids = np.cumsum(rng.integers(1, 5, 600)) + 100
    citing = pmids[rng.integers(0, 600, 5000)]
    cited = pmids[rng.integers(0, 600, 5000)]
    dangling = rng.random(5000) < 0.15
    cited = np.where(dangling, 10**7 + rng.integers(0, 50, 5000), cited)
    uis = [f"D{k:06d}" for k in range(1, 41)]
    mesh_pmid = pmids[rng.integers(0, 600, 4000)]
    mesh_desc = rng.integers(0, 40, 4000)
    descriptor_major = rng.random(4000) < 0.2
    qualifier_major = rng.choice([None, True, False], 4000, p=[0.5, 0.1, 0.4])
    write_corpus(
        lake,
        {
            "articles": [(int(p), "f", "t", None, False, 2000, "J", "eng", 1) for p in pmids[::-1]],
            "citations": list(zip(citing.tolist(), cited.tolist(), strict=True)),
            "mesh_edges": [
                (int(p), uis[d], bool(m), None, q)
                for p, d, m, q in zip(
                    mesh_pmid, mesh_desc, descriptor_major, qualifier_major, strict=True
                )
            ],
        },
    )
    write_mesh(lake, uis[:37], [(u, f"C01.{k:03d}") for k, u in enumerate(uis[:37])])
    return {
        "pmids": pmids,
        "citing": citing,
        "cited": cited,
        "mesh_pmid": mesh_pmid,
        "mesh_desc": mesh_desc,
        "major": descriptor_major | (qualifier_major == True),  # noqa: E712 (object array)
    }


def _reference_csr(rows: np.ndarray, cols: np.ndarray, n_rows: int) -> tuple[list, list]:
    order = np.lexsort((cols, rows))
    counts = np.bincount(rows, minlength=n_rows)
    return np.concatenate([[0], np.cumsum(counts)]).tolist(), cols[order].tolist()


def test_generated_corpus_matches_a_plain_numpy_construction(lake: Lake) -> None:
    corpus = _generated_corpus(lake)
    build = build_graph(lake, build_id="generated", batch_rows=700)

    def array(name: str) -> list:
        return lake.read_npy(layout.array_key(build.build_id, name)).tolist()

    pmids = corpus["pmids"]
    src = np.searchsorted(pmids, corpus["citing"])
    inside = np.isin(corpus["cited"], pmids)
    pairs = np.unique(
        np.stack([src[inside], np.searchsorted(pmids, corpus["cited"][inside])]), axis=1
    )
    assert build.stats.citation_edges == pairs.shape[1]
    assert build.stats.dangling_citations == int((~inside).sum())
    assert (array("cite_indptr"), array("cite_indices")) == _reference_csr(
        pairs[0], pairs[1], pmids.size
    )
    assert (array("cited_by_indptr"), array("cited_by_indices")) == _reference_csr(
        pairs[1], pairs[0], pmids.size
    )

    art = np.searchsorted(pmids, corpus["mesh_pmid"])
    mesh = np.stack([corpus["mesh_desc"], art, corpus["major"].astype(np.int64)])
    # per (descriptor, article): major if any of its rows is
    key = mesh[0] * pmids.size + mesh[1]
    unique_keys, inverse = np.unique(key, return_inverse=True)
    major = np.zeros(unique_keys.size, dtype=bool)
    np.logical_or.at(major, inverse, mesh[2].astype(bool))
    desc, article = unique_keys // pmids.size, unique_keys % pmids.size
    assert build.stats.n_unknown_descriptors == 3
    assert build.stats.mesh_pairs == unique_keys.size
    assert build.stats.major_pairs == int(major.sum())
    indptr, indices = _reference_csr(desc, article, 40)
    assert (array("mesh2art_indptr"), array("mesh2art_indices")) == (indptr, indices)
    assert array("mesh2art_major") == major[np.lexsort((article, desc))].tolist()
    assert array("mesh_major_count") == np.bincount(desc[major], minlength=40).tolist()
    indptr, indices = _reference_csr(article, desc, pmids.size)
    assert (array("art2mesh_indptr"), array("art2mesh_indices")) == (indptr, indices)
    assert array("art2mesh_major") == major[np.lexsort((desc, article))].tolist()
