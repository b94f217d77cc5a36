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

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_tokenizer = None


@dataclass(frozen=True)
class TokenizerSpec:
    """A tokenizer as token files are keyed by: its serialised form (truncated at
    ``max_length``, no padding), the fingerprint of everything that decides its ids, and the
    numbers a reader checks a token file against.

    The fingerprint hashes the canonical JSON of the tokenizer without its truncation and
    padding settings: the vocabulary, the normaliser (lower-casing, accent stripping, Chinese
    characters), the pre-tokeniser, the WordPiece model and the post-processor ([CLS] ...
    [SEP]). Two models whose tokenizers agree on all of these share their token files when
    they also share ``max_length``: ``key`` names both."""

    json: str
    fingerprint: str
    max_length: int
    vocab_size: int
    pad_id: int

    @property
    def key(self) -> str:
        return f"{self.fingerprint}-L{self.max_length}"

    def load(self):
        return load_tokenizer(self.json)


def spec_from_json(tokenizer_json: str, max_length: int) -> TokenizerSpec:
    """The spec of a serialised fast tokenizer, truncating at ``max_length``."""
    from tokenizers import Tokenizer

    if max_length < 2:
        raise ValueError(f"max_length {max_length}: must be at least 2 ([CLS] and [SEP])")
    tokenizer = Tokenizer.from_str(tokenizer_json)
    tokenizer.enable_truncation(max_length)
    tokenizer.no_padding()
    canonical = json.loads(tokenizer.to_str())
    canonical.pop("truncation", None)
    canonical.pop("padding", None)
    digest = hashlib.sha256(
        json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    pad = tokenizer.token_to_id("[PAD]")
    return TokenizerSpec(
        json=tokenizer.to_str(),
        fingerprint=f"tok-{digest[:16]}",
        max_length=max_length,
        vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
        pad_id=0 if pad is None else int(pad),
    )


def spec_from_folder(folder: str | os.PathLike[str], max_length: int) -> TokenizerSpec:
    """The spec of a model folder's ``tokenizer.json`` (``tokenizers`` only: no torch, no
    transformers), the same tokenizer ``Encoder.tokenizer_json`` serialises."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        raise ValueError(f"{path}: no tokenizer.json; token files need a fast tokenizer")
    return spec_from_json(path.read_text(encoding="utf-8"), max_length)


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
