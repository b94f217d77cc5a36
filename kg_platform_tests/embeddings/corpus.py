"""A small folded corpus in a temporary lake, made of real SciFact abstracts."""

from __future__ import annotations

import polars as pl

from kg_platform.storage.corpus import write_corpus_table
from kg_platform.storage.lake import Lake
from kg_platform_tests.embeddings.models import scifact_abstracts

FILES = ("pubmed26n0001", "pubmed26n0002", "pubmed26n1335")


def write_corpus(lake: Lake, n: int = 18, files: tuple[str, ...] = FILES) -> pl.DataFrame:
    """``n`` SciFact documents as corpus articles (PMID = doc_id), dealt round-robin to
    ``files``; every fourth one has no abstract, so it is not quotable."""
    docs = scifact_abstracts(n)
    rows = []
    for i, (doc_id, title, abstract) in enumerate(docs):
        quotable = i % 4 != 3
        rows.append(
            {
                "pmid": doc_id,
                "version": 1,
                "file": files[i % len(files)],
                "title": title,
                "abstract": abstract if quotable else None,
                "has_abstract": quotable,
                "year": 2020,
                "journal": "J Test",
                "language": "eng",
                "n_pubtypes": 1,
            }
        )
    frame = (
        pl.DataFrame(rows)
        .with_columns(
            pl.col("version").cast(pl.Int32),
            pl.col("year").cast(pl.Int32),
            pl.col("n_pubtypes").cast(pl.Int32),
        )
        .sort("pmid")
    )
    write_corpus_table(lake, "articles", frame.to_arrow())
    return frame


def write_tokens(lake: Lake, encoder, files: tuple[str, ...] | list[str] = FILES) -> None:
    """The token files of ``files`` for ``encoder``'s tokenizer (what embedding_tokens
    makes), each passing its checks."""
    from kg_platform.embeddings.shards import build_tokens

    spec = encoder.tokenizer_spec()
    for file in files:
        built = build_tokens(lake, spec, file)
        assert built.passed, built.outcomes
