"""Dense retrieval over the consolidated embedding index, and the semantic ranker.

Search is exact: every row (or every row of a candidate set) is scored, block by block, so
memory stays bounded however large the memory-mapped index is. Blocks are scored with numpy
on the CPU and with torch on a GPU. Vectors are unit length, so scores are cosines.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kg_platform.embeddings.encoder import Encoder
from kg_platform.embeddings.index import (
    INDEX_MANIFEST,
    INDEX_PMIDS,
    INDEX_VECTORS,
    index_problem,
)
from kg_platform.storage.lake import Lake
from kg_platform.storage.mapped import load_npy

BACKENDS = ("auto", "numpy", "torch")


class DenseIndexError(ValueError):
    """A missing or inconsistent index, or a bad query, named with what is wrong."""


@dataclass(frozen=True)
class DenseHits:
    """The top PMIDs of one query, best first, with their cosine scores."""

    pmids: np.ndarray  # int64
    scores: np.ndarray  # float32

    def __len__(self) -> int:
        return int(self.pmids.size)

    def as_list(self) -> list[dict[str, float | int]]:
        return [
            {"pmid": int(p), "score": round(float(s), 6)}
            for p, s in zip(self.pmids, self.scores, strict=True)
        ]


class DenseIndex:
    """PMID-sorted unit vectors (float16) with exact top-k search."""

    def __init__(
        self,
        pmids: np.ndarray,
        vectors: np.ndarray,
        backend: str = "auto",
        device: str = "auto",
        fingerprint: str = "",
    ) -> None:
        if vectors.ndim != 2 or len(pmids) != vectors.shape[0]:
            raise DenseIndexError(f"index: {len(pmids)} PMIDs for vectors of shape {vectors.shape}")
        if backend not in BACKENDS:
            raise DenseIndexError(f"backend {backend!r}: expected one of {BACKENDS}")
        self.pmids = pmids
        self.vectors = vectors
        self.fingerprint = fingerprint
        self.backend, self.device = _resolve_backend(backend, device)

    @classmethod
    def open(cls, lake: Lake, backend: str = "auto", device: str = "auto") -> DenseIndex:
        """Memory-map ``embeddings/index`` from the lake; nothing is read until searched."""
        for key in (INDEX_VECTORS, INDEX_PMIDS, INDEX_MANIFEST):
            if not lake.exists(key):
                raise DenseIndexError(
                    f"{key}: not in the lake at {lake.root}; materialise embedding_index first"
                )
        problem = index_problem(lake)  # the files' sizes against the manifest, every open
        if problem is not None:
            raise DenseIndexError(problem)
        manifest = json.loads(lake.read_bytes(INDEX_MANIFEST))
        pmids, vectors = (_open_array(lake, key) for key in (INDEX_PMIDS, INDEX_VECTORS))
        if manifest.get("vectors") != len(pmids):
            raise DenseIndexError(
                f"{INDEX_MANIFEST}: says {manifest.get('vectors')} vectors, "
                f"{INDEX_PMIDS} holds {len(pmids)}; rebuild embedding_index"
            )
        return cls(pmids, vectors, backend, device, manifest.get("fingerprint", ""))

    def __len__(self) -> int:
        return int(self.pmids.size)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def rows_of(self, pmids: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Index rows of ``pmids`` by binary search: (rows, found mask), aligned with input."""
        wanted = np.asarray(pmids, dtype=np.int64).ravel()
        if self.pmids.size == 0 or wanted.size == 0:
            return np.zeros(wanted.size, dtype=np.int64), np.zeros(wanted.size, dtype=bool)
        rows = np.minimum(np.searchsorted(self.pmids, wanted), self.pmids.size - 1)
        found = np.asarray(self.pmids[rows]) == wanted
        return rows.astype(np.int64), found

    def similarities(self, query: np.ndarray, pmids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Cosine of ``query`` with each PMID's vector, aligned with ``pmids``; NaN for a PMID
        without a vector (not quotable, or not embedded)."""
        q = self._queries(query)[0]
        rows, found = self.rows_of(pmids)
        out = np.full(rows.size, np.nan, dtype=np.float32)
        if found.any():
            unique_rows, inverse = np.unique(rows[found], return_inverse=True)
            scores = np.asarray(self.vectors[unique_rows], dtype=np.float32) @ q
            out[found] = scores[inverse]
        return out

    def search(
        self,
        query: np.ndarray,
        k: int = 10,
        candidates: Sequence[int] | np.ndarray | None = None,
        block_rows: int = 1 << 16,
    ) -> list[DenseHits]:
        """Exact top-``k`` for each query vector (one row per query), optionally only among
        ``candidates`` (PMIDs; those without a vector are ignored). Ties: lower PMID first."""
        if k < 1:
            raise DenseIndexError(f"k={k}: must be at least 1")
        queries = self._queries(query)
        if candidates is None:
            rows = None
            n = len(self)
        else:
            cand_rows, found = self.rows_of(candidates)
            rows = np.unique(cand_rows[found])  # ascending rows read the memmap in order
            n = rows.size
        best_scores = np.full((len(queries), 0), -np.inf, dtype=np.float32)
        best_rows = np.zeros((len(queries), 0), dtype=np.int64)
        for start in range(0, n, block_rows):
            block = (
                np.arange(start, min(n, start + block_rows))
                if rows is None
                else rows[start : start + block_rows]
            )
            vectors = (
                self.vectors[start : start + len(block)] if rows is None else self.vectors[block]
            )
            scores, top = self._block_top(queries, vectors, k)
            best_scores = np.concatenate([best_scores, scores], axis=1)
            best_rows = np.concatenate([best_rows, block[top]], axis=1)
            if best_scores.shape[1] > k:
                keep = np.argpartition(-best_scores, k - 1, axis=1)[:, :k]
                best_scores = np.take_along_axis(best_scores, keep, axis=1)
                best_rows = np.take_along_axis(best_rows, keep, axis=1)
        hits = []
        for scores, found_rows in zip(best_scores, best_rows, strict=True):
            pmids = np.asarray(self.pmids[found_rows], dtype=np.int64)
            order = np.lexsort((pmids, -scores))
            hits.append(DenseHits(pmids[order], scores[order].astype(np.float32)))
        return hits

    def _queries(self, query: np.ndarray) -> np.ndarray:
        q = np.asarray(query, dtype=np.float32)
        if q.ndim == 1:
            q = q[None, :]
        if q.ndim != 2 or q.shape[1] != self.dim:
            raise DenseIndexError(f"query of shape {q.shape}: expected (n, {self.dim})")
        if not np.isfinite(q).all():
            raise DenseIndexError("query: holds NaN or infinite values")
        return q

    def _block_top(
        self, queries: np.ndarray, vectors: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Scores and in-block positions of each query's best ``k`` rows of one block."""
        if self.backend == "torch":
            import torch

            device = torch.device(self.device)
            dtype = torch.float16 if device.type == "cuda" else torch.float32
            v = torch.from_numpy(np.ascontiguousarray(vectors)).to(device).to(dtype)
            q = torch.from_numpy(queries).to(device).to(dtype)
            scores = (q @ v.T).float()
            top = torch.topk(scores, min(k, scores.shape[1]), dim=1)
            return top.values.cpu().numpy(), top.indices.cpu().numpy()
        scores = queries @ np.asarray(vectors, dtype=np.float32).T
        kk = min(k, scores.shape[1])
        top = np.argpartition(-scores, kk - 1, axis=1)[:, :kk]
        return np.take_along_axis(scores, top, axis=1), top


def _open_array(lake: Lake, key: str) -> np.ndarray:
    try:
        return load_npy(lake.local_path(key))  # mapped (`kg serve`: recorded, or copied)
    except (ValueError, OSError) as exc:
        raise DenseIndexError(
            f"{lake.path(key)}: the embedding index cannot be opened ({exc})"
        ) from exc


def _resolve_backend(backend: str, device: str) -> tuple[str, str]:
    if backend == "numpy":
        return "numpy", "cpu"
    try:
        import torch
    except ImportError:
        if backend == "torch":
            raise DenseIndexError("backend 'torch': torch is not installed") from None
        return "numpy", "cpu"
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if backend == "auto":
        # numpy's BLAS is as fast as torch on the CPU; torch only pays on a GPU
        return ("torch", device) if device.startswith("cuda") else ("numpy", "cpu")
    return "torch", device


@dataclass(frozen=True)
class SemanticScores:
    """Question-evidence similarity of each candidate, for one question.

    ``scores`` is aligned with the candidates given (NaN where a candidate has no vector);
    ``top1`` and ``mean_top8`` are taken over the distinct embedded candidates and are the
    signals that separate answerable questions from impossible ones."""

    question: str
    scores: np.ndarray
    top1: float
    mean_top8: float
    embedded: int
    candidates: int

    def order(self) -> np.ndarray:
        """Candidate positions best first; unembedded candidates last, in input order."""
        key = np.where(np.isnan(self.scores), np.inf, -self.scores)
        return np.argsort(key, kind="stable")

    def signals(self) -> dict[str, float | int]:
        return {
            "semantic_top1": self.top1,
            "semantic_mean_top8": self.mean_top8,
            "semantic_embedded": self.embedded,
            "semantic_candidates": self.candidates,
        }


class SemanticRanker:
    """Ranks DIRECT/BRIDGE candidates by the similarity of their terminal article to the
    question. The question is embedded on every call and nothing is kept between calls:
    the reference cached the first question's vector, and every later question scored -1."""

    def __init__(self, encoder: Encoder, index: DenseIndex) -> None:
        if encoder.dim != index.dim:
            raise DenseIndexError(f"encoder dim {encoder.dim} != index dim {index.dim}")
        if index.fingerprint and index.fingerprint != encoder.fingerprint:
            raise DenseIndexError(
                f"index was built by {index.fingerprint}, encoder is {encoder.fingerprint}"
            )
        self.encoder = encoder
        self.index = index

    def score(self, question: str, candidate_pmids: Sequence[int] | np.ndarray) -> SemanticScores:
        if not isinstance(question, str) or not question.strip():
            raise DenseIndexError("question: empty")
        query = self.encoder.encode([question])[0]
        scores = self.index.similarities(query, candidate_pmids)
        present = scores[~np.isnan(scores)]
        rows, found = self.index.rows_of(candidate_pmids)
        distinct = np.unique(rows[found])
        distinct_scores = np.sort(
            np.asarray(self.index.vectors[distinct], dtype=np.float32) @ query
        )[::-1]
        return SemanticScores(
            question=question,
            scores=scores,
            top1=float(distinct_scores[0]) if distinct_scores.size else float("nan"),
            mean_top8=float(distinct_scores[:8].mean()) if distinct_scores.size else float("nan"),
            embedded=int(present.size),
            candidates=int(scores.size),
        )
