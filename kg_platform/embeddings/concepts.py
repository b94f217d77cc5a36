"""The concept index: every MeSH descriptor name and entry term embedded once.

``embeddings/concepts/vectors.f16.npy`` (float16 unit vectors) lines up row for row with
``embeddings/concepts/surfaces.parquet`` (ui, term, normalised, kind, preferred_concept,
lexical_tag). The hybrid grounder links question spans to these rows, and applies the
lexical grounder's MeSH rules to them through the two flags: ``preferred_concept`` (some
term of the surface belongs to its descriptor's preferred concept; lone words of other
concepts do not ground) and ``lexical_tag`` (NLM's tag of the term embedded; ABB/ACR terms
ground only as written). The flags are not embedded: a change of flags alone reuses every
cached vector.

Vectors are cached by what made them: ``embeddings/concept_cache/<encoder key>/`` holds
segments, each ``<segment>.npy`` (float16 rows) beside ``<segment>.parquet`` (sha256 of the
exact text embedded, and the text), row for row. A build looks every surface up by the hash
of its text and embeds only the texts no segment holds, written as new segments (one per
feeder super-batch, so an interrupted build keeps what it embedded). The encoder key names
the model fingerprint, its sequence limit and the vector dtype: another model, truncation
or precision never reuses a vector. The cache is not routed to a MeSH year: a new year's
thesaurus reuses every surface the last one embedded.

A segment's ``.npy`` is written before its ``.parquet``, each atomically, so a segment
exists once its ``.parquet`` does; an ``.npy`` without one is an interrupted write and is
ignored. A cache that is unreadable or misaligned (rows, width or dtype that do not match
its hash table or the encoder) is an error naming the object, never silently re-embedded:
remove the folder named to rebuild it.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import polars as pl
import pyarrow as pa

from kg_platform.checks import CheckOutcome
from kg_platform.embeddings.encoder import Encoder
from kg_platform.embeddings.feeder import FeederSettings, embed_stream
from kg_platform.storage.embeddings import CONCEPT_CACHE, CONCEPTS
from kg_platform.storage.lake import Lake
from kg_platform.storage.mesh import mesh_key
from kg_platform.text.vocabulary import with_concept_features

MESH_TERMS = mesh_key("terms")
CONCEPT_VECTORS = f"{CONCEPTS}/vectors.f16.npy"
CONCEPT_SURFACES = f"{CONCEPTS}/surfaces.parquet"
CONCEPT_MANIFEST = f"{CONCEPTS}/manifest.json"
# descriptor names and entry terms; de-inverted forms repeat them, aliases point elsewhere
CONCEPT_KINDS = ("name", "entry")


class ConceptIndexError(ValueError):
    """Missing or inconsistent MeSH terms or concept index, named with what is wrong."""


def concept_surfaces(terms: pl.DataFrame) -> pl.DataFrame:
    """One row per (descriptor, normalised surface) of the kinds we embed, in UI order:
    ui, term (the text embedded), normalised, kind, and the MeSH facts the grounding rules
    read. ``preferred_concept``: some term of the descriptor that normalises to the surface
    belongs to the descriptor's preferred concept (True for a source without concepts,
    whose terms are the preferred concept's). ``lexical_tag``: NLM's tag of the term
    embedded (the first in tag order where rows of that exact term disagree; null without
    tags). Which term is embedded does not depend on the flags."""
    missing = [c for c in ("ui", "term", "normalised", "kind") if c not in terms.columns]
    if missing:
        raise ConceptIndexError(f"{MESH_TERMS}: missing columns {missing}")
    if "lexical_tag" not in terms.columns:
        terms = terms.with_columns(pl.lit(None, dtype=pl.Utf8).alias("lexical_tag"))
    kept = terms.filter(
        pl.col("kind").is_in(CONCEPT_KINDS), pl.col("normalised").str.len_chars() > 0
    )
    # the rows embedded are chosen exactly as before the flags were carried
    surfaces = (
        kept.with_columns(
            pl.col("kind")
            .replace_strict({"name": 0, "entry": 1}, return_dtype=pl.Int8)
            .alias("rank")
        )
        .sort("ui", "rank", "normalised")
        .unique(["ui", "normalised"], keep="first", maintain_order=True)
        .select("ui", "term", "normalised", "kind")
    )
    kept = with_concept_features(kept)
    preferred = kept.group_by("ui", "normalised").agg(pl.col("preferred_concept").any())
    tags = kept.group_by("ui", "term").agg(
        pl.col("lexical_tag").drop_nulls().sort().first().alias("lexical_tag")
    )
    return surfaces.join(
        preferred, on=["ui", "normalised"], how="left", maintain_order="left"
    ).join(tags, on=["ui", "term"], how="left", maintain_order="left")


def text_hashes(texts: Sequence[str]) -> list[str]:
    """sha256 (hex) of each text's UTF-8 bytes: the cache key of the text embedded."""
    return [hashlib.sha256(t.encode()).hexdigest() for t in texts]


