import numpy as np
import polars as pl
import pytest

from kg_platform.embeddings.feeder import FeederSettings
from kg_platform.embeddings.index import (
    INDEX_PMIDS,
    INDEX_VECTORS,
    IndexBuildError,
    build_index,
    check_norms,
    check_sample_against_shards,
    index_checks,
    index_hash_problems,
)
from kg_platform.embeddings.shards import (
    embed_shards,
    meta_key,
    pmids_key,
    vectors_key,
)
from kg_platform.storage.corpus import write_corpus_table
from kg_platform.storage.lake import Lake
from kg_platform_tests.embeddings.corpus import FILES, write_corpus, write_tokens
from kg_platform_tests.embeddings.models import tiny_encoder

SETTINGS = FeederSettings(batch_size=4, super_batch=8, chunk=4, workers=0)


def _lake_with_shards(tmp_path, files=FILES):
    lake = Lake(str(tmp_path / "lake"))
    corpus = write_corpus(lake, n=24)
    write_tokens(lake, tiny_encoder(), files)
    embed_shards(lake, tiny_encoder(), list(files), SETTINGS)
    return lake, corpus


@pytest.mark.parametrize("block_rows,stride", [(4, 2), (1 << 20, 1024)])
def test_the_index_is_every_shard_row_sorted_by_pmid(tmp_path, block_rows, stride):
    lake, corpus = _lake_with_shards(tmp_path)
    build = build_index(lake, tiny_encoder().fingerprint, block_rows=block_rows, stride=stride)
    pmids = lake.read_npy(INDEX_PMIDS)
    vectors = lake.read_npy(INDEX_VECTORS)
    all_pmids = np.concatenate([lake.read_npy(pmids_key(f)) for f in FILES])
    all_vectors = np.concatenate([lake.read_npy(vectors_key(f)) for f in FILES])
    order = np.argsort(all_pmids)
    assert pmids.tolist() == all_pmids[order].tolist()
    assert np.array_equal(vectors, all_vectors[order])
    assert pmids.tolist() == corpus.filter(pl.col("has_abstract"))["pmid"].sort().to_list()
    assert (build.vectors, build.quotable, build.gap, build.shards) == (18, 18, 0, 3)


def test_a_gap_is_explained_by_the_files_without_a_shard(tmp_path):
    lake, corpus = _lake_with_shards(tmp_path, files=FILES[:2])
    build = build_index(lake, tiny_encoder().fingerprint)
    in_third = corpus.filter(pl.col("file") == FILES[2], pl.col("has_abstract")).height
    assert build.missing_files == (FILES[2],)
    assert build.missing_reasons == {FILES[2]: "missing"}
    assert build.gap == build.missing_vectors == in_third == 6
    assert build.gap_explained


def test_duplicate_pmids_across_shards_stop_the_build(tmp_path):
    lake, corpus = _lake_with_shards(tmp_path)
    # a corpus that (wrongly) keeps one PMID current in two files
    twin = corpus.filter(pl.col("file") == FILES[0], pl.col("has_abstract")).head(1)
    broken = pl.concat([corpus, twin.with_columns(pl.lit(FILES[1]).alias("file"))]).sort("pmid")
    write_corpus_table(lake, "articles", broken.to_arrow())
    write_tokens(lake, tiny_encoder())
    embed_shards(lake, tiny_encoder(), list(FILES), SETTINGS)
    with pytest.raises(
        IndexBuildError, match=rf"PMIDs in more than one shard, e.g. \[{twin['pmid'][0]}\]"
    ):
        build_index(lake, tiny_encoder().fingerprint, block_rows=4, stride=2)


def test_no_shards_for_the_model_is_a_clear_error(tmp_path):
    lake, _ = _lake_with_shards(tmp_path)
    with pytest.raises(IndexBuildError, match="no verified shard for model other:0"):
        build_index(lake, "other:0")


def test_sample_and_norm_checks_pass_on_a_good_index_and_catch_a_changed_row(tmp_path):
    lake, _ = _lake_with_shards(tmp_path)
    build_index(lake, tiny_encoder().fingerprint)
    sample = check_sample_against_shards(lake, sample=64)
    assert (sample.checked, sample.mismatches, sample.passed) == (18, (), True)
    norms = check_norms(lake)
    assert norms.checked == 18 and norms.passed()
    assert abs(norms.max_norm - 1) < 2e-3

    vectors = lake.read_npy(INDEX_VECTORS, mmap=False)
    pmids = lake.read_npy(INDEX_PMIDS)
    vectors[5] *= 2
    lake.write_npy(INDEX_VECTORS, vectors)
    assert check_sample_against_shards(lake, sample=64).mismatches == (int(pmids[5]),)
    assert not check_norms(lake).passed()


def test_an_empty_index_passes_neither_the_sample_nor_the_norm_check(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    write_corpus(lake, n=24)
    lake.write_npy(INDEX_PMIDS, np.zeros(0, dtype=np.int64))
    lake.write_npy(INDEX_VECTORS, np.zeros((0, 32), dtype=np.float16))
    sample = check_sample_against_shards(lake, sample=64)
    assert (sample.checked, sample.mismatches, sample.passed) == (0, (), False)
    norms = check_norms(lake)
    assert norms.checked == 0 and not norms.passed()


def test_the_index_is_judged_staged_and_a_discarded_build_leaves_the_published_one(tmp_path):
    lake, _ = _lake_with_shards(tmp_path)
    fingerprint = tiny_encoder().fingerprint
    with lake.transaction() as staged:
        build = build_index(staged, fingerprint)
        assert not lake.exists(INDEX_VECTORS)  # staged, not published
        outcomes = index_checks(staged, build)
    assert [(o.name, o.passed) for o in outcomes] == [
        ("vector_count_equals_quotable", True),
        ("sample_rows_match_shards", True),
        ("norms_about_one", True),
        ("files_match_manifest", True),
    ]
    assert (outcomes[0].metadata["vectors"], outcomes[1].metadata["checked"]) == (18, 18)
    published = lake.read_npy(INDEX_VECTORS, mmap=False)

    # a second build over one shard fewer, discarded (as a failed blocking check would)
    lake.remove(meta_key(FILES[2]))
    with pytest.raises(RuntimeError, match="discarded"), lake.transaction() as staged:
        assert build_index(staged, fingerprint).vectors == 12
        assert staged.read_npy(INDEX_VECTORS).shape[0] == 12
        raise RuntimeError("discarded")
    assert np.array_equal(lake.read_npy(INDEX_VECTORS), published)
    assert index_hash_problems(lake) == []
