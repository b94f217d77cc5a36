from __future__ import annotations

import duckdb
import numpy as np
import pytest

from kg_platform.graph import layout
from kg_platform.graph.checks import check_invariants, recount
from kg_platform.graph.store import KGStore
from kg_platform.storage import mapped
from kg_platform.storage.catalog import Catalog
from kg_platform.storage.lake import Lake
from kg_platform_tests.support.graph import tamper


@pytest.fixture
def con(lake: Lake):
    catalog = Catalog(lake)
    connection = catalog.connect()
    catalog.refresh_views(connection)
    yield connection
    connection.close()


def test_a_good_build_passes_both(lake: Lake, tiny, con: duckdb.DuckDBPyConnection) -> None:
    store = KGStore.open(lake, tiny.build_id)
    inv = check_invariants(store)
    assert inv.passed, inv.details
    rc = recount(store, con, named_pmids=(40,), named_uis=("D000002", "D006801"))
    assert rc.passed, rc.details
    assert rc.metadata["named_descriptors_absent"] == 1
    assert rc.metadata["duckdb_citation_edges"] == 7
    assert rc.metadata["duckdb_dangling_citations"] == 2
    assert rc.metadata["duckdb_major_pairs"] == 3
    assert rc.metadata["articles_recounted"] == 5


def test_bit_rot_fails_the_sha256(lake: Lake, tiny) -> None:
    tamper(lake, tiny.build_id, "cite_indices", lambda a: a.__setitem__(0, 1), False)
    out = check_invariants(KGStore.open(lake, tiny.build_id))
    assert not out.passed
    assert out.details == "cite_indices: sha256 differs from the manifest"


def test_unordered_list_fails_the_invariants(lake: Lake, tiny) -> None:
    # cited_by of node 0 becomes [2, 1, 3]: same degrees, no longer ascending
    tamper(
        lake, tiny.build_id, "cited_by_indices", lambda a: a.__setitem__(slice(0, 2), [2, 1]), True
    )
    out = check_invariants(KGStore.open(lake, tiny.build_id))
    assert not out.passed
    assert out.details == (
        "cited_by_indices: 1 row(s) not strictly ascending, the first row 0 at entry 1"
    )


def test_out_of_range_index_fails_the_invariants(lake: Lake, tiny) -> None:
    tamper(lake, tiny.build_id, "art2mesh_indices", lambda a: a.__setitem__(-1, 9), True)
    out = check_invariants(KGStore.open(lake, tiny.build_id))
    assert out.details == "art2mesh_indices out of range 0..4: from 0 to 9"


def test_an_indptr_that_falls_fails_the_invariants_not_the_open(lake: Lake, tiny) -> None:
    # cite_indptr [0, 0, 1, 3, 5, 7] -> [0, 0, 4, 3, 5, 7]: its ends, all open checks, hold
    tamper(lake, tiny.build_id, "cite_indptr", lambda a: a.__setitem__(2, 4), True)
    out = check_invariants(KGStore.open(lake, tiny.build_id))
    assert out.details == "cite_indptr is not monotone: 1 fall(s), the first from 4 to 3 at row 2"


def test_an_indptr_short_of_its_indices_fails_the_open(lake: Lake, tiny) -> None:
    tamper(lake, tiny.build_id, "cite_indptr", lambda a: a.__setitem__(-1, 6), True)
    with pytest.raises(ValueError) as short:
        KGStore.open(lake, tiny.build_id)
    assert str(short.value) == (
        f"{lake.path('graph/' + tiny.build_id)}: cite_indptr runs from 0 to 6, expected 0 to 7 "
        "(cite_indices); `kg build` rebuilds it"
    )