def encoder_key(encoder: Encoder) -> str:
    """The cache folder of an encoder's vectors: model fingerprint, sequence limit, dtype
    (as a lake folder name: letters, digits and ``. _ -``)."""
    dtype = str(getattr(encoder, "dtype", "")).removeprefix("torch.") or "unknown"
    key = f"{encoder.fingerprint}-len{encoder.max_length}-{dtype}"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", key)


class VectorCache:
    """Float16 vectors of texts already embedded by one encoder, found by text hash."""

    def __init__(self, lake: Lake, key: str, dim: int) -> None:
        self.lake = lake
        self.folder = f"{CONCEPT_CACHE}/{key}"
        self.dim = dim
        self.segments: list[np.ndarray] = []
        self.where: dict[str, tuple[int, int]] = {}  # hash -> (segment, row)
        for table_key in lake.list(self.folder, ".parquet"):
            self._load(table_key)

    def _load(self, table_key: str) -> None:
        vectors_key = table_key.removesuffix(".parquet") + ".npy"
        remove = f"remove {self.lake.path(self.folder)} to re-embed"
        try:
            hashes = self.lake.read_parquet(table_key, columns=["sha256"])["sha256"].to_pylist()
        except (OSError, ValueError, KeyError, pa.ArrowException) as exc:
            raise ConceptIndexError(
                f"{table_key}: unreadable cache segment ({exc}); {remove}"
            ) from exc
        if not self.lake.exists(vectors_key):
            raise ConceptIndexError(
                f"{vectors_key}: missing; its hash table {table_key} has {len(hashes)} rows; "
                f"{remove}"
            )
        try:
            vectors = self.lake.read_npy(vectors_key, mmap=True)
        except (OSError, ValueError, EOFError) as exc:
            raise ConceptIndexError(
                f"{vectors_key}: unreadable cache segment ({exc}); {remove}"
            ) from exc
        shape = (len(hashes), self.dim)
        if vectors.dtype != np.float16 or vectors.shape != shape:
            raise ConceptIndexError(
                f"{vectors_key}: {vectors.dtype} {vectors.shape} vectors, expected float16 "
                f"{shape} to match {table_key} and the encoder; {remove}"
            )
        segment = len(self.segments)
        self.segments.append(vectors)
        for row, digest in enumerate(hashes):
            self.where.setdefault(digest, (segment, row))

    def __contains__(self, digest: str) -> bool:
        return digest in self.where

    def __len__(self) -> int:
        return len(self.where)

    def add(self, texts: Sequence[str], hashes: Sequence[str], vectors: np.ndarray) -> str:
        """Write one segment (vectors first, then its hash table) and index it; its name is
        the hash of its hashes, so writing the same texts again writes the same objects."""
        if len(texts) != len(hashes) or len(hashes) != len(vectors):
            raise ValueError(f"{len(texts)} texts, {len(hashes)} hashes, {len(vectors)} vectors")
        name = hashlib.sha256("".join(hashes).encode()).hexdigest()[:24]
        base = f"{self.folder}/{name}"
        vectors = np.ascontiguousarray(vectors, dtype=np.float16)
        self.lake.write_npy(f"{base}.npy", vectors)
        table = pa.table({"sha256": list(hashes), "text": list(texts)})
        self.lake.write_parquet(f"{base}.parquet", table)
        segment = len(self.segments)
        self.segments.append(vectors)
        for row, digest in enumerate(hashes):
            self.where.setdefault(digest, (segment, row))
        return base

    def fill(self, out: np.ndarray, hashes: Sequence[str]) -> None:
        """``out[i]`` = the cached vector of ``hashes[i]`` (every hash must be cached)."""
        rows_by_segment: dict[int, tuple[list[int], list[int]]] = {}
        for i, digest in enumerate(hashes):
            segment, row = self.where[digest]
            targets, sources = rows_by_segment.setdefault(segment, ([], []))
            targets.append(i)
            sources.append(row)
        for segment, (targets, sources) in rows_by_segment.items():
            out[np.asarray(targets)] = self.segments[segment][np.asarray(sources)]


