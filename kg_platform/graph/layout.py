"""Where the graph lives in the lake and what its arrays are called: shared by the build,
the store and the checks so a name is spelled once."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from kg_platform.graph.version import GRAPH_FORMAT  # noqa: F401 (the build id reads it here)
from kg_platform.storage.corpus import corpus_folder
from kg_platform.storage.lake import Lake

GRAPH_PREFIX = "graph"
CURRENT_POINTER = "graph/current.json"

# the corpus tables a build reads, each a folder of parts (kg_platform.storage.corpus)
CORPUS_INPUTS: dict[str, str] = {
    t: corpus_folder(t) for t in ("articles", "mesh_edges", "citations", "corrections", "pubtypes")
}
MESH_INPUTS: dict[str, str] = {
    "descriptors": "mesh/descriptors.parquet",
    "tree": "mesh/tree.parquet",
}

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

    ``check`` in the manner of scipy's ``check_format``: the O(1) checks always (sizes and
    the ends of indptr: two reads of a mapped array), the O(nnz) scans with ``full``; each
    failure a ValueError naming the array and the numbers (not ``assert``, which ``python
    -O`` drops)."""

    kind: EdgeKind
    indptr: np.ndarray
    indices: np.ndarray
    n_rows: int
    n_cols: int
    flag: np.ndarray | None = None

    def named(self) -> dict[str, np.ndarray]:
        """The arrays by their names in the build."""
        arrays = (self.indptr, self.indices) + ((self.flag,) if self.kind.flagged else ())
        return dict(zip(self.kind.arrays, arrays, strict=True))

    def check(self, full: bool = False) -> Csr:
        ptr, idx, *flag_name = self.kind.arrays
        indptr, indices, size = self.indptr, self.indices, self.indices.size
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
        falls = np.flatnonzero(indptr[1:] < indptr[:-1])
        if falls.size:
            r = int(falls[0])
            raise ValueError(
                f"{ptr} is not monotone: {falls.size} fall(s), the first from "
                f"{int(indptr[r])} to {int(indptr[r + 1])} at row {r}"
            )
        low, high = (int(indices.min()), int(indices.max())) if size else (0, 0)
        if low < 0 or high >= self.n_cols:
            raise ValueError(f"{idx} out of range 0..{self.n_cols - 1}: from {low} to {high}")
        # a non-increase is allowed only where a row starts
        drops = np.flatnonzero(indices[1:] <= indices[:-1]) + 1
        inside = drops[indptr[np.searchsorted(indptr, drops)] != drops]
        if inside.size:
            rows = np.unique(np.searchsorted(indptr, inside, side="right") - 1)
            raise ValueError(
                f"{idx}: {rows.size} row(s) not strictly ascending, the first row "
                f"{int(rows[0])} at entry {int(inside[0])}"
            )
        return self


def build_prefix(build_id: str) -> str:
    return f"{GRAPH_PREFIX}/{build_id}"


def array_key(build_id: str, name: str) -> str:
    return f"{build_prefix(build_id)}/{name}.npy"


def manifest_key(build_id: str) -> str:
    return f"{build_prefix(build_id)}/manifest.json"


def current_build_id(lake: Lake) -> str:
    """The build id readers should open: graph/current.json, written after the checks pass."""
    if not lake.exists(CURRENT_POINTER):
        raise FileNotFoundError(
            f"{lake.path(CURRENT_POINTER)}: no published graph build; materialise the `graph` asset"
        )
    try:
        build_id = json.loads(lake.read_bytes(CURRENT_POINTER))["build_id"]
        if not isinstance(build_id, str) or not build_id.isalnum():
            raise ValueError(f"build_id {build_id!r} is no build id")
        return build_id
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{lake.path(CURRENT_POINTER)}: not a graph pointer ({exc})") from exc


