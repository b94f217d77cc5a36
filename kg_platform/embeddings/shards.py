"""Per-file embedding shards: the quotable records whose current version lives in a file.

A shard is three lake objects, written in this order:
``embeddings/shards/<file>.npy`` (float16, one unit vector per record, PMID order),
``<file>.pmids.npy`` (int64, ascending) and ``<file>.meta.json`` (count, model fingerprint,
checksums). Each write is atomic; the meta file is written last and is the shard's seal, so a
run killed between the writes leaves a shard that fails verification and is redone, while a
sealed shard that still matches the corpus and the model is skipped.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from kg_platform.checks import CheckOutcome
from kg_platform.embeddings.encoder import Encoder
from kg_platform.embeddings.feeder import FeederSettings, FeederStats, embed_stream
from kg_platform.storage.corpus import corpus_folder, corpus_parts
from kg_platform.storage.digest import array_sha256
from kg_platform.storage.lake import Lake

CORPUS_ARTICLES = corpus_folder("articles")
SHARDS = "embeddings/shards"


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
    """Embed the quotable records of ``files`` into shards, skipping verified ones. The files
    go through one feeder stream, so super-batches span file boundaries."""
    started = time.perf_counter()
    records = read_quotable(lake, files)
    results: dict[str, ShardResult] = {}
    verified: dict[str, ShardStatus] = {}
    todo: list[QuotableRecords] = []
    for file in files:
        status = verify_shard(lake, file, records[file].pmids, encoder.fingerprint, encoder.dim)
        if status.done:
            results[file] = ShardResult(file, len(records[file].pmids), False, status.reason)
            verified[file] = status
        else:
            todo.append(records[file])
    stats = FeederStats()
    for rec, vectors in _embed_by_file(encoder, todo, settings, stats):
        verified[rec.file] = write_shard(lake, rec.file, rec.pmids, vectors, encoder.fingerprint)
        results[rec.file] = ShardResult(rec.file, len(rec.pmids), True, "embedded")
    return ShardRun(
        shards=tuple(results[f] for f in files),
        seconds=time.perf_counter() - started,
        texts_per_s=stats.texts / stats.seconds if stats.seconds else 0.0,
        padding_overhead=stats.padding_overhead,
        verified=tuple(verified[f] for f in files),
    )


def _embed_by_file(
    encoder: Encoder,
    todo: list[QuotableRecords],
    settings: FeederSettings | None,
    stats: FeederStats,
) -> Iterator[tuple[QuotableRecords, np.ndarray]]:
    """Feed every file's texts as one stream; hand back each file as soon as it is whole."""
    # files without quotable records never enter the stream
    for rec in todo:
        if not rec.texts:
            yield rec, np.zeros((0, encoder.dim), dtype=np.float16)
    todo = [rec for rec in todo if rec.texts]
    if not todo:
        return
    stream = embed_stream(encoder, (t for rec in todo for t in rec.texts), settings, stats)
    current = 0
    filled = 0
    buffer = np.empty((len(todo[0].texts), encoder.dim), dtype=np.float16)
    for block in stream:
        taken = 0
        while taken < len(block):
            rec = todo[current]
            n = min(len(rec.texts) - filled, len(block) - taken)
            buffer[filled : filled + n] = block[taken : taken + n]
            filled += n
            taken += n
            if filled == len(rec.texts):
                yield rec, buffer
                current += 1
                filled = 0
                if current < len(todo):
                    buffer = np.empty((len(todo[current].texts), encoder.dim), dtype=np.float16)
