"""The release fold on real NLM files. The expected current state is worked out here from
the XML with xml.etree, a route that shares nothing with the project's parser or fold."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from kg_platform.checks import CheckOutcome
from kg_platform.pubmed.fold import (
    PmidMap,
    PmidSet,
    check_edge_sources_in_articles,
    check_no_deleted_pmid,
    check_one_row_per_pmid,
    check_recount,
    fold_release,
    recount_fold_polars,
)
from kg_platform.pubmed.fold import base as fold_base
from kg_platform.schemas import CORPUS_MODELS
from kg_platform.storage.corpus import corpus_parts, write_corpus_table
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.support.fold import (
    assert_folded_as_expected,
    corpus_frame,
    heading_rows,
    load_tables,
    read_xml,
    write_update,
)

MIRROR_DELETIONS = {41456105, 41557076, 41616784, 41618748, 41618749, 41618779}


# -- real release pairs --------------------------------------------------------------------
def test_fold_of_the_2026_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mirror = require_reference("pubmed", "mirror")
    paths = [
        mirror / "baseline" / "pubmed26n1334.xml.gz",
        mirror / "updatefiles" / "pubmed26n1335.xml.gz",
    ]
    lake = Lake(str(tmp_path / "lake"))
    expected = assert_folded_as_expected(lake, paths)
    assert len(expected) == 60
    result = recount_fold_polars(lake, ["pubmed26n1334", "pubmed26n1335"])
    # the six deleted PMIDs of n1335 have no record in this sample: listed, none removed
    assert (result["deletions_listed"], result["deleted"]) == (6, 0)
    assert MIRROR_DELETIONS.isdisjoint(set(corpus_frame(lake, "articles")["pmid"]))
    # 1,349 references (286 + 1,063); all but one cite PMIDs outside this 60-record corpus
    assert result["rows"]["citations"] == 1349
    assert result["dangling_citations"] == 1348
    # the surviving records' keys in a sorted array instead of one indexed by PMID: the same
    monkeypatch.setattr(fold_base, "PMID_MAP_MAX", 0)
    assert recount_fold_polars(lake, ["pubmed26n1334", "pubmed26n1335"]) == result


def test_fold_written_range_by_range_is_the_fold_written_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The corpus tables are sorted and written one range of whole PMID buckets at a time,
    the ranges side by side on two threads; with ranges of 7 records over 2 cores (3 per
    range: four ranges over the mirror's 60 in five buckets, a bucket of 48 alone) and row
    groups of 5 articles and 50 child rows, the tables are the same rows in the same order
    as with one range, and every row group but the last holds exactly its size."""
    import pyarrow.parquet as pq

    from kg_platform.pubmed.fold import full, parts

    mirror = require_reference("pubmed", "mirror")
    paths = [
        mirror / "baseline" / "pubmed26n1334.xml.gz",
        mirror / "updatefiles" / "pubmed26n1335.xml.gz",
    ]
    whole = Lake(str(tmp_path / "whole"))
    monkeypatch.setattr(full, "usable_cores", lambda: 1)
    assert_folded_as_expected(whole, paths)
    monkeypatch.setattr(full, "usable_cores", lambda: 2)
    monkeypatch.setattr(full, "FOLD_RANGE_RECORDS", 7)
    monkeypatch.setattr(parts, "ARTICLE_ROW_GROUP_ROWS", 5)
    monkeypatch.setattr(parts, "CHILD_ROW_GROUP_ROWS", 50)
    made = []
    ranges_of = full._bucket_ranges
    monkeypatch.setattr(full, "_bucket_ranges", lambda *a: made.append(ranges_of(*a)) or made[-1])
    ranged = Lake(str(tmp_path / "ranged"))
    assert_folded_as_expected(ranged, paths)
    # buckets of 1, 1, 2, 8 and 48 articles, at most 3 a range but a bucket is never cut
    assert made == [[[104, 157], [164], [165], [166]]]
    # the 60 articles' PMIDs fall in five buckets of 250,000 (one article in 26228458..., two
    # in 41026679 and 41056390, 8 from 41391582, 48 from 41568766): five parts per table
    parts_of_pair = [f"part-{b:05d}.parquet" for b in (104, 157, 164, 165, 166)]
    groups_per_part = {}
    for table in CORPUS_MODELS:
        parts = corpus_parts(ranged, table)
        assert [k.rsplit("/", 1)[1] for k in parts] == parts_of_pair, (table, parts)
        assert corpus_parts(whole, table) == parts
        for key in parts:
            a, b = pq.read_table(whole.path(key)), pq.read_table(ranged.path(key))
            assert a.schema.equals(b.schema) and a.equals(b), key
            groups = pq.ParquetFile(ranged.path(key)).metadata
            sizes = [groups.row_group(i).num_rows for i in range(groups.num_row_groups)]
            size = 5 if table == "articles" else 50
            # a part of a bucket whose articles have no rows in this table has no group
            assert not sizes or sizes[:-1] == [size] * (len(sizes) - 1), key
            assert not sizes or 0 < sizes[-1] <= size, key
            assert sum(sizes) == b.num_rows
            groups_per_part[key] = groups.num_row_groups
    assert [groups_per_part[k] for k in corpus_parts(ranged, "articles")] == [1, 1, 1, 2, 10]