def read_manifest(lake: Lake, build_id: str) -> dict:
    """The build's manifest.json; FileNotFoundError when the build has none, ValueError naming
    the file when it is not a manifest."""
    key = manifest_key(build_id)
    if not lake.exists(key):
        raise FileNotFoundError(f"{lake.path(key)}: no such graph build")
    try:
        manifest = json.loads(lake.read_bytes(key))
        arrays = manifest["arrays"]
        for info in arrays.values():
            int(info["nbytes"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{lake.path(key)}: not a graph manifest ({exc})") from exc
    return manifest


def size_problems(lake: Lake, build_id: str, manifest: dict) -> list[str]:
    """Each array file of the build that is missing or not of the size its manifest records,
    one line naming the file, the array and the build (cheap: one listing, no read)."""
    found = lake.sizes(build_prefix(build_id))
    problems = []
    for name, info in manifest["arrays"].items():
        path = lake.path(array_key(build_id, name))
        size = found.get(f"{name}.npy")
        # manifests before the file size was recorded: the data plus a header of at most 4 KiB
        expected = int(info.get("size") or 0)
        fits = (
            size == expected
            if expected
            else size is not None and 0 < size - int(info["nbytes"]) <= 4096
        )
        if size is None:
            problems.append(f"{path}: array {name} of graph build {build_id} is missing")
        elif not fits:
            want = f"{expected} bytes" if expected else f"{info['nbytes']} bytes of data"
            problems.append(
                f"{path}: array {name} of graph build {build_id} is {size} bytes, "
                f"its manifest says {want}"
            )
    return problems


def hash_problems(lake: Lake, build_id: str, manifest: dict) -> list[str]:
    """Each array of the build whose data no longer hashes to the sha256 its manifest
    records, one line naming the file, the array and the build (reads every array)."""
    import numpy as np

    from kg_platform.storage.digest import array_sha256

    problems = []
    for name, info in manifest["arrays"].items():
        key = array_key(build_id, name)
        expected = info.get("sha256")
        if expected and array_sha256(np.asarray(lake.read_npy(key))) != expected:
            problems.append(
                f"{lake.path(key)}: array {name} of graph build {build_id}: sha256 differs "
                "from its manifest"
            )
    return problems


def published_problem(lake: Lake, verify: bool = False) -> str | None:
    """Why the published build of this (scoped) lake does not match its manifest: the
    pointer, the manifest or an array file named; None when it matches or none is published.
    ``verify``: the arrays' hashes too, once their sizes match."""
    if not lake.exists(CURRENT_POINTER):
        return None
    try:
        build_id = current_build_id(lake)
        manifest = read_manifest(lake, build_id)
        problems = size_problems(lake, build_id, manifest)
        if verify and not problems:
            problems = hash_problems(lake, build_id, manifest)
    except (ValueError, FileNotFoundError) as exc:
        return str(exc)
    return problems[0] if problems else None


def publish(lake: Lake, build_id: str) -> None:
    """Point readers at ``build_id`` (one atomic write; the previous build stays on disk)."""
    if not lake.exists(manifest_key(build_id)):
        raise FileNotFoundError(f"{lake.path(manifest_key(build_id))}: build is not complete")
    pointer = {"build_id": build_id, "manifest": manifest_key(build_id)}
    lake.write_bytes(CURRENT_POINTER, json.dumps(pointer, indent=1).encode())


def published_pairs(lake: Lake) -> list[tuple[str, str]]:
    """(release, MeSH year) of every published graph build under graph/<release>/<year>/,
    oldest first. ``lake`` is the unscoped root."""
    pairs = []
    for release_key in lake.list(GRAPH_PREFIX):
        release = release_key.rsplit("/", 1)[1]
        for year_key in lake.list(release_key):
            if lake.exists(f"{year_key}/current.json"):
                pairs.append((release, year_key.rsplit("/", 1)[1]))
    return sorted(pairs)


def choose_pair(
    lake: Lake, release: str | None = None, mesh_year: str | None = None
) -> tuple[str, str]:
    """The graph build a reader opens: the newest published (release, MeSH year), or the
    newest matching what was asked for; a clear error naming what exists otherwise."""
    pairs = published_pairs(lake)
    matching = [
        (r, y)
        for r, y in pairs
        if (release is None or r == release) and (mesh_year is None or y == mesh_year)
    ]
    if not matching:
        wanted = f"release {release or 'any'}, MeSH {mesh_year or 'any'}"
        have = ", ".join(f"{r}/{y}" for r, y in pairs) or "none"
        raise FileNotFoundError(
            f"{lake.path(GRAPH_PREFIX)}: no published graph for {wanted} (published: {have}); "
            "materialise `graph` for that partition"
        )
    return matching[-1]
