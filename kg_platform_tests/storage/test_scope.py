"""Partition scopes route lake keys; transactions publish only what passed."""

from __future__ import annotations

import pytest

from kg_platform.storage.lake import Lake
from kg_platform.storage.scope import Scope


def test_routes_each_area_to_its_partition() -> None:
    scope = Scope(release="pubmed26", mesh_year="2024", report="pqal_dev400-1a2b3c4d/2024")
    assert scope.route("corpus/articles.parquet") == "corpus/pubmed26/articles.parquet"
    assert scope.route("mesh/terms.parquet") == "mesh/2024/terms.parquet"
    assert scope.route("graph/current.json") == "graph/pubmed26/2024/current.json"
    assert scope.route("graph/abc/pmids.npy") == "graph/pubmed26/2024/abc/pmids.npy"
    assert scope.route("grounding/surfaces.parquet") == "grounding/2024/surfaces.parquet"
    assert scope.route("embeddings/index/pmids.npy") == "embeddings/index/pubmed26/pmids.npy"
    assert scope.route("embeddings/tokens/tok-1-L256/f.parquet") == (
        "embeddings/tokens/pubmed26/tok-1-L256/f.parquet"
    )
    assert scope.route("embeddings/concepts/x.npy") == "embeddings/concepts/2024/x.npy"
    assert (
        scope.route("reports/grounding/report.md")
        == "reports/grounding/pqal_dev400-1a2b3c4d/2024/report.md"
    )
    # per-file areas are never routed; an empty scope routes nothing
    assert scope.route("tables/articles/pubmed26n0001.parquet") == (
        "tables/articles/pubmed26n0001.parquet"
    )
    assert Scope().route("corpus/articles.parquet") == "corpus/articles.parquet"


def test_a_key_outside_the_scope_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match=r"graph/current.json: belongs to a MeSH year"):
        Scope(release="pubmed26").route("graph/current.json")
    with pytest.raises(ValueError, match=r"release '../x': not usable"):
        Scope(release="../x")


def test_transaction_publishes_on_success_and_discards_on_error(tmp_path) -> None:
    lake = Lake(str(tmp_path)).scoped(release="pubmed26")
    lake.write_bytes("corpus/articles.parquet", b"good")
    with pytest.raises(RuntimeError), lake.transaction() as staged:
        staged.write_bytes("corpus/articles.parquet", b"bad")
        staged.write_bytes("corpus/citations.parquet", b"bad")
        # inside, the staged objects are what the checks read
        assert staged.read_bytes("corpus/articles.parquet") == b"bad"
        assert staged.list("corpus") == ["corpus/articles.parquet", "corpus/citations.parquet"]
        assert lake.read_bytes("corpus/articles.parquet") == b"good"
        raise RuntimeError("a blocking check failed")
    assert lake.read_bytes("corpus/articles.parquet") == b"good"
    assert lake.list("corpus") == ["corpus/articles.parquet"]
    assert list((tmp_path / ".staging").iterdir()) == []
    with lake.transaction() as staged:
        staged.write_bytes("corpus/articles.parquet", b"new")
    assert (tmp_path / "corpus" / "pubmed26" / "articles.parquet").read_bytes() == b"new"


def test_transaction_on_s3_is_one_copy_per_object(s3_lake) -> None:
    lake = s3_lake.scoped(mesh_year="2024")
    lake.write_bytes("mesh/terms.parquet", b"good")
    with pytest.raises(RuntimeError), lake.transaction() as staged:
        staged.write_bytes("mesh/terms.parquet", b"bad")
        raise RuntimeError("check failed")
    assert lake.read_bytes("mesh/terms.parquet") == b"good"
    with lake.transaction() as staged:
        staged.write_bytes("mesh/terms.parquet", b"new")
    assert lake.read_bytes("mesh/terms.parquet") == b"new"
    assert [p.rsplit("/", 1)[1] for p in lake.fs.ls(lake.physical("mesh/2024"))] == [
        "terms.parquet"
    ]
    assert not lake.fs.exists(lake.physical(".staging"))
