"""What the graph's arrays are called and the CSR type they make up: shared by the build,
the store and the checks so a name is spelled once. Where a build lives in the lake, and
which build is published, is storage/graph.py's (its names are read here too)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from kg_platform.graph.version import GRAPH_FORMAT  # noqa: F401 (the build id reads it here)
from kg_platform.storage.corpus import corpus_folder
from kg_platform.storage.graph import (  # noqa: F401 (the graph's lake keys, read as layout.*)
    CURRENT_POINTER,
    GRAPH_PREFIX,
    array_key,
    build_prefix,
    choose_pair,
    current_build_id,
    hash_problems,
    manifest_key,
    publish,
    published_pairs,
    published_problem,
    read_manifest,
    size_problems,
)
from kg_platform.storage.mapped import release, windows
from kg_platform.storage.mesh import mesh_key

# the corpus tables a build reads, each a folder of parts (kg_platform.storage.corpus)
CORPUS_INPUTS: dict[str, str] = {
    t: corpus_folder(t) for t in ("articles", "mesh_edges", "citations", "corrections", "pubtypes")
}
MESH_INPUTS: dict[str, str] = {t: mesh_key(t) for t in ("descriptors", "tree")}

# per-article flag bits (uint8 array `flags`)
QUOTABLE = 1  # has abstract text
RETRACTED = 2  # CommentsCorrections RetractionIn, or publication type "Retracted Publication"
CONCERN = 4  # CommentsCorrections ExpressionOfConcernIn

RETRACTION_REF_TYPE = "RetractionIn"
CONCERN_REF_TYPE = "ExpressionOfConcernIn"
RETRACTED_PUBTYPE = "Retracted Publication"


@dataclass(frozen=True)
class EdgeKind:
    """One direction of an edge kind: its rows and columns are articles or descriptors, and
    a flagged kind holds a major-topic flag per entry. Arrays ``<name>_indptr``,
    ``<name>_indices`` (and ``<name>_major``); ``reverse`` holds the same edges turned."""

    name: str
    reverse: str
    rows_are_articles: bool
    columns_are_articles: bool
    flagged: bool = False

    @property
    def arrays(self) -> tuple[str, ...]:
        flag = (f"{self.name}_major",) if self.flagged else ()
        return (f"{self.name}_indptr", f"{self.name}_indices", *flag)


# every edge kind of a build, in array order; MeSH rows are read per article (the fold
# orders them by PMID), so art2mesh is the direction the build cuts first
EDGE_KINDS: dict[str, EdgeKind] = {
    kind.name: kind
    for kind in (
        EdgeKind("cite", "cited_by", True, True),
        EdgeKind("cited_by", "cite", True, True),
        EdgeKind("mesh2art", "art2mesh", False, True, flagged=True),
        EdgeKind("art2mesh", "mesh2art", True, False, flagged=True),
    )
}

# every array a complete build holds
ARTICLE_ARRAYS = ("pmids", "year", "flags")
CITATION_ARRAYS = EDGE_KINDS["cite"].arrays + EDGE_KINDS["cited_by"].arrays
MESH_ARRAYS = EDGE_KINDS["mesh2art"].arrays + EDGE_KINDS["art2mesh"].arrays
DESCRIPTOR_ARRAYS = (
    "mesh_uis",
    "mesh_article_count",
    "mesh_major_count",
    "mesh_categories",
    "mesh_min_depth",
)
# each article's title in node order: UTF-8 bytes, n + 1 offsets into them, and where the
# corpus has no title (null); an answer's evidence titles are slices of these (format 2)
TITLE_ARRAYS = ("title_offsets", "title_bytes", "title_null")
ALL_ARRAYS = ARTICLE_ARRAYS + CITATION_ARRAYS + MESH_ARRAYS + DESCRIPTOR_ARRAYS + TITLE_ARRAYS


@dataclass(frozen=True)
class Csr:
    """The arrays of one edge kind's direction: row r's neighbours are
    ``indices[indptr[r]:indptr[r + 1]]``, strictly ascending, each below ``n_cols``;
    ``flag`` (a flagged kind) has one entry per neighbour.

    ``check`` in the manner of scipy's ``check_format``: the O(1) checks (sizes and the ends
    of indptr: two reads of a mapped array) whenever a Csr is made, the O(nnz) scans with
    ``full``; each failure a ValueError naming the array and the numbers (not ``assert``,
    which ``python -O`` drops). The one CSR type: the graph's edge kinds and the allocation
    study's paragraph links (kg_platform.retrieval.allocation) alike."""

    kind: EdgeKind
    indptr: np.ndarray
    indices: np.ndarray
    n_rows: int
    n_cols: int
    flag: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.check()

    @classmethod
    def from_edges(cls, kind: EdgeKind, n_nodes: int, edges: np.ndarray) -> Csr:
        """A square Csr over ``0..n_nodes-1`` from (source, target) pairs: duplicates
        dropped, targets ascending per source."""
        edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        if edges.size and (edges.min() < 0 or edges.max() >= n_nodes):
            raise ValueError(f"edge endpoints must lie in [0, {n_nodes})")
        edges = np.unique(edges, axis=0)  # sorted by source then target
        indptr = np.zeros(n_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(edges[:, 0], minlength=n_nodes), out=indptr[1:])
        return cls(kind, indptr, edges[:, 1].copy(), n_nodes, n_nodes)

    @property
    def n_edges(self) -> int:
        return int(self.indices.size)

    def neighbours(self, row: int) -> np.ndarray:
        return self.indices[self.indptr[row] : self.indptr[row + 1]]

    def edges(self) -> np.ndarray:
        """(E, 2) array of (row, column) pairs in CSR order."""
        rows = np.repeat(np.arange(self.n_rows, dtype=np.int64), np.diff(self.indptr))
        return np.stack([rows, self.indices.astype(np.int64)], axis=1)

    def sha256(self) -> str:
        """Identity of the adjacency: little-endian int64 indptr then int64 indices."""
        digest = hashlib.sha256(np.asarray(self.indptr, dtype="<i8").tobytes())
        digest.update(np.asarray(self.indices, dtype="<i8").tobytes())
        return digest.hexdigest()

    def named(self) -> dict[str, np.ndarray]:
        """The arrays by their names in the build."""
        arrays = (self.indptr, self.indices) + ((self.flag,) if self.kind.flagged else ())
        return dict(zip(self.kind.arrays, arrays, strict=True))

    def check(self, full: bool = False) -> Csr:
        ptr, idx, *flag_name = self.kind.arrays
        indptr, size = self.indptr, self.indices.size
        if indptr.ndim != 1 or indptr.size != self.n_rows + 1:
            raise ValueError(
                f"{ptr} has {indptr.size} entries, expected {self.n_rows + 1} (rows + 1)"
            )
        if (self.flag is not None) != self.kind.flagged:
            has = "has" if self.kind.flagged else "has no"
            raise ValueError(f"{self.kind.name} {has} a flag array; given {self.flag is not None}")
        if self.flag is not None and self.flag.size != size:
            raise ValueError(f"{flag_name[0]} has {self.flag.size} entries, {idx} {size}")
        first, last = int(indptr[0]), int(indptr[-1])
        if first != 0 or last != size:
            raise ValueError(f"{ptr} runs from {first} to {last}, expected 0 to {size} ({idx})")
        if not full:
            return self
        self._scan(ptr, idx)
        return self

    def _scan(self, ptr: str, idx: str) -> None:
        """The O(nnz) checks, a window of each array at a time: on a memory-mapped array the
        pages of a window leave this process's memory once it is scanned (``release``), so
        the scan holds a window of each array, not the arrays, and its temporaries are a
        window's. The same findings, and the same messages, as one pass over each whole."""
        indptr, indices, size = self.indptr, self.indices, self.indices.size
        falls, first_fall = 0, -1
        for lo, hi in windows(indptr.size - 1, indptr.itemsize):
            part = indptr[lo : hi + 1]
            found = np.flatnonzero(part[1:] < part[:-1])
            if found.size and first_fall < 0:
                first_fall = lo + int(found[0])
            falls += int(found.size)
            release(indptr, lo, hi)
        if falls:
            r = first_fall
            raise ValueError(
                f"{ptr} is not monotone: {falls} fall(s), the first from "
                f"{int(indptr[r])} to {int(indptr[r + 1])} at row {r}"
            )
        low = high = 0
        rows, last_row, first_row, first_entry = 0, -1, -1, -1
        for lo, hi in windows(size, indices.itemsize):
            part = indices[lo:hi]
            low = min(low, int(part.min())) if lo else int(part.min())
            high = max(high, int(part.max())) if lo else int(part.max())
            # a non-increase is allowed only where a row starts (entry lo against lo - 1 too)
            start = max(lo - 1, 0)
            seen = indices[start:hi]
            drops = np.flatnonzero(seen[1:] <= seen[:-1]) + start + 1
            inside = drops[indptr[np.searchsorted(indptr, drops)] != drops]
            if inside.size:
                found = np.unique(np.searchsorted(indptr, inside, side="right") - 1)
                if first_entry < 0:
                    first_row, first_entry = int(found[0]), int(inside[0])
                # a row runs on across windows: counted in the first it is found in
                rows += int(found.size) - int(int(found[0]) == last_row)
                last_row = int(found[-1])
            release(indices, lo, hi)
        release(indptr)
        if low < 0 or high >= self.n_cols:
            raise ValueError(f"{idx} out of range 0..{self.n_cols - 1}: from {low} to {high}")
        if rows:
            raise ValueError(
                f"{idx}: {rows} row(s) not strictly ascending, the first row "
                f"{first_row} at entry {first_entry}"
            )