def test_csr_check_cheap_and_full() -> None:
    cite, mesh2art = layout.EDGE_KINDS["cite"], layout.EDGE_KINDS["mesh2art"]
    indptr, indices = np.array([0, 2, 1, 3]), np.array([0, 2, 1])

    def fails(make, full: bool) -> str:
        """The error of making a Csr (the O(1) checks) or of its full check."""
        with pytest.raises(ValueError) as error:
            make().check(full)
        return str(error.value)

    falling = layout.Csr(cite, indptr, indices, 3, 3)
    assert falling.check() is falling  # the O(1) checks read the ends alone
    assert fails(lambda: falling, True) == (
        "cite_indptr is not monotone: 1 fall(s), the first from 2 to 1 at row 1"
    )
    assert fails(lambda: layout.Csr(cite, indptr, indices, 4, 3), False) == (
        "cite_indptr has 4 entries, expected 5 (rows + 1)"
    )
    flag = np.array([True, False])
    assert fails(lambda: layout.Csr(mesh2art, indptr, indices, 3, 3, flag), False) == (
        "mesh2art_major has 2 entries, mesh2art_indices 3"
    )
    assert fails(lambda: layout.Csr(mesh2art, indptr, indices, 3, 3), False) == (
        "mesh2art has a flag array; given False"
    )
    ascending = layout.Csr(cite, np.array([0, 2, 2, 3]), indices, 3, 2)
    assert fails(lambda: ascending, True) == "cite_indices out of range 0..1: from 0 to 2"


@pytest.mark.parametrize("window_bytes", [None, 8])
def test_csr_full_check_in_windows(window_bytes: int | None, monkeypatch) -> None:
    # the full check a window at a time (64 MiB, or 8 bytes: one indptr entry, two indices)
    # finds what one pass over each whole array finds: every fall and every unordered row
    # counted once, row 3 unordered across two windows, the row starts' drops allowed
    if window_bytes:
        monkeypatch.setattr(mapped, "WINDOW_BYTES", window_bytes)
    cite = layout.EDGE_KINDS["cite"]

    def full(indptr: list[int], indices: list[int]) -> str:
        csr = layout.Csr(cite, np.array(indptr), np.array(indices, dtype=np.int32), 5, 10)
        with pytest.raises(ValueError) as error:
            csr.check(full=True)
        return str(error.value)

    rows = [1, 2, 3, 5, 4, 4, 7, 6, 5, 0, 1, 2]
    assert full([0, 3, 6, 6, 9, 12], rows) == (
        "cite_indices: 2 row(s) not strictly ascending, the first row 1 at entry 4"
    )
    assert full([0, 3, 2, 6, 5, 12], rows) == (
        "cite_indptr is not monotone: 2 fall(s), the first from 3 to 2 at row 1"
    )
    low = [1, 2, 3, 4, 5, 6, 7, 8, 9, -1, 1, 2]
    assert full([0, 3, 6, 6, 9, 12], low) == "cite_indices out of range 0..9: from -1 to 9"
    ordered = [1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2]
    checked = layout.Csr(cite, np.array([0, 3, 6, 6, 9, 12]), np.array(ordered), 5, 10)
    assert checked.check(full=True) is checked


def test_a_flipped_major_flag_is_caught_by_both(lake: Lake, tiny, con) -> None:
    tamper(lake, tiny.build_id, "mesh2art_major", lambda a: a.__setitem__(1, True), True)
    store = KGStore.open(lake, tiny.build_id)
    inv = check_invariants(store)
    assert not inv.passed and "mesh_major_count differs from mesh2art_major" in inv.details
    rc = recount(store, con, named_uis=("D000001",))
    assert not rc.passed
    assert "descriptor D000001: arrays (2, 2), DuckDB (2, 1)" in rc.details
    assert "major_pairs: arrays 4, DuckDB 3" in rc.details


