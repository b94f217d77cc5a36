"""An update's graph build patched from the published build and the fold's change is the full
build of the same corpus, array for array and figure for figure: on a synthetic release after
one and two updates (revisions, Version 2 records, retractions, DeleteCitations: PMIDs come
and go), and on the real mirror pair; and what makes the full build run instead, with why."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kg_platform.graph import layout
from kg_platform.graph.build import GraphBuild, build_graph
from kg_platform.graph.checks import check_invariants, recount, update_delta
from kg_platform.graph.patch import build_update
from kg_platform.graph.store import KGStore
from kg_platform.pubmed.fold import FULL_FOLD_ENV, added_key, fold_release, table_key
from kg_platform.pubmed.synthetic import write_synthetic_release
from kg_platform.storage.catalog import Catalog
from kg_platform.storage.lake import Lake
from kg_platform_tests.graph.corpus import mirror_pair_lake, write_mesh_2024
from kg_platform_tests.support.fold import load_tables


def update_and_compare(lake: Lake) -> tuple[GraphBuild, str]:
    """The update's build (patched when it can be) against the full build of the same corpus
    under another id: every array's bytes, every figure; then both checks on the update's
    build, and it is published."""
    published = layout.current_build_id(lake) if lake.exists(layout.CURRENT_POINTER) else None
    build, how = build_update(lake, published)
    full = build_graph(lake, build_id="full00000000")
    assert set(build.arrays) == set(full.arrays) == set(layout.ALL_ARRAYS)
    patched, reference = KGStore.open(lake, build.build_id), KGStore.open(lake, full.build_id)
    for name in layout.ALL_ARRAYS:
        a, b = patched.array(name), reference.array(name)
        assert (a.dtype, a.shape) == (b.dtype, b.shape), name
        assert np.array_equal(a, b), name
        assert build.arrays[name] == full.arrays[name], name
    ours = {k: v for k, v in asdict(build.stats).items() if k != "seconds"}
    assert ours == {k: v for k, v in asdict(full.stats).items() if k != "seconds"}
    store = KGStore.open(lake, build.build_id)
    delta, _ = update_delta(lake, published, store)
    catalog = Catalog(lake)
    con = catalog.connect()
    try:
        catalog.refresh_views(con)
        outcomes = [check_invariants(store), recount(store, con, delta=delta)]
    finally:
        con.close()
    assert all(o.passed for o in outcomes), [o.details for o in outcomes]
    layout.publish(lake, build.build_id)
    return build, how


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    tmp = tmp_path_factory.mktemp("synthetic")
    return write_synthetic_release(tmp / "release", 3000, n_baseline_files=3, n_update_files=3)


def synthetic_lake(paths: list[Path], tmp_path: Path) -> tuple[Lake, list[str]]:
    lake = Lake(str(tmp_path / "lake"))
    write_mesh_2024(lake)
    return lake, load_tables(lake, paths)


def test_each_synthetic_update_is_patched_to_the_full_build(
    synthetic: list[Path], tmp_path: Path
) -> None:
    lake, names = synthetic_lake(synthetic, tmp_path)
    fold_release(lake, names[:3])
    first, how = update_and_compare(lake)
    assert how == "full: no graph build was published before"
    previous = first
    came = went = 0
    for n in (4, 5):  # one update, then a second on top of the patched build
        result = fold_release(lake, names[:n])
        assert result.mode == "incremental"
        build, how = update_and_compare(lake)
        assert how == f"patched from graph build {previous.build_id}"
        old = set(KGStore.open(lake, previous.build_id).array("pmids").tolist())
        new = set(KGStore.open(lake, build.build_id).array("pmids").tolist())
        came, went = came + len(new - old), went + len(old - new)
        assert build.stats.n_articles == result.rows["articles"]
        assert build.stats.dangling_citations == result.dangling_citations
        previous = build
    assert came > 0 and went > 0  # node ids shifted both ways


def add_citations(lake: Lake, name: str, pairs: list[tuple[int, int]]) -> None:
    """Rows appended to one file's citation table (version 1 records)."""
    key = table_key("citations", name)
    rows = lake.read_parquet(key)
    more = pa.table(
        {
            "citing_pmid": pa.array([c for c, _ in pairs], pa.int64()),
            "version": pa.array([1] * len(pairs), pa.int32()),
            "cited_pmid": pa.array([d for _, d in pairs], pa.int64()),
        }
    )
    lake.write_parquet(key, pa.concat_tables([rows, more.select(rows.column_names)]))