def test_ranges_read_file_by_file_are_the_query_s_parts_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A range whose files' surviving rows follow one another in PMID order is read file by
    file with pyarrow (no DuckDB join or sort); the parts are the range query's, byte for
    byte. On the mirror pair in ranges of 7 records over 2 cores (four ranges, as above),
    the update n1335 revises records of the last bucket's baseline PMIDs, so that range's
    rows interleave and go to the query (but for its corrections: the update has none); the
    three before it are read file by file. The baseline alone is read file by file
    throughout."""
    from kg_platform.pubmed.fold import full

    mirror = require_reference("pubmed", "mirror")
    paths = [
        mirror / "baseline" / "pubmed26n1334.xml.gz",
        mirror / "updatefiles" / "pubmed26n1335.xml.gz",
    ]
    monkeypatch.setattr(full, "usable_cores", lambda: 2)
    monkeypatch.setattr(full, "FOLD_RANGE_RECORDS", 7)
    streamed_of = full._streamed_rows
    tasks: list[tuple[str, int, bool]] = []

    def noting(lake, table, files, bounds, *rest):
        tasks.append(
            (
                table,
                bounds[0] // 250_000,
                streamed := streamed_of(lake, table, files, bounds, *rest),
            )
        )
        return streamed

    def fold(name: str, n: int, streaming: bool) -> Lake:
        lake = Lake(str(tmp_path / name))
        monkeypatch.setattr(full, "_streamed_rows", noting if streaming else lambda *a: False)
        fold_release(lake, load_tables(lake, paths[:n]))
        return lake

    for n in (2, 1):
        tasks.clear()
        streamed, queried = fold(f"streamed-{n}", n, True), fold(f"queried-{n}", n, False)
        queried_tasks = sorted((t, b) for t, b, s in tasks if not s)
        # the update holds no correction: that table's last range has one file's rows
        last = [(t, 166) for t in sorted(CORPUS_MODELS) if t != "corrections"]
        assert queried_tasks == (last if n == 2 else []), queried_tasks
        # the baseline's own records are all in one bucket: one range, one part a table
        assert len(tasks) == (4 if n == 2 else 1) * len(CORPUS_MODELS)
        for table in CORPUS_MODELS:
            keys = corpus_parts(streamed, table)
            assert keys == corpus_parts(queried, table) and len(keys) == (5 if n == 2 else 1)
            for key in keys:
                assert streamed.read_bytes(key) == queried.read_bytes(key), (n, key)


def test_the_winner_is_the_last_file_s_highest_version_a_null_lowest(tmp_path: Path) -> None:
    """fold_winners (one aggregate per PMID) ranks a PMID's records by file, then version, a
    null version below any other: what the window ordered by file_ord DESC, version DESC
    (NULLS LAST) it replaced ranks first."""
    import duckdb
    import pyarrow as pa

    from kg_platform.pubmed.fold import table_key
    from kg_platform.pubmed.fold.full import fold_tables

    lake = Lake(str(tmp_path / "lake"))
    files = {  # (pmid, version) rows of three files, in fold order
        "f0": [(1, 1), (2, 3), (3, None), (3, None), (5, 7), (6, 2), (None, 1)],
        "f1": [(1, None), (1, 2), (2, None), (6, 1), (None, 2)],
        "f2": [(4, 5), (4, None), (5, None), (5, 1)],
    }
    for name, rows in files.items():
        pmid, version = zip(*rows, strict=True)
        table = pa.table({"pmid": pa.array(pmid, pa.int64()), "version": pa.array(version)})
        lake.write_parquet(table_key("articles", name), table)
        lake.write_parquet(table_key("deletions", name), table.slice(0, 0).select(["pmid"]))
    con = duckdb.connect()
    fold_tables(con, lake, list(files))
    winners = con.sql("SELECT pmid, version, file_ord FROM fold_winners ORDER BY pmid").fetchall()
    assert winners == [
        (1, 2, 1),
        (2, None, 1),
        (3, None, 0),
        (4, 5, 2),
        (5, 1, 2),
        (6, 1, 1),
        (None, 2, 1),
    ]


@pytest.mark.parametrize("release", ["23", "24", "25"])
def test_fold_of_sample_releases(tmp_path: Path, release: str) -> None:
    root = require_reference("pubmed", "samples", f"pubmed{release}")
    paths = sorted((root / "baseline").glob("*.xml.gz")) + sorted(
        (root / "updatefiles").glob("*.xml.gz")
    )
    assert len(paths) == 2
    expected = assert_folded_as_expected(Lake(str(tmp_path / "lake")), paths)
    versions = {pmid: v for pmid, (v, _, _) in expected.items() if v > 1}
    if release == "23":
        # both records of these PMIDs are in the baseline file: the higher Version wins
        assert versions == {36447600: 2, 36447759: 2}


def test_later_files_win_delete_and_restore(tmp_path: Path) -> None:
    """Two generated update files after the real 2026 pair: a record revised with fewer
    headings, deletions of a baseline and an update PMID, and a deleted PMID re-issued."""
    mirror = require_reference("pubmed", "mirror")
    base = mirror / "baseline" / "pubmed26n1334.xml.gz"
    update = mirror / "updatefiles" / "pubmed26n1335.xml.gz"
    base_records = list(read_xml(base).iter("PubmedArticle"))
    update_records = list(read_xml(update).iter("PubmedArticle"))

    def pmid_of(record: ET.Element) -> int:
        return int(record.findtext("MedlineCitation/PMID") or 0)

    revised = next(r for r in base_records if heading_rows(r) >= 2)
    heading_list = revised.find("MedlineCitation/MeshHeadingList")
    assert heading_list is not None
    for heading in list(heading_list)[1:]:
        heading_list.remove(heading)
    gone_base, gone_update, back = (
        pmid_of(base_records[1]),
        pmid_of(update_records[0]),
        pmid_of(base_records[2]),
    )
    assert len({pmid_of(revised), gone_base, gone_update, back}) == 4
    n1336 = write_update(
        tmp_path / "src" / "pubmed26n1336.xml.gz", [revised], [gone_base, gone_update, back]
    )
    n1337 = write_update(tmp_path / "src" / "pubmed26n1337.xml.gz", [base_records[2]], [])
    lake = Lake(str(tmp_path / "lake"))
    expected = assert_folded_as_expected(lake, [base, update, n1336, n1337])
    assert len(expected) == 60 - 2
    assert expected[pmid_of(revised)][1] == "pubmed26n1336"
    assert expected[back][1] == "pubmed26n1337"
    assert gone_base not in expected and gone_update not in expected
    mesh = corpus_frame(lake, "mesh_edges").filter(pl.col("pmid") == pmid_of(revised))
    assert mesh.height == heading_rows(revised)
    recount = recount_fold_polars(
        lake, ["pubmed26n1334", "pubmed26n1335", "pubmed26n1336", "pubmed26n1337"]
    )
    assert (recount["deleted"], recount["deletions_listed"]) == (2, 9)


def test_checks_fail_on_a_tampered_corpus(tmp_path: Path) -> None:
    mirror = require_reference("pubmed", "mirror")
    lake = Lake(str(tmp_path / "lake"))
    names = load_tables(
        lake,
        [
            mirror / "baseline" / "pubmed26n1334.xml.gz",
            mirror / "updatefiles" / "pubmed26n1335.xml.gz",
        ],
    )
    result = fold_release(lake, names)
    articles = corpus_frame(lake, "articles")
    # a deleted PMID slipped in, as if from the baseline file, plus a duplicate row
    intruder = articles.head(1).with_columns(
        pl.lit(41456105, pl.Int64).alias("pmid"), pl.lit("pubmed26n1334").alias("file")
    )
    write_corpus_table(
        lake, "articles", pl.concat([articles, articles.head(1), intruder]).to_arrow()
    )
    assert check_one_row_per_pmid(lake) == CheckOutcome(
        "one_row_per_pmid", False, "62 rows, 1 duplicated PMIDs"
    )
    assert check_no_deleted_pmid(lake, names) == CheckOutcome(
        "no_deleted_pmid", False, "1 deleted PMIDs present: [41456105]"
    )
    recount = check_recount(lake, names, result)
    assert (recount.name, recount.passed) == ("polars_recount", False)
    assert recount.details.startswith("survivors_digest: duckdb ")
    # drop the first article: its child rows now have no source
    write_corpus_table(lake, "articles", articles.slice(1).to_arrow())
    edges = check_edge_sources_in_articles(lake)
    assert (edges.name, edges.passed) == ("edge_sources_in_articles", False)
    assert edges.details.startswith("rows without a corpus article: {")


def test_missing_tables_fail_before_anything_is_written(tmp_path: Path) -> None:
    mirror = require_reference("pubmed", "mirror")
    lake = Lake(str(tmp_path / "lake"))
    names = load_tables(lake, [mirror / "baseline" / "pubmed26n1334.xml.gz"])
    fold_release(lake, names)
    before = {key: lake.read_bytes(key) for key in corpus_parts(lake, "articles")}
    with pytest.raises(FileNotFoundError, match=r"^pubmed26n1335: per-file table "):
        fold_release(lake, [*names, "pubmed26n1335"])
    assert {key: lake.read_bytes(key) for key in corpus_parts(lake, "articles")} == before
    with pytest.raises(ValueError, match="files listed twice: pubmed26n1334"):
        fold_release(lake, names * 2)


def test_each_check_names_exactly_what_a_corrupted_corpus_gets_wrong(tmp_path: Path) -> None:
    """The checks stream the child tables and hash numpy columns; on a corrupted corpus each
    still fails with the exact figures, worked out here from the frames."""
    mirror = require_reference("pubmed", "mirror")
    lake = Lake(str(tmp_path / "lake"))
    names = load_tables(
        lake,
        [
            mirror / "baseline" / "pubmed26n1334.xml.gz",
            mirror / "updatefiles" / "pubmed26n1335.xml.gz",
        ],
    )
    result = fold_release(lake, names)
    assert check_recount(lake, names, result).passed
    # DuckDB's own figures wrong: each wrong field named with both values
    wrong = replace(
        result,
        rows={**result.rows, "citations": 1348},
        deleted=1,
        dangling_citations=1347,
    )
    right = {**result.rows, "citations": 1349}
    assert check_recount(lake, names, wrong) == CheckOutcome(
        "polars_recount",
        False,
        f"rows: duckdb {wrong.rows} != polars {right}; deleted: duckdb 1 != polars 0; "
        "dangling_citations: duckdb 1347 != polars 1348",
    )
    # one article as if from the other file: the survivors' digest changes, nothing else
    articles = corpus_frame(lake, "articles")
    first_file = articles["file"][0]
    moved = articles.with_columns(
        pl.when(pl.int_range(pl.len()) == 0)
        .then(pl.lit(next(n for n in names if n != first_file)))
        .otherwise(pl.col("file"))
        .alias("file")
    )
    write_corpus_table(lake, "articles", moved.to_arrow())
    recount = check_recount(lake, names, result)
    assert not recount.passed and recount.details.startswith("survivors_digest: duckdb ")
    assert recount.details.count("!=") == 1
    # the first article dropped: its child rows are counted per table
    dropped = articles["pmid"][0]
    write_corpus_table(lake, "articles", articles.slice(1).to_arrow())
    orphans = {}
    for table in ["mesh_edges", "citations", "corrections", "chemicals", "pubtypes"]:
        col = "citing_pmid" if table == "citations" else "pmid"
        orphans[table] = corpus_frame(lake, table).filter(pl.col(col) == dropped).height
    orphans = {t: n for t, n in orphans.items() if n}
    assert orphans["mesh_edges"] > 0
    assert check_edge_sources_in_articles(lake) == CheckOutcome(
        "edge_sources_in_articles", False, f"rows without a corpus article: {orphans}"
    )
    assert check_one_row_per_pmid(lake) == CheckOutcome(
        "one_row_per_pmid", True, "59 rows, 0 duplicated PMIDs"
    )


def test_pmid_set_bitmap_and_sorted_fallback() -> None:
    assert PmidSet(np.array([5, 3, 3])).missing(np.array([3, 4, 5, -1, 99])) == 3
    # a PMID past the bitmap's bound: the sorted array answers the same
    assert PmidSet(np.array([5, 3, 10**12])).missing(np.array([3, 4, 10**12, -1])) == 2
    assert PmidSet(np.array([], dtype=np.int64)).missing(np.array([1, 2])) == 2
    assert PmidSet(np.array([5, 3])).contains(np.array([3, 4, -1, 99])).tolist() == [
        True,
        False,
        False,
        False,
    ]


def test_pmid_map_dense_and_sorted_fallback() -> None:
    pmids, values = np.array([7, 2, 5]), np.array([70, 20, 50])
    asked = np.array([2, 3, 7, -1, 99, 5])
    assert PmidMap(pmids, values).get(asked).tolist() == [20, 0, 70, 0, 0, 50]
    # inside the array's bounds only: one gather
    assert PmidMap(pmids, values).get(np.array([5, 2])).tolist() == [50, 20]
    # a PMID past the dense array's bound: a sorted array answers the same
    far = PmidMap(np.array([7, 2, 10**12]), values)
    assert far.get(np.array([2, 10**12, 3, -1])).tolist() == [20, 50, 0, 0]
    assert PmidMap(np.array([], dtype=np.int64), np.array([], dtype=np.int64)).get(
        np.array([1])
    ).tolist() == [0]


def test_a_range_s_survivors_by_pmid_and_by_binary_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A range's task keeps a row when its PMID is inside the range and its (PMID, version,
    file) is a survivor's: looked up in arrays indexed by PMID, or by binary search when the
    range is wider than DENSE_RANGE_PMIDS; the same rows either way."""
    from kg_platform.pubmed.fold import full

    survivors = full._Survivors(
        {
            "pmid": np.array([3, 10, 11, 12, 20, 40], dtype=np.int64),
            "version": np.array([1, 2, 1, 1, 1, 1], dtype=np.int32),
            "file_ord": np.array([0, 1, 1, 0, 1, 1], dtype=np.int32),
        }
    )
    # file 1's rows: 10 v2 and 11 v1 are its survivors; 10 v1 is an older version, 12 is
    # file 0's, 13 no survivor's, -1 a null PMID, 3 and 40 outside [10, 20]
    pmids = np.array([3, 10, 10, 11, 12, 13, 20, -1, 40], dtype=np.int64)
    versions = np.array([1, 1, 2, 1, 1, 1, 1, 1, 1], dtype=np.int32)
    kept = [False, False, True, True, False, False, True, False, False]
    inside = np.array([10, 11, 12, 20], dtype=np.int64)
    for dense in (True, False):
        monkeypatch.setattr(full, "DENSE_RANGE_PMIDS", 11 if dense else 10)
        ranged = survivors.within(10, 20)
        assert ranged.dense is dense
        assert ranged.kept(pmids, versions, 1).tolist() == kept
        # a file wholly inside the range
        assert ranged.kept(inside, np.ones(4, np.int32), 1).tolist() == [False, True, False, True]
        assert ranged.kept(inside, np.ones(4, np.int32), 0).tolist() == [False, False, True, False]
    # a range holding no survivor
    assert not survivors.within(21, 39).kept(pmids, versions, 1).any()