def test_a_wrong_edge_is_caught_by_both(lake: Lake, tiny, con) -> None:
    # PMID 50 now cites 20 and 30 instead of 30 and 40: degrees out stay the same
    tamper(lake, tiny.build_id, "cite_indices", lambda a: a.__setitem__(slice(5, 7), [1, 2]), True)
    store = KGStore.open(lake, tiny.build_id)
    inv = check_invariants(store)
    assert inv.details == "cite and cited_by disagree on degrees"
    rc = recount(store, con)
    assert not rc.passed
    assert (
        "PMID 50 (cites, in-degree, MeSH): arrays ((20, 30), 0, ('D000002',)), "
        "DuckDB ((30, 40), 0, ('D000002',))"
    ) in rc.details


@pytest.mark.parametrize(("threads", "window_bytes"), [(1, None), (3, None), (3, 4)])
def test_the_compiled_counts_are_numpys(
    lake: Lake, tiny, threads: int, window_bytes: int | None, monkeypatch
) -> None:
    # the invariants' degree and major counts, split by value and row range over threads,
    # against np.bincount and a sum per row on the hand-worked build's arrays; in one window
    # (64 MiB), then one entry at a time
    from concurrent.futures import ThreadPoolExecutor

    from kg_platform.graph import scans

    if window_bytes:
        monkeypatch.setattr(mapped, "WINDOW_BYTES", window_bytes)
    store = KGStore.open(lake, tiny.build_id)
    indices, major = store.array("art2mesh_indices"), store.array("art2mesh_major")
    indptr, flag = store.array("mesh2art_indptr"), store.array("mesh2art_major")
    n = store.n_descriptors
    with ThreadPoolExecutor(threads) as pool:
        counts = scans.value_counts(pool, threads, indices, n)
        majors = scans.value_counts(pool, threads, indices, n, mask=major)
        rows, done_rows = scans.row_flag_counts(pool, threads, indptr, flag)
        for job in done_rows:
            job.result()
    assert counts.tolist() == np.bincount(indices, minlength=n).tolist() == [2, 2, 1, 0, 1]
    assert majors.tolist() == np.bincount(indices[major], minlength=n).tolist()
    assert rows.tolist() == [
        int(flag[a:b].sum()) for a, b in zip(indptr[:-1], indptr[1:], strict=True)
    ]
    assert sum(rows) == 3
    assert check_invariants(store, threads=threads).passed


@pytest.mark.parametrize("parts", [1, 3])
@pytest.mark.parametrize("order", ["PMID order", "shuffled"])
def test_the_streamed_edge_totals_are_duckdbs(order: str, parts: int) -> None:
    # the citation and MeSH totals of rows with repeated pairs, nulls, PMIDs that are no
    # article and a run broken by another descriptor: in PMID order the streamed passes
    # count them (in 1 and 3 PMID ranges), shuffled DuckDB's aggregates do; both as worked
    # by hand
    from kg_platform.graph import checks

    cites = [(1, 3), (1, 2), (1, 3), (2, 1), (2, None), (3, 5), (4, 1), (5, 9), (5, 1), (5, 2)]
    heads = [
        (1, "D1", False, None),
        (1, "D1", False, True),  # (1, D1) major by its qualifier
        (1, "D2", None, None),  # NULL OR false: not major
        (2, "D2", True, False),
        (2, "D3", False, False),
        (2, "D2", False, None),  # (2, D2) again, after D3
        (2, None, True, None),  # a pair, major, and no descriptor
        (3, "D1", False, None),
        (4, "D9", True, None),  # PMID 4 is no article
        (5, "D3", None, True),  # NULL OR true: major
        (None, "D1", True, None),
    ]
    if order == "shuffled":  # PMID 3's rows after PMID 5's: out of order in every range
        cites = [cites[i] for i in (6, 0, 9, 2, 7, 1, 4, 8, 3, 5)]
        heads = heads[8:] + heads[:8]
    con = duckdb.connect()
    con.execute("CREATE TABLE articles AS SELECT unnest([1, 2, 3, 5])::BIGINT AS pmid")
    con.execute("CREATE TABLE citations (citing_pmid BIGINT, cited_pmid BIGINT)")
    con.executemany("INSERT INTO citations VALUES (?, ?)", cites)
    con.execute(
        "CREATE TABLE mesh_edges (pmid BIGINT, descriptor_ui VARCHAR, "
        "descriptor_major BOOLEAN, qualifier_major BOOLEAN)"
    )
    con.executemany("INSERT INTO mesh_edges VALUES (?, ?, ?, ?)", heads)
    totals, per_descriptor, near = checks._edge_totals(con, parts, np.array([1, 2, 3]))
    # citations: 6 distinct pairs inside (1-3, 1-2, 2-1, 3-5, 5-1, 5-2), (1, 3) twice, 3
    # rows dangle; MeSH: pairs (1, D1), (1, D2), (2, D2), (2, D3), (2, null), (3, D1),
    # (5, D3), the first, third, fifth and seventh major, D1-D3 annotated
    assert totals == {
        "citation_edges": 6,
        "dangling_citations": 3,
        "mesh_pairs": 7,
        "major_pairs": 4,
        "annotated_descriptors": 3,
    }
    # each descriptor's articles and major articles: from the streamed pass, or queried
    expected = {"D1": (2, 1), "D2": (2, 1), "D3": (2, 1)}
    assert per_descriptor == (expected if order == "PMID order" else None)
    # the sampled articles' cited PMIDs, in-degree and descriptors (a null last), kept by
    # the same passes; shuffled, the query of _article_mismatches looks them up
    neighbours = {
        1: ((2, 3), 2, ("D1", "D2")),
        2: ((1,), 2, ("D2", "D3", None)),
        3: ((5,), 1, ("D1",)),
    }
    assert near == (neighbours if order == "PMID order" else None)
    con.close()


