"""The graph's title store (format 2): each article's title as corpus/articles holds it, in
node order, whether the file is in PMID order (streamed in batches) or not, with null,
empty and non-ASCII titles; the same titles as reading the Parquet row groups
(``TitleLookup``); and the graph's checks catch a store that disagrees with the corpus or
is malformed."""

from __future__ import annotations

import duckdb
import pytest

from kg_platform.answer.titles import TitleLookup
from kg_platform.graph import layout
from kg_platform.graph.build import build_graph
from kg_platform.graph.checks import check_invariants, recount
from kg_platform.graph.store import KGStore
from kg_platform.storage.catalog import Catalog
from kg_platform.storage.corpus import read_corpus, write_corpus_table
from kg_platform.storage.lake import Lake
from kg_platform_tests.graph.corpus import write_corpus, write_mesh
from kg_platform_tests.support.graph import tamper

# 40 articles with gapped PMIDs: null, empty, non-ASCII and long titles among plain ones
TITLES: dict[int, str | None] = {
    100 + 7 * k: f"Title {k} of the corpus" for k in range(40)
} | {  # fmt: skip
    107: None,
    114: "",
    121: "Ünïcödé — 心肌梗死 and 🫀",
    128: "x" * 700,
    373: None,
}


def _write(lake: Lake, order: list[int]) -> None:
    rows = [
        (p, "pubmed26n0001", TITLES[p], "An abstract.", True, 2000, "J", "eng", 1) for p in order
    ]
    write_corpus(
        lake,
        {"articles": rows, "mesh_edges": [(order[0], "D000001", True, None, None)]},
    )
    write_mesh(lake, ["D000001"], [("D000001", "A01")])


def _store(lake: Lake, build_id: str, batch_rows: int = 1_000_000) -> KGStore:
    build_graph(lake, build_id=build_id, batch_rows=batch_rows)
    return KGStore.open(lake, build_id)


def test_streamed_in_batches_the_titles_are_the_corpus(tmp_path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    _write(lake, sorted(TITLES))
    store = _store(lake, "streamed", batch_rows=3)  # 14 batches, bytes written per batch
    pmids = sorted(TITLES)
    assert store.has_titles
    assert store.titles(pmids) == TITLES
    assert store.titles([*pmids, 99, 999]) == TITLES  # PMIDs not in the graph: not keys
    assert TitleLookup(lake).titles(pmids) == TITLES  # what ask read before
    whole = _store(lake, "whole")
    for name in layout.TITLE_ARRAYS:
        assert lake.read_bytes(layout.array_key("whole", name)) == lake.read_bytes(
            layout.array_key("streamed", name)
        ), name
    assert store.manifest["arrays"]["title_bytes"]["length"] == sum(
        len(t.encode()) for t in TITLES.values() if t
    )
    assert whole.manifest["arrays"] == store.manifest["arrays"]


def test_a_file_out_of_pmid_order_gives_the_same_store(tmp_path) -> None:
    ordered, shuffled = Lake(str(tmp_path / "a")), Lake(str(tmp_path / "b"))
    _write(ordered, sorted(TITLES))
    _write(shuffled, sorted(TITLES, key=lambda p: (p % 5, -p)))
    a, b = _store(ordered, "a"), _store(shuffled, "b")
    assert b.titles(sorted(TITLES)) == TITLES
    for name in layout.TITLE_ARRAYS:
        assert a.manifest["arrays"][name] == b.manifest["arrays"][name], name


def test_a_corpus_without_titles_gives_none(tmp_path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    _write(lake, sorted(TITLES))
    table = read_corpus(lake, "articles")
    write_corpus_table(lake, "articles", table.drop(["title"]))
    store = _store(lake, "untitled")
    assert store.titles([100, 114]) == {100: None, 114: None}
    assert TitleLookup(lake).titles([100, 114]) == {}  # .get gives None: the same
    assert check_invariants(store).passed


def _recount(lake: Lake, store: KGStore):
    catalog = Catalog(lake)
    con: duckdb.DuckDBPyConnection = catalog.connect()
    try:
        catalog.refresh_views(con)
        return recount(store, con)
    finally:
        con.close()


def test_the_checks_catch_a_store_unlike_the_corpus(tmp_path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    _write(lake, sorted(TITLES))
    store = _store(lake, "checked")
    assert check_invariants(store).passed
    assert _recount(lake, store).passed
    # the corpus changed after the build: the recount names the article
    now = {**TITLES, 135: "Title 5, corrected"}
    rows = [
        (p, "pubmed26n0001", now[p], "An abstract.", True, 2000, "J", "eng", 1)
        for p in sorted(TITLES)
    ]
    write_corpus(lake, {"articles": rows, "mesh_edges": [(100, "D000001", True, None, None)]})
    out = _recount(lake, store)
    assert not out.passed
    assert out.details == (
        "PMID 135 title: arrays 'Title 5 of the corpus', DuckDB 'Title 5, corrected'"
    )


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        ("title_offsets", lambda a: a.__setitem__(3, a[5]), "title_offsets is not monotone"),
        ("title_null", lambda a: a.__setitem__(0, True), "title_bytes holds text for a null"),
        ("title_bytes", lambda a: a.__setitem__(0, 0xFF), "title_bytes is not UTF-8"),
    ],
)
def test_a_malformed_store_fails_the_invariants(tmp_path, name, change, message) -> None:
    lake = Lake(str(tmp_path / "lake"))
    _write(lake, sorted(TITLES))
    _store(lake, "bad")
    tamper(lake, "bad", name, change, fix_manifest=True)  # a build bug, not bit rot
    out = check_invariants(KGStore.open(lake, "bad"))
    assert not out.passed
    assert out.details.startswith(message), out.details
