"""Per-file embedding shards: the quotable records whose current version lives in a file.

A shard is three lake objects, written in this order:
``embeddings/shards/<file>.npy`` (float16, one unit vector per record, PMID order),
``<file>.pmids.npy`` (int64, ascending) and ``<file>.meta.json`` (count, model fingerprint,
checksums). Each write is atomic; the meta file is written last and is the shard's seal, so a
run killed between the writes leaves a shard that fails verification and is redone, while a
sealed shard that still matches the corpus and the model is skipped.

The vectors are made from the file's token file (``tokens``; ``build_tokens`` makes it on a
CPU worker, the ``embedding_tokens`` asset), never from the texts: the GPU step reads ids,
sorts them by length across files and feeds batches of a few fixed widths
(``feeder.embed_tokens``).
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from kg_platform.checks import CheckOutcome
from kg_platform.embeddings.encoder import Encoder
from kg_platform.embeddings.feeder import FeederSettings, FeederStats, embed_tokens
from kg_platform.embeddings.tokenising import TokenizerSpec
from kg_platform.embeddings.tokens import (
    TokenFile,
    TokenFileError,
    make_token_file,
    read_tokens,
    to_bytes,
    token_checks,
    tokens_key,
)
from kg_platform.storage.corpus import corpus_folder, corpus_parts
from kg_platform.storage.digest import array_sha256
from kg_platform.storage.embeddings import SHARDS
from kg_platform.storage.lake import Lake

CORPUS_ARTICLES = corpus_folder("articles")
SUPER_BATCH = 65_536


class ShardError(ValueError):
    """A corpus or shard that cannot be embedded or read, named with what is wrong."""


def vectors_key(file: str) -> str:
    return f"{SHARDS}/{file}.npy"


def pmids_key(file: str) -> str:
    return f"{SHARDS}/{file}.pmids.npy"


def meta_key(file: str) -> str:
    return f"{SHARDS}/{file}.meta.json"


def article_text(title: str | None, abstract: str | None) -> str:
    """What gets embedded for one article: its title, then its abstract."""
    return " ".join(part.strip() for part in (title, abstract) if part and part.strip())


@dataclass(frozen=True)
class QuotableRecords:
    """The quotable records (has an abstract) whose current version lives in ``file``."""

    file: str
    pmids: np.ndarray  # int64, ascending
    texts: list[str]


def read_quotable(lake: Lake, files: Sequence[str]) -> dict[str, QuotableRecords]:
    """Quotable records of each file from the folded corpus, PMID-sorted; a file with none
    gets an empty entry (its shard is empty, not missing)."""
    frame = _read_corpus(lake, ["pmid", "file", "title", "abstract"], [("file", "in", list(files))])
    records: dict[str, QuotableRecords] = {}
    for file in files:
        part = frame.filter(pl.col("file") == file).sort("pmid")
        texts = [article_text(t, a) for t, a in part.select("title", "abstract").iter_rows()]
        records[file] = QuotableRecords(file, part["pmid"].to_numpy().astype(np.int64), texts)
    return records


def quotable_pmids(lake: Lake, files: Sequence[str]) -> dict[str, np.ndarray]:
    """The quotable PMIDs of each of ``files`` (ascending; empty for a file with none),
    read without the texts."""
    frame = _read_corpus(lake, ["pmid", "file"], [("file", "in", list(files))]).sort("pmid")
    return {
        file: frame.filter(pl.col("file") == file)["pmid"].to_numpy().astype(np.int64)
        for file in files
    }


def quotable_pmids_by_file(lake: Lake) -> dict[str, np.ndarray]:
    """Every quotable PMID of the corpus grouped by the file holding its current version."""
    frame = _read_corpus(lake, ["pmid", "file"], []).sort("file", "pmid")
    out: dict[str, np.ndarray] = {}
    for (file,), part in frame.group_by("file", maintain_order=True):
        out[str(file)] = part["pmid"].to_numpy().astype(np.int64)
    return out


def _read_corpus(lake: Lake, columns: list[str], filters: list[tuple]) -> pl.DataFrame:
    parts = corpus_parts(lake, "articles")
    if not parts:
        raise ShardError(
            f"{CORPUS_ARTICLES}: not in the lake at {lake.root}; materialise `corpus` first"
        )
    try:
        table = pq.read_table(
            [lake.path(key) for key in parts],
            columns=columns,
            filters=[*filters, ("has_abstract", "==", True)],
            filesystem=None if lake.is_local else lake.fs,
        )
    except Exception as exc:  # pyarrow raises several kinds; name the input either way
        raise ShardError(f"{CORPUS_ARTICLES}: cannot read {columns}: {exc}") from exc
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


@dataclass(frozen=True)
class ShardStatus:
    file: str
    done: bool
    reason: str  # "verified" or what is wrong with the shard


def verify_shard(
    lake: Lake,
    file: str,
    expected_pmids: np.ndarray,
    fingerprint: str,
    dim: int | None = None,
    deep: bool = True,
    seal: dict | None = None,
) -> ShardStatus:
    """Whether a sealed shard exists for ``file`` that matches the corpus and the model.
    ``deep`` also re-hashes the vectors, catching a damaged file. ``seal``: the meta to
    verify the arrays against before it is written (default: the lake's)."""
    if seal is None and not lake.exists(meta_key(file)):
        present = [k for k in (vectors_key(file), pmids_key(file)) if lake.exists(k)]
        return ShardStatus(file, False, "unsealed (partial write)" if present else "missing")
    try:
        meta = seal or json.loads(lake.read_bytes(meta_key(file)))
        vectors = lake.read_npy(vectors_key(file))
        pmids = lake.read_npy(pmids_key(file), mmap=False)
    except Exception as exc:  # a damaged file is a shard to redo, not a crash
        return ShardStatus(file, False, f"unreadable: {exc}")
    if meta.get("fingerprint") != fingerprint:
        return ShardStatus(file, False, f"made by another model ({meta.get('fingerprint')})")
    if vectors.dtype != np.float16 or vectors.ndim != 2:
        return ShardStatus(file, False, f"vectors are {vectors.dtype}{vectors.shape}")
    if dim is not None and vectors.shape[1] != dim:
        return ShardStatus(file, False, f"vectors have dim {vectors.shape[1]}, model {dim}")
    if vectors.shape[0] != len(pmids) or meta.get("count") != len(pmids):
        return ShardStatus(file, False, "vector, PMID and sealed counts disagree")
    if not np.array_equal(pmids, expected_pmids):
        return ShardStatus(file, False, "stale: PMIDs differ from the corpus")
    if deep and meta.get("vectors_sha256") != array_sha256(vectors):
        return ShardStatus(file, False, "vectors checksum mismatch")
    return ShardStatus(file, True, "verified")


def shard_check(status: ShardStatus) -> CheckOutcome:
    """A file's verified shard as its one_vector_per_quotable_record outcome
    (contracts.SHARD_CHECKS)."""
    return CheckOutcome("one_vector_per_quotable_record", status.done, status.reason)


def write_shard(
    lake: Lake, file: str, pmids: np.ndarray, vectors: np.ndarray, fingerprint: str
) -> ShardStatus:
    """Write the shard's arrays, read them back and verify them against the seal about to
    be written, and seal (publish) the shard only when they verify: a shard written wrong
    stays unsealed, so no reader takes it (the one_vector_per_quotable_record check)."""
    if vectors.shape[0] != len(pmids) or vectors.dtype != np.float16:
        raise ShardError(f"{file}: {vectors.dtype}{vectors.shape} vectors for {len(pmids)} PMIDs")
    lake.remove(meta_key(file))  # unseal first: a rewrite interrupted midway must not verify
    lake.write_npy(vectors_key(file), vectors)
    lake.write_npy(pmids_key(file), pmids.astype(np.int64))
    meta = {
        "file": file,
        "count": len(pmids),
        "dim": int(vectors.shape[1]),
        "fingerprint": fingerprint,
        "vectors_sha256": array_sha256(vectors),
    }
    status = verify_shard(lake, file, pmids, fingerprint, seal=meta)
    if status.done:
        lake.write_bytes(meta_key(file), json.dumps(meta, indent=1).encode())
    return status


@dataclass(frozen=True)
class ShardResult:
    file: str
    vectors: int
    embedded: bool  # False: a verified shard was kept
    reason: str


@dataclass(frozen=True)
class ShardRun:
    shards: tuple[ShardResult, ...]
    seconds: float
    texts_per_s: float
    padding_overhead: float
    # every file's shard read back from the lake and verified against the corpus (a kept
    # shard before the run, a written one before its seal): what the asset's check reports
    verified: tuple[ShardStatus, ...]

    @property
    def embedded(self) -> int:
        return sum(r.vectors for r in self.shards if r.embedded)

    @property
    def unverified(self) -> tuple[ShardStatus, ...]:
        return tuple(status for status in self.verified if not status.done)


def embed_shards(
    lake: Lake,
    encoder: Encoder,
    files: Sequence[str],
    settings: FeederSettings | None = None,
) -> ShardRun:
    """Embed the quotable records of ``files`` into shards from their token files (made by
    ``embedding_tokens`` for the encoder's tokenizer; no text is read), skipping verified
    shards. The files go through one stream, so super-batches span file boundaries. A file
    whose token file is missing, made by another tokenizer, damaged or stale fails alone
    (its status names why)."""
    started = time.perf_counter()
    # the encoder's batch size; super-batches of 65,536 texts sorted together (a 16-file run
    # holds some 300,000 quotable records, so widths stay close to each batch's longest)
    settings = settings or FeederSettings(batch_size=encoder.batch_size, super_batch=SUPER_BATCH)
    spec = encoder.tokenizer_spec()
    expected = quotable_pmids(lake, files)
    results: dict[str, ShardResult] = {}
    verified: dict[str, ShardStatus] = {}
    todo: list[str] = []
    for file in files:
        status = verify_shard(lake, file, expected[file], encoder.fingerprint, encoder.dim)
        if status.done:
            results[file] = ShardResult(file, len(expected[file]), False, status.reason)
            verified[file] = status
        else:
            todo.append(file)

    def token_files() -> Iterator[TokenFile]:
        for file in todo:
            try:
                tokens = read_tokens(lake, spec, file)
                if not np.array_equal(tokens.pmids, expected[file]):
                    raise TokenFileError(
                        f"{lake.path(tokens_key(spec.key, file))}: stale: its {len(tokens)} "
                        f"PMIDs differ from the corpus's {len(expected[file])} quotable ones; "
                        f"materialise embedding_tokens[{file}] again"
                    )
            except TokenFileError as exc:
                verified[file] = ShardStatus(file, False, f"tokens refused: {exc}")
                results[file] = ShardResult(file, 0, False, verified[file].reason)
                continue
            yield tokens

    stats = FeederStats()
    for tokens, vectors in _embed_by_file(encoder, token_files(), settings, stats):
        file = tokens.file
        verified[file] = write_shard(lake, file, tokens.pmids, vectors, encoder.fingerprint)
        results[file] = ShardResult(file, len(tokens), True, "embedded")
    return ShardRun(
        shards=tuple(results[f] for f in files),
        seconds=time.perf_counter() - started,
        texts_per_s=stats.texts / stats.seconds if stats.seconds else 0.0,
        padding_overhead=stats.padding_overhead,
        verified=tuple(verified[f] for f in files),
    )


def _embed_by_file(
    encoder: Encoder,
    token_files: Iterator[TokenFile],
    settings: FeederSettings | None,
    stats: FeederStats,
) -> Iterator[tuple[TokenFile, np.ndarray]]:
    """Feed every file's ids as one stream; hand back each file as soon as it is whole."""
    pending: deque[TokenFile] = deque()  # read, vectors not complete, in stream order

    def parts() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for tokens in token_files:
            pending.append(tokens)
            yield tokens.ids, tokens.lengths

    def empties() -> Iterator[tuple[TokenFile, np.ndarray]]:
        # files without quotable records: an empty shard, in their place in the stream
        while pending and len(pending[0]) == 0:
            yield pending.popleft(), np.zeros((0, encoder.dim), dtype=np.float16)

    buffer: np.ndarray | None = None
    filled = 0
    for block in embed_tokens(encoder, parts(), settings, stats):
        taken = 0
        while taken < len(block):
            yield from empties()
            tokens = pending[0]
            if buffer is None:
                buffer, filled = np.empty((len(tokens), encoder.dim), dtype=np.float16), 0
            n = min(len(tokens) - filled, len(block) - taken)
            buffer[filled : filled + n] = block[taken : taken + n]
            filled += n
            taken += n
            if filled == len(tokens):
                yield pending.popleft(), buffer
                buffer = None
    yield from empties()


@dataclass(frozen=True)
class TokenBuild:
    """One file's token file, written (staged) and read back, with its check outcomes."""

    file: str
    rows: int
    tokens: int
    bytes: int
    seconds: float
    tokenise_seconds: float
    outcomes: list[CheckOutcome]
    digest: str  # sha256 of the file's flat ids, as its metadata seals them

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outcomes)


def build_tokens(lake: Lake, spec: TokenizerSpec, file: str) -> TokenBuild:
    """Tokenise the quotable records of ``file`` into its token file for ``spec``, read it
    back from the lake and judge it (contracts.TOKEN_CHECKS); called inside the asset's
    lake transaction, so a file that fails a check is never published."""
    started = time.perf_counter()
    records = read_quotable(lake, [file])[file]
    tokenised = time.perf_counter()
    made = make_token_file(spec, file, records.pmids, records.texts)
    tokenise_seconds = time.perf_counter() - tokenised
    written = lake.write_bytes(tokens_key(spec.key, file), to_bytes(made))
    back: TokenFile | None = None
    error = None
    try:
        back = read_tokens(lake, spec, file)
    except TokenFileError as exc:
        error = str(exc)
    outcomes = token_checks(back, error, spec, records.pmids, records.texts)
    return TokenBuild(
        file,
        len(made),
        int(made.offsets[-1]),
        written,
        time.perf_counter() - started,
        tokenise_seconds,
        outcomes,
        str(made.meta["ids_sha256"]),
    )
