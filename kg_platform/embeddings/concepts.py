"""The concept index: every MeSH descriptor name and entry term embedded once.

``embeddings/concepts/vectors.f16.npy`` (float16 unit vectors) lines up row for row with
``embeddings/concepts/surfaces.parquet`` (ui, term, normalised, kind). The hybrid grounder
links question spans to these rows.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import polars as pl

from kg_platform.embeddings.encoder import Encoder
from kg_platform.embeddings.feeder import FeederSettings, embed_texts
from kg_platform.storage.lake import Lake

MESH_TERMS = "mesh/terms.parquet"
CONCEPTS = "embeddings/concepts"
CONCEPT_VECTORS = f"{CONCEPTS}/vectors.f16.npy"
CONCEPT_SURFACES = f"{CONCEPTS}/surfaces.parquet"
CONCEPT_MANIFEST = f"{CONCEPTS}/manifest.json"
# descriptor names and entry terms; de-inverted forms repeat them, aliases point elsewhere
CONCEPT_KINDS = ("name", "entry")


class ConceptIndexError(ValueError):
    """Missing or inconsistent MeSH terms or concept index, named with what is wrong."""


def concept_surfaces(terms: pl.DataFrame) -> pl.DataFrame:
    """One row per (descriptor, normalised surface) of the kinds we embed, in UI order."""
    missing = [c for c in ("ui", "term", "normalised", "kind") if c not in terms.columns]
    if missing:
        raise ConceptIndexError(f"{MESH_TERMS}: missing columns {missing}")
    return (
        terms.filter(pl.col("kind").is_in(CONCEPT_KINDS), pl.col("normalised").str.len_chars() > 0)
        .with_columns(
            pl.col("kind")
            .replace_strict({"name": 0, "entry": 1}, return_dtype=pl.Int8)
            .alias("rank")
        )
        .sort("ui", "rank", "normalised")
        .unique(["ui", "normalised"], keep="first", maintain_order=True)
        .select("ui", "term", "normalised", "kind")
    )


@dataclass(frozen=True)
class ConceptIndexBuild:
    surfaces: int
    descriptors: int
    dim: int
    seconds: float
    min_norm: float
    max_norm: float


def build_concept_index(
    lake: Lake, encoder: Encoder, settings: FeederSettings | None = None
) -> ConceptIndexBuild:
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
    vectors = embed_texts(encoder, surfaces["term"].to_list(), settings)
    norms = np.linalg.norm(vectors.astype(np.float32), axis=1)
    lake.write_npy(CONCEPT_VECTORS, vectors)
    lake.write_parquet(CONCEPT_SURFACES, surfaces.to_arrow())
    manifest = {
        "surfaces": surfaces.height,
        "fingerprint": encoder.fingerprint,
        "dim": encoder.dim,
        # how long the embedding took, so whoever reuses the index knows what it saves
        "seconds": round(time.perf_counter() - started, 3),
        "device": str(getattr(encoder, "device", "")),
    }
    lake.write_bytes(CONCEPT_MANIFEST, json.dumps(manifest, indent=1).encode())
    return ConceptIndexBuild(
        surfaces=surfaces.height,
        descriptors=surfaces["ui"].n_unique(),
        dim=encoder.dim,
        seconds=time.perf_counter() - started,
        min_norm=float(norms.min()),
        max_norm=float(norms.max()),
    )


@dataclass(frozen=True)
class ConceptIndex:
    """Concept surfaces and their unit vectors, row-aligned."""

    uis: list[str]
    terms: list[str]
    vectors: np.ndarray  # float16 (m, dim)
    fingerprint: str = ""

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
        return cls(
            surfaces["ui"].to_list(),
            surfaces["term"].to_list(),
            vectors,
            manifest.get("fingerprint", ""),
        )

    @cached_property
    def vectors32(self) -> np.ndarray:
        """The vectors widened to float32 once (numpy has no fast float16 product): every
        question would otherwise widen the whole matrix again (about 0.2 s for full MeSH)."""
        return np.ascontiguousarray(self.vectors, dtype=np.float32)

    def best(self, queries: np.ndarray, block_rows: int = 32768) -> tuple[np.ndarray, np.ndarray]:
        """For each query vector: the row of its most similar surface and that cosine."""
        q = np.asarray(queries, dtype=np.float32)
        best_rows = np.zeros(len(q), dtype=np.int64)
        best_scores = np.full(len(q), -np.inf, dtype=np.float32)
        vectors = self.vectors32
        for start in range(0, len(vectors), block_rows):
            scores = q @ vectors[start : start + block_rows].T
            top = scores.argmax(axis=1)
            value = scores[np.arange(len(q)), top]
            better = value > best_scores
            best_rows[better] = start + top[better]
            best_scores[better] = value[better]
        return best_rows, best_scores