def test_rows_citing_an_article_that_came_or_went_are_patched(
    synthetic: list[Path], tmp_path: Path
) -> None:
    """A baseline article no update touches cites (twice) a PMID the first update adds, a
    PMID the second adds and a PMID each update deletes: an edge that appears where a
    dangling row was, and one that disappears into a dangling row, in the untouched rows."""
    lake, names = synthetic_lake(synthetic, tmp_path)
    touched: set[int] = set()
    for name in names[3:]:
        for table in ("articles", "deletions"):
            touched |= set(lake.read_parquet(table_key(table, name)).column("pmid").to_pylist())
    baseline = lake.read_parquet(table_key("articles", names[0])).column("pmid").to_pylist()
    citing = next(p for p in baseline if p not in touched)
    new_in = [
        max(lake.read_parquet(table_key("articles", name)).column("pmid").to_pylist())
        for name in names[3:5]
    ]
    deleted = [
        lake.read_parquet(table_key("deletions", name)).column("pmid").to_pylist()[0]
        for name in names[3:5]
    ]
    assert all(p not in baseline for p in new_in)
    add_citations(lake, names[0], [(citing, p) for p in new_in + deleted + new_in])
    fold_release(lake, names[:3])
    first, _ = update_and_compare(lake)
    previous = KGStore.open(lake, first.build_id)
    for n in (4, 5):
        fold_release(lake, names[:n])
        build, how = update_and_compare(lake)
        assert how == f"patched from graph build {previous.build_id}"
        store = KGStore.open(lake, build.build_id)
        cites = set(store.array("pmids")[store.cites(store.idx(citing))].tolist())
        assert new_in[n - 4] in cites and new_in[n - 4] not in set(previous.array("pmids"))
        assert deleted[n - 4] not in cites
        previous = store


def test_the_mirror_update_is_patched_to_the_full_build(tmp_path: Path) -> None:
    """The real baseline file, then the real update file: 60 articles, 1 citation edge and
    1,348 dangling rows, 300 pairs (test_real_pubmed's hand-worked figures)."""
    lake, names = mirror_pair_lake(tmp_path)
    fold_release(lake, names[:1])
    first, _ = update_and_compare(lake)
    fold_release(lake, names)
    build, how = update_and_compare(lake)
    assert how == f"patched from graph build {first.build_id}"
    s = build.stats
    assert (s.n_articles, s.citation_edges, s.dangling_citations) == (60, 1, 1348)
    assert (s.mesh_pairs, s.major_pairs) == (300, 104)


def test_what_makes_the_update_build_in_full(
    synthetic: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full fold; a previous array changed in place; added rows the corpus does not hold:
    the full build runs, and says why."""
    lake, names = synthetic_lake(synthetic, tmp_path)
    monkeypatch.setenv(FULL_FOLD_ENV, "1")
    fold_release(lake, names[:3])
    update_and_compare(lake)
    fold_release(lake, names[:4])
    _, how = update_and_compare(lake)
    assert how == "full: the corpus was not folded incrementally (mode 'full')"
    monkeypatch.delenv(FULL_FOLD_ENV)

    # the published build's cite_indices changed in place (same size): not patched from
    published = layout.current_build_id(lake)
    fold_release(lake, names[:5])
    path = lake.path(layout.array_key(published, "cite_indices"))
    damaged = np.load(path)
    damaged[0] += 1
    np.save(path, damaged)
    _, how = update_and_compare(lake)
    assert how == f"full: graph build {published}: cite_indices differs from its manifest"

    # the fold's added citations one row short: the row counts do not add up
    published = layout.current_build_id(lake)
    fold_release(lake, names[:6])
    rows = lake.read_parquet(added_key("citations"))
    assert rows.num_rows > 1
    lake.write_parquet(added_key("citations"), rows.slice(1))
    _, how = update_and_compare(lake)
    assert how.startswith("full: ") and "rows, the previous build's less the replaced" in how


def test_an_unreadable_added_file_names_itself(synthetic: list[Path], tmp_path: Path) -> None:
    lake, names = synthetic_lake(synthetic, tmp_path)
    fold_release(lake, names[:3])
    update_and_compare(lake)
    fold_release(lake, names[:4])
    lake.write_bytes(added_key("articles"), b"not parquet")
    with pytest.raises(ValueError, match="added_articles.parquet: not readable"):
        build_update(lake, layout.current_build_id(lake))
