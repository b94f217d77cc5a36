from functools import lru_cache

import numpy as np
import pytest

from kg_platform.retrieval.dense import DenseIndex, DenseIndexError, SemanticRanker
from kg_platform_tests.embeddings.models import packaged_encoder, scifact_abstracts


def _random_index(n=1000, dim=16, seed=3):
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    pmids = np.sort(rng.choice(10_000_000, size=n, replace=False)).astype(np.int64)
    return pmids, vectors.astype(np.float16), rng


def _brute_force(pmids, vectors, query, k):
    scores = vectors.astype(np.float32) @ query
    order = np.lexsort((pmids, -scores))[:k]
    return pmids[order].tolist()


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_blockwise_search_is_exact(backend):
    pmids, vectors, rng = _random_index()
    index = DenseIndex(pmids, vectors, backend=backend, device="cpu")
    queries = rng.normal(size=(3, 16)).astype(np.float32)
    hits = index.search(queries, k=7, block_rows=64)
    for q, h in zip(queries, hits, strict=True):
        assert h.pmids.tolist() == _brute_force(pmids, vectors, q, 7)
        assert np.all(np.diff(h.scores) <= 0)


def test_search_restricted_to_candidates_ignores_unknown_pmids():
    pmids, vectors, rng = _random_index()
    index = DenseIndex(pmids, vectors, backend="numpy")
    chosen = rng.choice(len(pmids), size=50, replace=False)
    candidates = np.concatenate([pmids[chosen], [1, 99_999_999]])  # two without a vector
    query = rng.normal(size=16).astype(np.float32)
    hits = index.search(query, k=5, candidates=candidates, block_rows=16)[0]
    expected = _brute_force(pmids[np.sort(chosen)], vectors[np.sort(chosen)], query, 5)
    assert hits.pmids.tolist() == expected
    assert index.search(query, k=5, candidates=[1, 2])[0].pmids.tolist() == []


def test_ties_rank_the_lower_pmid_first_and_k_beyond_size_returns_all():
    vectors = np.tile(np.eye(4, dtype=np.float16)[:1], (3, 1))
    index = DenseIndex(np.array([30, 10, 20]), vectors, backend="numpy")
    hits = index.search(np.eye(4, dtype=np.float32)[0], k=10)[0]
    assert hits.pmids.tolist() == [10, 20, 30]
    assert hits.scores.tolist() == [1.0, 1.0, 1.0]


def test_bad_queries_and_indexes_are_named():
    pmids, vectors, _ = _random_index(n=10)
    index = DenseIndex(pmids, vectors, backend="numpy")
    with pytest.raises(DenseIndexError, match=r"query of shape \(1, 3\): expected \(n, 16\)"):
        index.search(np.ones(3))
    with pytest.raises(DenseIndexError, match="k=0"):
        index.search(np.ones(16), k=0)
    with pytest.raises(DenseIndexError, match="3 PMIDs for vectors of shape"):
        DenseIndex(pmids[:3], vectors)


@lru_cache(maxsize=1)
def _scifact_index():
    encoder = packaged_encoder()
    docs = scifact_abstracts(16)
    vectors = encoder.encode([f"{t} {a}" for _, t, a in docs]).astype(np.float16)
    pmids = np.array([d[0] for d in docs], dtype=np.int64)
    order = np.argsort(pmids)
    return encoder, docs, DenseIndex(pmids[order], vectors[order], backend="numpy")


def test_a_sentence_from_an_abstract_finds_that_abstract_first():
    encoder, docs, index = _scifact_index()
    for doc_id, _, abstract in docs[:4]:
        words = abstract.split()
        query = " ".join(words[len(words) // 3 : len(words) // 3 + 25])
        hits = index.search(encoder.encode([query]), k=3)[0]
        assert hits.pmids[0] == doc_id


def test_the_semantic_ranker_scores_each_question_afresh():
    encoder, docs, index = _scifact_index()
    ranker = SemanticRanker(encoder, index)
    candidates = np.array([d[0] for d in docs[:10]] + [docs[0][0], 1], dtype=np.int64)
    q1 = "Does vitamin D supplementation reduce fractures?"
    q2 = docs[3][1]  # the title of one candidate
    first = ranker.score(q1, candidates)
    second = ranker.score(q2, candidates)
    again = ranker.score(q1, candidates)
    for question, result in ((q1, first), (q2, second)):
        query = encoder.encode([question])[0]
        rows, _ = index.rows_of(candidates[:-1])
        direct = index.vectors[rows].astype(np.float32) @ query
        np.testing.assert_allclose(result.scores[:-1], direct, atol=1e-6)
        distinct = np.sort(direct[:10])[::-1]
        assert result.top1 == pytest.approx(distinct[0], abs=1e-6)
        assert result.mean_top8 == pytest.approx(distinct[:8].mean(), abs=1e-6)
    assert not np.allclose(first.scores[:-1], second.scores[:-1])
    np.testing.assert_array_equal(again.scores, first.scores)
    assert np.isnan(second.scores[-1]) and second.embedded == 11 and second.candidates == 12
    assert second.order()[0] == 3 and second.order()[-1] == 11  # its own title; PMID 1 last
    assert second.top1 > first.top1


def test_a_damaged_published_index_is_named_on_open(tmp_path):
    import json

    from kg_platform.assets.integrity import published_problem
    from kg_platform.embeddings.index import INDEX_MANIFEST, INDEX_PMIDS, INDEX_VECTORS
    from kg_platform.storage.lake import Lake

    root = Lake(str(tmp_path / "lake"))
    lake = root.scoped(release="pubmed26")
    pmids, vectors, _ = _random_index(n=10)
    lake.write_npy(INDEX_PMIDS, pmids)
    lake.write_npy(INDEX_VECTORS, vectors)
    lake.write_bytes(INDEX_MANIFEST, json.dumps({"vectors": 10, "dim": 16}).encode())
    assert len(DenseIndex.open(lake)) == 10
    assert published_problem(root, "embedding_index", "pubmed26") is None
    path = lake.path(INDEX_VECTORS)
    with open(path, "rb") as f:
        good = f.read()
    with open(path, "wb") as f:
        f.write(good[: len(good) // 2])
    damage = (
        f"{path}: {len(good) // 2} bytes, but the index manifest's 10 rows x 16 give 320 bytes "
        "of data; rebuild embedding_index"
    )
    with pytest.raises(DenseIndexError) as opened:
        DenseIndex.open(lake)
    assert str(opened.value) == damage
    assert published_problem(root, "embedding_index", "pubmed26") == damage
