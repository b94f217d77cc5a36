"""Where a graph build lives in the lake, and which build readers open.

A build is a folder of arrays, ``graph/<build id>/<array>.npy``, with the ``manifest.json``
recording each array's size and hash, written last; ``graph/current.json`` points readers
at the published build (a scoped lake puts the release and MeSH year after ``graph/``,
storage/scope.py). Readers never spell a key: :func:`array_key` and :func:`manifest_key`
name a build's files, :func:`current_build_id` reads the pointer and :func:`publish`
writes it, :func:`choose_pair` picks a published (release, MeSH year). The arrays' names
and the CSR type are kg_platform.graph.layout's; the build is kg_platform.graph.build.
"""

from __future__ import annotations

import json

from kg_platform.storage.lake import Lake

GRAPH_PREFIX = "graph"
POINTER_NAME = "current.json"
CURRENT_POINTER = f"{GRAPH_PREFIX}/{POINTER_NAME}"


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
            if lake.exists(f"{year_key}/{POINTER_NAME}"):
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
