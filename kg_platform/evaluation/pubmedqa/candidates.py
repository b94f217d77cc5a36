"""Candidates for PubMedQA questions from the project's own lexical retrieval, in three
settings.

- The pool: the given articles (pmid, title + abstract) and the context of every question
  of every question file given, keyed by its PMID (a PubMedQA question id is its source
  PMID). A question's own context wins over a lake article of the same PMID: the lake's
  abstract still holds the conclusion, which states the answer.
- Ranking: BM25 (``bm25s``, Lucene, k1=1.5, b=0.75, lower-cased, English stop words), the
  settings of ``evaluation/allocation/hotpotqa.py``; ties broken by pool position.
- Settings: ``oracle`` (only the question's own abstract), ``retrieved`` (the top k of the
  pool, own abstract included) and ``leak_free`` (the top k with the source PMID removed).

Candidate texts are kept whole; truncation (characters) is applied when they are read, and
is part of the cache configuration (:func:`candidate_texts`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa

from kg_platform.answer.readers.base import LabelledQuestion, truncate
from kg_platform.evaluation.common.bm25 import bm25_scores
from kg_platform.evaluation.common.posteriors import SETTINGS

MAX_CANDIDATES = 16
TRUNCATIONS = (1100, 2000, 3000, 4000)


@dataclass(frozen=True)
class Candidate:
    """One candidate document of a question: its PMID, 1-based rank and full text."""

    pmid: int
    rank: int
    text: str


@dataclass(frozen=True)
class CandidatePool:
    """The documents retrieval ranks: ``pmids[i]`` has ``texts[i]``; PMIDs are unique."""

    pmids: tuple[int, ...]
    texts: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.pmids) != len(self.texts):
            raise ValueError(f"pool: {len(self.pmids)} PMIDs for {len(self.texts)} texts")
        if len(set(self.pmids)) != len(self.pmids):
            raise ValueError("pool: PMIDs are not unique")

    def __len__(self) -> int:
        return len(self.pmids)


@dataclass(frozen=True)
class CandidateConfig:
    """What fixes a candidate list and what the reader sees of it."""

    k: int = MAX_CANDIDATES
    truncation: int = 3000
    retriever: str = "bm25s-lucene-k1.5-b0.75-en"

    def config_hash(self) -> str:
        """sha256 prefix of the configuration's fields (sorted JSON)."""
        blob = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def source_pmid(question: LabelledQuestion) -> int:
    """The PMID a PubMedQA question was written from: its id."""
    try:
        return int(question.qid)
    except ValueError:
        raise ValueError(f"question {question.qid!r}: id is not a PMID") from None


def pool_from_questions(*question_sets: Sequence[LabelledQuestion]) -> CandidatePool:
    """Each question's own context under its PMID, first occurrence kept."""
    seen: dict[int, str] = {}
    for questions in question_sets:
        for q in questions:
            seen.setdefault(source_pmid(q), q.context)
    return CandidatePool(tuple(seen), tuple(seen.values()))


def pool_from_articles(articles: pa.Table) -> CandidatePool:
    """A pool from an articles table (``pmid``, ``title``, ``abstract``, as the lake's corpus
    holds it); text is ``title + " " + abstract``, nulls as ""; first row of a PMID kept."""
    missing = {"pmid", "title", "abstract"} - set(articles.column_names)
    if missing:
        raise ValueError(f"articles table: missing columns {sorted(missing)}")
    seen: dict[int, str] = {}
    for pmid, title, abstract in zip(
        articles["pmid"].to_pylist(),
        articles["title"].to_pylist(),
        articles["abstract"].to_pylist(),
        strict=True,
    ):
        seen.setdefault(int(pmid), f"{title or ''} {abstract or ''}".strip())
    return CandidatePool(tuple(seen), tuple(seen.values()))


def merge_pools(*pools: CandidatePool) -> CandidatePool:
    """One pool; the first pool that holds a PMID gives its text (put question pools first)."""
    seen: dict[int, str] = {}
    for pool in pools:
        for pmid, text in zip(pool.pmids, pool.texts, strict=True):
            seen.setdefault(pmid, text)
    return CandidatePool(tuple(seen), tuple(seen.values()))


def bm25_top(pool: CandidatePool, queries: Sequence[str], top: int) -> list[np.ndarray]:
    """For each query the pool positions of its ``top`` best documents, best first, ties by
    position."""
    positions = np.arange(len(pool))
    top = min(top, len(pool))
    rankings = []
    for scores in bm25_scores(pool.texts, queries):
        # everything tied with the top-th score competes, so ties break by position alone
        threshold = np.partition(scores, len(pool) - top)[len(pool) - top]
        contenders = positions[scores >= threshold]
        order = np.lexsort((contenders, -scores[contenders]))
        rankings.append(contenders[order][:top].astype(np.int64))
    return rankings


def build_candidates(
    questions: Sequence[LabelledQuestion], pool: CandidatePool, k: int = MAX_CANDIDATES
) -> dict[str, dict[str, tuple[Candidate, ...]]]:
    """``{setting: {question id: candidates best first}}`` for the three settings. The oracle
    candidate is the pool's text of the source PMID (the question's context when the pool
    lacks it)."""
    if k < 1:
        raise ValueError(f"k={k}: need at least one candidate")
    index = {pmid: i for i, pmid in enumerate(pool.pmids)}
    rankings = bm25_top(pool, [q.question for q in questions], k + 1)
    out: dict[str, dict[str, tuple[Candidate, ...]]] = {s: {} for s in SETTINGS}
    for q, ranking in zip(questions, rankings, strict=True):
        source = source_pmid(q)
        own = pool.texts[index[source]] if source in index else q.context
        out["oracle"][q.qid] = (Candidate(source, 1, own),)
        out["retrieved"][q.qid] = _ranked(pool, ranking[:k])
        out["leak_free"][q.qid] = _ranked(pool, [i for i in ranking if pool.pmids[i] != source][:k])
    return out


def _ranked(pool: CandidatePool, positions: Sequence[int]) -> tuple[Candidate, ...]:
    return tuple(
        Candidate(pool.pmids[i], rank, pool.texts[i]) for rank, i in enumerate(positions, 1)
    )


def candidate_texts(candidates: Sequence[Candidate], truncation: int) -> list[str]:
    """What a reader receives: each candidate's text cut to ``truncation`` characters."""
    return [truncate(c.text, truncation) for c in candidates]


def source_in_candidates(
    candidates: Mapping[str, Sequence[Candidate]], questions: Sequence[LabelledQuestion]
) -> int:
    """How many questions have their source PMID among their candidates."""
    return sum(any(c.pmid == source_pmid(q) for c in candidates.get(q.qid, ())) for q in questions)