@dataclass(frozen=True)
class ConceptIndexBuild:
    surfaces: int
    descriptors: int
    dim: int
    seconds: float
    min_norm: float
    max_norm: float
    embedded: int = 0  # distinct texts embedded by this build
    reused: int = 0  # surfaces whose vector came from the cache
    embed_seconds: float = 0.0
    cache: str = ""  # the cache folder's lake key


def build_concept_index(
    lake: Lake,
    encoder: Encoder,
    settings: FeederSettings | None = None,
    cache: Lake | None = None,
    log: Callable[[str], None] | None = None,
) -> ConceptIndexBuild:
    """Embed the surfaces of ``mesh/terms.parquet`` the cache does not hold, then write the
    index (vectors, surfaces, manifest) in one transaction: the caller's when ``lake`` is a
    transaction's view (the asset judges the staged index before it is published).
    ``cache``: the lake whose ``embeddings/concept_cache/`` is used (default: ``lake``)."""
    started = time.perf_counter()
    if not lake.exists(MESH_TERMS):
        raise ConceptIndexError(
            f"{MESH_TERMS}: not in the lake at {lake.root}; materialise mesh_tables first"
        )
    frame = pl.from_arrow(lake.read_parquet(MESH_TERMS))
    assert isinstance(frame, pl.DataFrame)
    surfaces = concept_surfaces(frame)
    if surfaces.height == 0:
        raise ConceptIndexError(f"{MESH_TERMS}: no descriptor names or entry terms")
    texts = surfaces["term"].to_list()
    hashes = text_hashes(texts)
    vectors_cache = VectorCache(cache or lake, encoder_key(encoder), encoder.dim)
    # each text not cached, once, in surface order
    todo: dict[str, str] = {}
    for text, digest in zip(texts, hashes, strict=True):
        if digest not in vectors_cache and digest not in todo:
            todo[digest] = text
    reused = sum(1 for digest in hashes if digest in vectors_cache)
    embed_started = time.perf_counter()
    if todo:
        todo_hashes, todo_texts = list(todo), list(todo.values())
        done = 0
        for block in embed_stream(encoder, todo_texts, settings):
            segment = vectors_cache.add(
                todo_texts[done : done + len(block)], todo_hashes[done : done + len(block)], block
            )
            done += len(block)
            if log is not None:
                elapsed = time.perf_counter() - embed_started
                log(f"{segment}: {done}/{len(todo)} texts embedded in {elapsed:.1f} s")
        if done != len(todo):
            raise RuntimeError(f"feeder returned {done} vectors for {len(todo)} texts")
    embed_seconds = time.perf_counter() - embed_started
    vectors = np.empty((len(texts), encoder.dim), dtype=np.float16)
    vectors_cache.fill(vectors, hashes)
    norms = np.linalg.norm(vectors.astype(np.float32), axis=1)
    seconds = time.perf_counter() - started
    manifest = {
        "surfaces": surfaces.height,
        "fingerprint": encoder.fingerprint,
        "dim": encoder.dim,
        # how long the build took, so whoever reuses the index knows what it saves
        "seconds": round(seconds, 3),
        "embedded": len(todo),
        "reused": reused,
        "embed_seconds": round(embed_seconds, 3),
        "cache": vectors_cache.folder,
        "device": str(getattr(encoder, "device", "")),
    }
    # the three objects appear together: a reader never pairs new vectors with old surfaces
    with lake.transaction() if lake.stage is None else nullcontext(lake) as staged:
        staged.write_npy(CONCEPT_VECTORS, vectors)
        staged.write_parquet(CONCEPT_SURFACES, surfaces.to_arrow())
        staged.write_bytes(CONCEPT_MANIFEST, json.dumps(manifest, indent=1).encode())
    return ConceptIndexBuild(
        surfaces=surfaces.height,
        descriptors=surfaces["ui"].n_unique(),
        dim=encoder.dim,
        seconds=seconds,
        min_norm=float(norms.min()),
        max_norm=float(norms.max()),
        embedded=len(todo),
        reused=reused,
        embed_seconds=embed_seconds,
        cache=vectors_cache.folder,
    )