@pytest.mark.parametrize("k", [0, 1, 5, 64, 65, 300])
def test_a_run_is_sorted_and_its_distinct_values_counted(k: int) -> None:
    # a run longer than 64 is heap-sorted, a shorter one insertion-sorted: both leave it
    # ascending and count its distinct values (each value twice, descending, then a tail
    # left as it was)
    from kg_platform.graph import scans

    values = [v // 2 for v in range(k - 1, -1, -1)]
    run = np.array([*values, 7, -3], dtype=np.int64)
    assert scans.distinct_in_run(run, k) == len(set(values)) == (k + 1) // 2
    assert run[:k].tolist() == sorted(values)
    assert run[k:].tolist() == [7, -3]


def test_the_streamed_passes_grow_their_run_and_sampled_rows() -> None:
    # one citing PMID with 3,000 rows (a run past its first 1,024) and every row sampled
    # (past the first 256 kept rows); MeSH rows of one PMID past 256 sampled ones: the rows
    # kept are the rows read, in order
    import pyarrow as pa

    from kg_platform.graph import scans

    keep = np.arange(1, 3002, dtype=np.int64)
    members = scans.Members.of(keep, np.array([1], dtype=np.int64))
    cited = [2 + (i * 7) % 1500 for i in range(3000)]  # 1,500 distinct, each twice
    batch = pa.record_batch(
        [pa.array([1] * 3000, pa.int64()), pa.array(cited, pa.int64())], names=["a", "b"]
    )
    count = scans.PairCount(members)
    assert count.add(batch.slice(0, 1000)) and count.add(batch.slice(1000))
    assert count.result() == (3000, 3000, 1500)
    assert count.sampled_rows().tolist() == [[1, c] for c in cited]
    codes = np.array([i % 300 for i in range(600)], dtype=np.int32)
    flags = np.array([i % 3 == 0 for i in range(600)], dtype=np.bool_)
    heads = scans.CodePairCount(members, 300)
    assert heads.add(pa.array([1] * 600, pa.int64()), codes, flags)
    assert heads.sampled_rows().tolist() == [[1, c] for c in codes.tolist()]
    assert int(heads.pairs.sum()) == 300
    assert int(heads.flagged.sum()) == 100  # the codes 0, 3, ..., 297 have a flagged row
