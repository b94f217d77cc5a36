"""The fused CSR passes (``build._fused_csr``, the default) give the very bytes of the
sort-based passes they replaced (``sorting_csr``: numpy sort, de-duplicate, cut,
re-pack reversed, sort, cut), on a real graph folded by the real fold (rows ordered by
PMID, as in production) and on generated corpora in fold order and in random order."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from benchmarks.graph import generate
from kg_platform.graph import build as build_module
from kg_platform.graph import layout
from kg_platform.graph.build import GraphBuild, build_graph
from kg_platform.mesh.tsv import read_descriptor_tsv
from kg_platform.storage.corpus import read_corpus
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.support.sorting_csr import sorting_csr


def _both(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> tuple[GraphBuild, GraphBuild]:
    fused = build_graph(lake, build_id="fused")
    with monkeypatch.context() as patch:
        patch.setattr(build_module, "_make_csr", sorting_csr)
        sorting = build_graph(lake, build_id="sorting")
    assert "citations: cut" in sorting.phase_seconds  # the sort-based passes did run
    return fused, sorting


def _assert_same(lake: Lake, fused: GraphBuild, sorting: GraphBuild) -> None:
    assert list(fused.arrays) == list(layout.ALL_ARRAYS)
    for name in layout.ALL_ARRAYS:
        assert fused.arrays[name] == sorting.arrays[name], name
        a = lake.read_bytes(layout.array_key("fused", name))
        assert a == lake.read_bytes(layout.array_key("sorting", name)), name
    same = {"seconds": 0.0}
    assert {**vars(fused.stats), **same} == {**vars(sorting.stats), **same}


@pytest.fixture(scope="module")
def real_lake(tmp_path_factory) -> Lake:
    """The 400 PubMedQA DEV articles (real MeSH headings resolved to descriptor UIs) folded
    beside the two files of the reference mirror, with the MeSH 2024 descriptors."""
    from kg_platform.pubmed.fold import fold_release, table_key
    from kg_platform.pubmed.parse import parse_file
    from kg_platform.pubmed.pubmedqa_corpus import (
        MeshNameResolver,
        pubmedqa_corpus,
        read_pubmedqa_records,
        terms_from_descriptor_tsv,
    )

    mirror = require_reference("pubmed", "mirror")
    tsv = require_reference("mesh", "tsv", "mesh2024_descriptors.tsv.gz")
    records = read_pubmedqa_records(require_reference("pubmedqa", "pqal_dev400.json"))
    lake = Lake(str(tmp_path_factory.mktemp("fused") / "lake"))
    resolver = MeshNameResolver(terms_from_descriptor_tsv(tsv))
    parsed = {
        "pqal_dev400": pubmedqa_corpus(records, resolver, "pqal_dev400").tables,
        "pubmed26n1334": parse_file(mirror / "baseline" / "pubmed26n1334.xml.gz"),
        "pubmed26n1335": parse_file(mirror / "updatefiles" / "pubmed26n1335.xml.gz"),
    }
    for file, tables in parsed.items():
        for table, data in tables.items():
            lake.write_parquet(table_key(table, file), data)
    fold_release(lake, list(parsed))
    mesh = read_descriptor_tsv(str(tsv))
    lake.write_parquet("mesh/descriptors.parquet", mesh["descriptors"].to_arrow())
    lake.write_parquet("mesh/tree.parquet", mesh["tree"].to_arrow())
    return lake


def test_real_graph_in_fold_order(real_lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    # the fold writes child tables ordered by PMID: the order the fused passes expect
    for table, column in (("citations", "citing_pmid"), ("mesh_edges", "pmid")):
        pmids = read_corpus(real_lake, table)[column].to_numpy()
        assert np.all(pmids[1:] >= pmids[:-1]), table
    fused, sorting = _both(real_lake, monkeypatch)
    _assert_same(real_lake, fused, sorting)
    # 400 PubMedQA articles + 60 mirror ones; their headings recounted from the folded table
    s = fused.stats
    pairs = (
        pl.from_arrow(read_corpus(real_lake, "mesh_edges"))
        .group_by("pmid", "descriptor_ui")
        .agg((pl.col("descriptor_major") | pl.col("qualifier_major").fill_null(False)).any())
    )
    assert s.n_articles == 460
    assert (s.mesh_pairs, s.major_pairs) == (pairs.height, int(pairs["descriptor_major"].sum()))
    assert s.mesh_pairs > 5_000
    # the mirror's 1,349 reference rows: one cites a corpus article (41413049 itself)
    assert (s.citation_rows, s.citation_edges, s.dangling_citations) == (1_349, 1, 1_348)
    assert s.n_descriptors == 30_764 + s.n_unknown_descriptors


@pytest.mark.parametrize("fold_order", [True, False])
def test_generated_graph(tmp_path, monkeypatch: pytest.MonkeyPatch, fold_order: bool) -> None:
    root = str(tmp_path / "lake")
    generate(root, 20_000, 200_000, 180_000, seed=9, fold_order=fold_order)
    lake = Lake(root)
    fused, sorting = _both(lake, monkeypatch)
    _assert_same(lake, fused, sorting)
    # duplicates and dangling rows were dropped, unknown to neither build
    s = fused.stats
    assert s.duplicate_citations > 0 and s.dangling_citations > 0
    assert s.mesh_rows > s.mesh_pairs > s.major_pairs > 0


@pytest.mark.parametrize("threads", [1, 7])
def test_any_number_of_threads_gives_the_same_bytes(
    tmp_path, monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    # the keys cut into 1 or 7 chunks of whole rows, the reverse into as many column ranges,
    # the 6 parts read 1 or 7 at a time: the bytes of the sort-based passes every time
    from kg_platform.storage import corpus

    root = str(tmp_path / "lake")
    monkeypatch.setattr(corpus, "PMID_BUCKET", 1_000)  # parts of 1,000 PMIDs
    generate(root, 3_000, 40_000, 30_000, seed=11, fold_order=True)
    lake = Lake(root)
    assert len(corpus.corpus_parts(lake, "citations")) == 6
    monkeypatch.setattr(build_module, "workers", lambda: threads)
    fused, sorting = _both(lake, monkeypatch)
    _assert_same(lake, fused, sorting)
    assert fused.stats.citation_edges > 0 and fused.stats.mesh_pairs > 0