def concept_checks(build: ConceptIndexBuild) -> list[CheckOutcome]:
    """The concept index's check (contracts.CONCEPT_CHECKS): every surface vector a unit
    vector up to fp16 rounding."""
    # the index's module: loaded by the step, not by the question path that opens concepts
    from kg_platform.embeddings.index import NormCheck

    norms = NormCheck(build.surfaces, build.min_norm, build.max_norm)
    return [
        CheckOutcome(
            "norms_about_one",
            norms.passed(),
            metadata={"min": build.min_norm, "max": build.max_norm},
        )
    ]


@dataclass(frozen=True)
class ConceptIndex:
    """Concept surfaces and their unit vectors, row-aligned. ``normalised``,
    ``preferred_concept`` and ``lexical_tags`` are the surfaces' MeSH facts (None for an
    index written before they were carried: no rule can then be applied to its links)."""

    uis: list[str]
    terms: list[str]
    vectors: np.ndarray  # float16 (m, dim)
    fingerprint: str = ""
    normalised: list[str] | None = None
    preferred_concept: list[bool] | None = None
    lexical_tags: list[str | None] | None = None

    @classmethod
    def open(cls, lake: Lake) -> ConceptIndex:
        for key in (CONCEPT_VECTORS, CONCEPT_SURFACES, CONCEPT_MANIFEST):
            if not lake.exists(key):
                raise ConceptIndexError(
                    f"{key}: not in the lake at {lake.root}; materialise concept_index first"
                )
        surfaces = pl.from_arrow(lake.read_parquet(CONCEPT_SURFACES))
        assert isinstance(surfaces, pl.DataFrame)
        vectors = lake.read_npy(CONCEPT_VECTORS, mmap=False)
        if len(vectors) != surfaces.height:
            raise ConceptIndexError(
                f"{CONCEPT_VECTORS}: {len(vectors)} rows for {surfaces.height} surfaces"
            )
        manifest = json.loads(lake.read_bytes(CONCEPT_MANIFEST))
        flagged = {"preferred_concept", "lexical_tag"} <= set(surfaces.columns)
        return cls(
            surfaces["ui"].to_list(),
            surfaces["term"].to_list(),
            vectors,
            manifest.get("fingerprint", ""),
            surfaces["normalised"].to_list() if "normalised" in surfaces.columns else None,
            surfaces["preferred_concept"].fill_null(True).to_list() if flagged else None,
            surfaces["lexical_tag"].to_list() if flagged else None,
        )

    @property
    def has_flags(self) -> bool:
        return (
            self.normalised is not None
            and self.preferred_concept is not None
            and self.lexical_tags is not None
        )

    @cached_property
    def vectors32(self) -> np.ndarray:
        """The vectors widened to float32 once (numpy has no fast float16 product): every
        question would otherwise widen the whole matrix again (about 0.2 s for full MeSH)."""
        return np.ascontiguousarray(self.vectors, dtype=np.float32)

    def best(
        self,
        queries: np.ndarray,
        block_rows: int = 32768,
        allowed: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """For each query vector: the row of its most similar surface and that cosine.
        ``allowed``: a boolean per row; rows it marks False are never returned (a query
        with no allowed row gets row 0 at cosine -inf)."""
        q = np.asarray(queries, dtype=np.float32)
        best_rows = np.zeros(len(q), dtype=np.int64)
        best_scores = np.full(len(q), -np.inf, dtype=np.float32)
        vectors = self.vectors32
        if allowed is not None and len(allowed) != len(vectors):
            raise ValueError(f"allowed: {len(allowed)} flags for {len(vectors)} surfaces")
        for start in range(0, len(vectors), block_rows):
            scores = q @ vectors[start : start + block_rows].T
            if allowed is not None:
                scores[:, ~allowed[start : start + block_rows]] = -np.inf
            top = scores.argmax(axis=1)
            value = scores[np.arange(len(q)), top]
            better = value > best_scores
            best_rows[better] = start + top[better]
            best_scores[better] = value[better]
        return best_rows, best_scores
