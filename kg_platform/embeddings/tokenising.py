"""Tokenisation that runs inside the feeder's worker processes.

Kept apart from the feeder so a spawned worker imports only ``tokenizers`` and numpy, not
torch or the model: workers start in a fraction of a second and hold a few MB each.

Why ``TOKENIZERS_PARALLELISM=false`` here: the Rust tokenizer keeps a thread pool. A process
forked after the parent has used that pool inherits its locks but not its threads, and blocks
forever on the first parallel call with no error; the reference build sat with fourteen such
processes at 0% GPU. The feeder therefore starts workers with ``spawn`` (a fresh interpreter,
no inherited locks, no inherited CUDA state) and, since each worker is already one unit of
parallelism, also turns the pool off inside the worker so the workers do not oversubscribe
the cores.
"""

from __future__ import annotations

import os

import numpy as np

_tokenizer = None


def init_worker(tokenizer_json: str) -> None:
    """Pool initializer: build the tokenizer once per worker process."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    global _tokenizer
    _tokenizer = load_tokenizer(tokenizer_json)


def load_tokenizer(tokenizer_json: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_str(tokenizer_json)


def tokenise_with(tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of ``texts`` as one flat int32 array and per-text lengths (cheap to pickle)."""
    encodings = tokenizer.encode_batch(texts)
    lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int32, count=len(encodings))
    flat = np.fromiter(
        (i for e in encodings for i in e.ids), dtype=np.int32, count=int(lengths.sum())
    )
    return flat, lengths


def tokenise_chunk(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Worker task: tokenise one chunk with the tokenizer built by ``init_worker``."""
    if _tokenizer is None:
        raise RuntimeError("tokenise_chunk called in a process without init_worker")
    return tokenise_with(_tokenizer, texts)
