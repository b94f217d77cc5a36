"""Where the graph lives in the lake and what its arrays are called: shared by the build,
the store and the checks so a name is spelled once."""

from __future__ import annotations

import json

from kg_platform.storage.lake import Lake

# bump when the meaning of an array changes: the build id then changes with it
GRAPH_FORMAT = 1

GRAPH_PREFIX = "graph"
CURRENT_POINTER = "graph/current.json"

CORPUS_INPUTS: dict[str, str] = {
    t: f"corpus/{t}.parquet"
    for t in ("articles", "mesh_edges", "citations", "corrections", "pubtypes")
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

# every array a complete build holds
ARTICLE_ARRAYS = ("pmids", "year", "flags")
CITATION_ARRAYS = ("cite_indptr", "cite_indices", "cited_by_indptr", "cited_by_indices")
MESH_ARRAYS = (
    "mesh2art_indptr",
    "mesh2art_indices",
    "mesh2art_major",
    "art2mesh_indptr",
    "art2mesh_indices",
    "art2mesh_major",
)
DESCRIPTOR_ARRAYS = (
    "mesh_uis",
    "mesh_article_count",
    "mesh_major_count",
    "mesh_categories",
    "mesh_min_depth",
)
ALL_ARRAYS = ARTICLE_ARRAYS + CITATION_ARRAYS + MESH_ARRAYS + DESCRIPTOR_ARRAYS


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
        return str(json.loads(lake.read_bytes(CURRENT_POINTER))["build_id"])
    except (ValueError, KeyError) as exc:
        raise ValueError(f"{lake.path(CURRENT_POINTER)}: not a graph pointer ({exc})") from exc


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
