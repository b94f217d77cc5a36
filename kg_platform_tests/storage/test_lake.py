"""The lake and the catalog, locally and against a real S3 server (moto, on 127.0.0.1)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from kg_platform.storage.catalog import Catalog
from kg_platform.storage.corpus import write_corpus_table
from kg_platform.storage.lake import Lake

TABLE = pa.table({"pmid": pa.array([3, 1, 2], pa.int64()), "title": ["c", "a", "b"]})


@pytest.fixture(params=["local", "s3"])
def lake(request, tmp_path) -> Lake:
    if request.param == "local":
        return Lake(str(tmp_path / "lake"))
    return request.getfixturevalue("s3_lake")


def test_parquet_round_trip_and_listing(lake: Lake) -> None:
    lake.write_parquet("tables/articles/pubmed26n0002.parquet", TABLE)
    lake.write_parquet("tables/articles/pubmed26n0001.parquet", TABLE.slice(0, 1))
    assert lake.list("tables/articles", ".parquet") == [
        "tables/articles/pubmed26n0001.parquet",
        "tables/articles/pubmed26n0002.parquet",
    ]
    back = lake.read_parquet("tables/articles/pubmed26n0002.parquet")
    assert back.column("pmid").to_pylist() == [3, 1, 2]
    assert back.column("title").to_pylist() == ["c", "a", "b"]


def test_npy_round_trip(lake: Lake) -> None:
    lake.write_npy("graph/b1/pmids.npy", np.array([5, 7, 11], dtype=np.int32))
    arr = lake.read_npy("graph/b1/pmids.npy")
    assert arr.dtype == np.int32 and arr.tolist() == [5, 7, 11]


def test_failed_write_leaves_nothing_and_keeps_the_old_object(lake: Lake) -> None:
    lake.write_bytes("raw/x.bin", b"good")
    with pytest.raises(RuntimeError), lake.writer("raw/x.bin") as f:
        f.write(b"half")
        raise RuntimeError("killed mid-write")
    assert lake.read_bytes("raw/x.bin") == b"good"
    with pytest.raises(RuntimeError), lake.writer("raw/y.bin") as f:
        f.write(b"half")
        raise RuntimeError("killed mid-write")
    assert not lake.exists("raw/y.bin")
    assert lake.list("raw") == ["raw/x.bin"]


@pytest.mark.parametrize("key", ["../escape", "a/../../b", "", "a//b", "a\\b"])
def test_keys_cannot_leave_the_lake(tmp_path, key: str) -> None:
    with pytest.raises(ValueError, match="not a valid lake key"):
        Lake(str(tmp_path)).path(key)


def test_catalog_views_over_the_lake(lake: Lake, tmp_path) -> None:
    # the corpus view reads every part of the table: PMIDs in three buckets of 250,000
    spread = pa.table(
        {"pmid": pa.array([3, 250_001, 500_002], pa.int64()), "title": ["c", "a", "b"]}
    )
    assert write_corpus_table(lake, "articles", spread) == [0, 1, 2]
    lake.write_parquet("tables/articles/pubmed26n0001.parquet", TABLE.slice(1, 2))
    catalog = Catalog(lake, str(tmp_path / "catalog.duckdb"))
    con = catalog.connect()
    assert catalog.refresh_views(con) == ["file_articles", "articles"]
    assert con.execute("SELECT sum(pmid) FROM articles").fetchone() == (750_006,)
    assert con.execute("SELECT list(pmid ORDER BY pmid) FROM file_articles").fetchone() == ([1, 2],)
    con.close()


def test_a_removal_inside_a_transaction_happens_at_commit(lake: Lake) -> None:
    """Inside a transaction a removed object is absent to the view and still published to
    every other reader; the commit removes it after publishing the staged objects, and an
    exception leaves it where it was."""
    lake.write_bytes("corpus/articles/part-00001.parquet", b"old part")
    lake.write_bytes("corpus/articles.parquet", b"old layout")
    with pytest.raises(RuntimeError), lake.transaction() as staged:
        staged.remove("corpus/articles.parquet")
        assert not staged.exists("corpus/articles.parquet")
        raise RuntimeError("the fold failed")
    assert lake.read_bytes("corpus/articles.parquet") == b"old layout"
    with lake.transaction() as staged:
        staged.write_bytes("corpus/articles/part-00002.parquet", b"new part")
        staged.remove("corpus/articles.parquet")
        staged.remove("corpus/articles/part-00001.parquet")
        assert staged.list("corpus/articles") == ["corpus/articles/part-00002.parquet"]
        assert staged.sizes("corpus/articles") == {"part-00002.parquet": 8}
        assert not staged.exists("corpus/articles.parquet")
        assert lake.exists("corpus/articles.parquet")
        assert lake.list("corpus/articles") == ["corpus/articles/part-00001.parquet"]
    assert lake.list("corpus/articles") == ["corpus/articles/part-00002.parquet"]
    assert not lake.exists("corpus/articles.parquet")
