from __future__ import annotations

import pyarrow as pa
import pytest

from kg_platform.evaluation.pubmedqa.candidates import (
    Candidate,
    CandidateConfig,
    CandidatePool,
    build_candidates,
    candidate_texts,
    merge_pools,
    pool_from_articles,
    pool_from_questions,
    source_in_candidates,
)
from kg_platform_tests.evaluation.pubmedqa.fixtures import dev_questions


@pytest.fixture(scope="module")
def ten():
    questions = dev_questions()
    pool = pool_from_questions(questions)
    return questions[:10], pool, build_candidates(questions[:10], pool)


def test_pool_holds_every_dev_context(ten):
    _, pool, _ = ten
    assert len(pool) == 400


def test_oracle_is_the_source_alone(ten):
    questions, pool, candidates = ten
    for q in questions:
        (only,) = candidates["oracle"][q.qid]
        assert (only.pmid, only.rank, only.text) == (int(q.qid), 1, q.context)


def test_retrieved_and_leak_free_exact(ten):
    questions, _, candidates = ten
    assert [q.qid for q in questions][:3] == ["2503176", "7497757", "8017535"]
    assert {len(c) for c in candidates["retrieved"].values()} == {16}
    assert {len(c) for c in candidates["leak_free"].values()} == {16}
    assert source_in_candidates(candidates["retrieved"], questions) == 10
    assert source_in_candidates(candidates["leak_free"], questions) == 0
    source_ranks = [
        next(c.rank for c in candidates["retrieved"][q.qid] if c.pmid == int(q.qid))
        for q in questions
    ]
    assert source_ranks == [1, 1, 1, 1, 4, 1, 1, 1, 1, 1]
    # leak-free is retrieved with the source removed and the next document moved up
    for q in questions:
        rest = [c.pmid for c in candidates["retrieved"][q.qid] if c.pmid != int(q.qid)]
        assert [c.pmid for c in candidates["leak_free"][q.qid]][: len(rest)] == rest


def test_question_context_wins_over_lake_article(ten):
    questions, pool, _ = ten
    articles = pa.table(
        {
            "pmid": [int(questions[0].qid), 1],
            "title": ["t", "other"],
            "abstract": ["with the conclusion", None],
        }
    )
    merged = merge_pools(pool, pool_from_articles(articles))
    assert len(merged) == 401
    assert merged.texts[merged.pmids.index(int(questions[0].qid))] == questions[0].context
    assert merged.texts[-1] == "other"


def test_truncation_and_config_hash():
    pool = CandidatePool((5,), ("abcdef",))
    assert pool.pmids == (5,)
    assert candidate_texts([Candidate(5, 1, "abcdef")], 3) == ["abc"]
    assert candidate_texts([Candidate(5, 1, "abcdef")], 0) == ["abcdef"]
    assert CandidateConfig(truncation=1100).config_hash() != CandidateConfig().config_hash()
    assert CandidateConfig().config_hash() == CandidateConfig().config_hash()


def test_pool_rejects_duplicate_pmids():
    with pytest.raises(ValueError, match="not unique"):
        CandidatePool((1, 1), ("a", "b"))
