import json

import numpy as np
import polars as pl
import pytest

from kg_platform.embeddings.feeder import FeederSettings
from kg_platform.embeddings.shards import (
    ShardError,
    ShardStatus,
    article_text,
    embed_shards,
    meta_key,
    pmids_key,
    read_quotable,
    vectors_key,
    verify_shard,
)
from kg_platform.storage.corpus import write_corpus_table
from kg_platform.storage.lake import Lake
from kg_platform_tests.embeddings.corpus import FILES, write_corpus, write_tokens
from kg_platform_tests.embeddings.models import packaged_encoder, tiny_encoder

SETTINGS = FeederSettings(batch_size=4, super_batch=5, chunk=2, workers=0)


def test_a_shard_holds_the_quotable_records_of_its_file_in_pmid_order(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    corpus = write_corpus(lake, n=8, files=("pubmed26n0001", "pubmed26n0002"))
    encoder = packaged_encoder()
    write_tokens(lake, encoder, ("pubmed26n0001", "pubmed26n0002"))
    run = embed_shards(lake, encoder, ["pubmed26n0001", "pubmed26n0002"], SETTINGS)
    assert [r.embedded for r in run.shards] == [True, True]
    for file in ("pubmed26n0001", "pubmed26n0002"):
        expected = corpus.filter(pl.col("file") == file, pl.col("has_abstract")).sort("pmid")
        pmids = lake.read_npy(pmids_key(file))
        vectors = lake.read_npy(vectors_key(file))
        assert pmids.tolist() == expected["pmid"].to_list()
        assert vectors.dtype == np.float16
        texts = [article_text(t, a) for t, a in expected.select("title", "abstract").iter_rows()]
        np.testing.assert_allclose(vectors.astype(np.float32), encoder.encode(texts), atol=2e-3)
    # 8 documents dealt alternately; documents 3 and 7 (both in the second file) lack an abstract
    assert [r.vectors for r in run.shards] == [4, 2]
    assert run.embedded == 6


def test_a_verified_shard_is_kept_and_a_half_written_or_damaged_one_is_redone(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    write_corpus(lake)
    encoder = tiny_encoder()
    write_tokens(lake, encoder)
    first = embed_shards(lake, encoder, list(FILES), SETTINGS)
    assert all(r.embedded for r in first.shards)
    sealed = {f: lake.read_bytes(meta_key(f)) for f in FILES}

    again = embed_shards(lake, encoder, list(FILES), SETTINGS)
    assert [(r.embedded, r.reason) for r in again.shards] == [(False, "verified")] * 3

    # a run killed after the vectors but before the seal; a vectors file damaged on disk
    lake.remove(meta_key(FILES[0]))
    damaged = lake.read_npy(vectors_key(FILES[1]), mmap=False)
    damaged[0, 0] += 1
    lake.write_npy(vectors_key(FILES[1]), damaged)
    assert (
        verify_shard(lake, FILES[0], lake.read_npy(pmids_key(FILES[0])), encoder.fingerprint).reason
        == "unsealed (partial write)"
    )
    resumed = embed_shards(lake, encoder, list(FILES), SETTINGS)
    assert [r.embedded for r in resumed.shards] == [True, True, False]
    assert lake.read_bytes(meta_key(FILES[2])) == sealed[FILES[2]]
    assert json.loads(lake.read_bytes(meta_key(FILES[1]))) == json.loads(sealed[FILES[1]])


def test_a_shard_is_redone_when_the_corpus_or_the_model_changes(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    corpus = write_corpus(lake, n=8, files=("pubmed26n0001", "pubmed26n0002"))
    tiny = tiny_encoder()
    write_tokens(lake, tiny, ("pubmed26n0001", "pubmed26n0002"))
    embed_shards(lake, tiny, ["pubmed26n0001", "pubmed26n0002"], SETTINGS)
    # an update file now holds the current version of one record of pubmed26n0001
    moved = int(corpus.filter(pl.col("file") == "pubmed26n0001", pl.col("has_abstract"))["pmid"][0])
    write_corpus_table(
        lake,
        "articles",
        corpus.with_columns(
            pl.when(pl.col("pmid") == moved)
            .then(pl.lit("pubmed26n0002"))
            .otherwise(pl.col("file"))
            .alias("file")
        ).to_arrow(),
    )
    # the token files still hold the old records: both files are refused, naming why
    stale = embed_shards(lake, tiny, ["pubmed26n0001", "pubmed26n0002"], SETTINGS)
    assert [r.embedded for r in stale.shards] == [False, False]
    assert [s.reason.split(": ")[0] for s in stale.unverified] == ["tokens refused"] * 2
    assert "pubmed26n0001.arrow: stale: its 4 PMIDs differ from the corpus's 3" in (
        stale.unverified[0].reason
    )
    write_tokens(lake, tiny, ("pubmed26n0001", "pubmed26n0002"))
    run = embed_shards(lake, tiny, ["pubmed26n0001", "pubmed26n0002"], SETTINGS)
    assert [r.embedded for r in run.shards] == [True, True]
    assert moved in lake.read_npy(pmids_key("pubmed26n0002")).tolist()
    assert moved not in lake.read_npy(pmids_key("pubmed26n0001")).tolist()
    status = verify_shard(
        lake, "pubmed26n0001", lake.read_npy(pmids_key("pubmed26n0001")), "another-model:0"
    )
    assert status.reason.startswith("made by another model")


def test_a_file_without_quotable_records_gets_an_empty_verified_shard(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    write_corpus(lake, n=4, files=("pubmed26n0001",))
    records = read_quotable(lake, ["pubmed26n0001", "pubmed26n0009"])
    assert len(records["pubmed26n0009"].pmids) == 0
    write_tokens(lake, tiny_encoder(), ("pubmed26n0009",))
    run = embed_shards(lake, tiny_encoder(), ["pubmed26n0009"], SETTINGS)
    assert run.shards[0].vectors == 0
    assert lake.read_npy(vectors_key("pubmed26n0009")).shape == (0, 32)


def test_a_missing_corpus_is_named(tmp_path):
    with pytest.raises(ShardError, match="corpus/articles: not in the lake"):
        embed_shards(Lake(str(tmp_path / "lake")), tiny_encoder(), ["pubmed26n0001"])


class _DamagingLake(Lake):
    """A lake whose storage changes one value of the second file's vectors on the way to
    disk: the bytes written are not the bytes sealed."""

    def write_npy(self, key: str, array: np.ndarray) -> int:
        if key == vectors_key(FILES[1]):
            array = array.copy()
            array[0, 0] += 1
        return super().write_npy(key, array)


def test_each_shard_is_read_back_and_verified_after_the_run(tmp_path):
    write_corpus(Lake(str(tmp_path / "lake")))
    write_tokens(Lake(str(tmp_path / "lake")), tiny_encoder())
    good = embed_shards(Lake(str(tmp_path / "lake")), tiny_encoder(), list(FILES), SETTINGS)
    assert [(s.file, s.done, s.reason) for s in good.verified] == [
        (f, True, "verified") for f in FILES
    ]
    assert good.unverified == ()

    write_corpus(Lake(str(tmp_path / "damaged")))
    write_tokens(Lake(str(tmp_path / "damaged")), tiny_encoder())
    damaged = embed_shards(
        _DamagingLake(str(tmp_path / "damaged")), tiny_encoder(), list(FILES), SETTINGS
    )
    assert [(s.file, s.reason) for s in damaged.unverified] == [
        (FILES[1], "vectors checksum mismatch")
    ]
    # the damaged shard was judged before its seal: never sealed, so no reader takes it
    lake = Lake(str(tmp_path / "damaged"))
    assert [lake.exists(meta_key(f)) for f in FILES] == [True, False, True]
    pmids = lake.read_npy(pmids_key(FILES[1]))
    shallow = verify_shard(lake, FILES[1], pmids, tiny_encoder().fingerprint, deep=False)
    assert shallow == ShardStatus(FILES[1], False, "unsealed (partial write)")
