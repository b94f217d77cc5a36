"""BM25 scores of queries against a list of documents (bm25s, Lucene's variant), the one
lexical ranker the evaluations share."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np


def bm25_scores(documents: Sequence[str], queries: Sequence[str]) -> Iterator[np.ndarray]:
    """For each query, in order, every document's BM25 score (k1 1.5, b 0.75, English stop
    words; float64, all zero when none of the query's tokens is in the documents)."""
    import bm25s  # here, not at the top: with numba installed it costs every process 0.7 s

    tokenized = bm25s.tokenize(list(documents), stopwords="en", show_progress=False)
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    retriever.index(tokenized, show_progress=False)
    vocabulary = tokenized.vocab
    query_tokens = bm25s.tokenize(
        list(queries), stopwords="en", return_ids=False, show_progress=False
    )
    for tokens in query_tokens:
        known = [token for token in tokens if token in vocabulary]
        if known:
            yield np.asarray(retriever.get_scores(known), dtype=np.float64)
        else:
            yield np.zeros(len(documents))
