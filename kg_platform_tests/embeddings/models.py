"""Models and texts shared by the embedding and retrieval tests.

The packaged all-MiniLM-L6-v2 is loaded once per test session (it takes seconds); the tiny
BERT is built here from a vocabulary we write, so "any local Hugging Face path" is tested
without downloading anything.
"""

from __future__ import annotations

import ast
import csv
import gzip
from functools import lru_cache
from pathlib import Path

from kg_platform.embeddings.encoder import Encoder
from kg_platform_tests.conftest import require_reference

# A short sequence limit keeps CPU tests fast; the model and the code path are unchanged.
TEST_MAX_LENGTH = 96


@lru_cache(maxsize=1)
def packaged_encoder() -> Encoder:
    return Encoder(device="cpu", batch_size=16, max_length=TEST_MAX_LENGTH)


def scifact_abstracts(n: int) -> list[tuple[int, str, str]]:
    """The first ``n`` SciFact corpus documents as (doc_id, title, abstract)."""
    path = require_reference("scifact", "corpus.csv.gz")
    out = []
    with gzip.open(path, "rt", newline="") as f:
        for row in csv.DictReader(f):
            sentences = ast.literal_eval(row["abstract"])
            out.append((int(row["doc_id"]), row["title"], " ".join(sentences)))
            if len(out) == n:
                break
    return out


TINY_VOCAB = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    "aspirin", "heart", "attack", "risk", "cancer", "cell", "cells", "gene", "protein",
    "the", "of", "and", "in", "a", "is", "does", "reduce", "increase", "patients", "with",
    "##s", "##ing", "##ed", "tumour", "tumor", "blood", "pressure", "trial", "study", ".", ",", "?",
]  # fmt: skip


def build_tiny_bert(
    folder: Path, max_position_embeddings: int = 64, vocab: list[str] = TINY_VOCAB, seed: int = 7
) -> Path:
    """A 2-layer, 32-wide BERT (seeded) with a WordPiece tokenizer over ``vocab``, saved as a
    plain HF folder."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=max_position_embeddings,
    )
    torch.manual_seed(seed)
    BertModel(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


@lru_cache(maxsize=1)
def tiny_encoder() -> Encoder:
    """The tiny BERT, built once per session in a temporary folder (fast, for plumbing tests)."""
    import tempfile

    folder = build_tiny_bert(Path(tempfile.mkdtemp(prefix="kg-tiny-bert-")) / "tiny-bert")
    return Encoder(str(folder), device="cpu", batch_size=8)
