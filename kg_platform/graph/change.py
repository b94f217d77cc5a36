"""The last fold's change as a graph build reads it: whether it applies to a published build
(``fold_base``: the rule the patched build and the update's recount share; the corpus
profile's update starts from ``incremental_fold_base``), and its files read with errors that
name them."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from kg_platform.graph import layout
from kg_platform.graph.arrays import GraphInputError
from kg_platform.graph.store import KGStore
from kg_platform.pubmed.fold.manifest import FOLD_MANIFEST, FOLD_TOUCHED
from kg_platform.settings import usable_cores as workers
from kg_platform.storage.digest import array_sha256
from kg_platform.storage.lake import Lake


def incremental_fold_base(lake: Lake) -> tuple[dict | None, str]:
    """The fingerprints of the corpus tables the last fold replaced (its ``base_inputs``)
    when that fold was incremental, else None and why: what both a patched graph build and
    an updated corpus profile (``profile.profile_delta``) start from."""
    if not lake.exists(FOLD_MANIFEST):
        return None, f"{lake.path(FOLD_MANIFEST)}: missing"
    try:
        fold = json.loads(lake.read_bytes(FOLD_MANIFEST))
    except ValueError as exc:
        raise GraphInputError(f"{lake.path(FOLD_MANIFEST)}: not JSON ({exc})") from exc
    base = fold.get("base_inputs")
    if fold.get("mode") != "incremental" or not isinstance(base, dict):
        return None, f"the corpus was not folded incrementally (mode {fold.get('mode')!r})"
    return base, ""


def fold_base(
    lake: Lake,
    previous_build_id: str | None,
    build_id: str,
    inputs: dict[str, dict[str, str | int]],
    needed: tuple[str, ...],
) -> tuple[KGStore | None, str]:
    """The published build ``previous_build_id`` when the last fold changed its corpus into
    the one of ``inputs`` (the fingerprints of a build ``build_id`` of the same format) and
    left the fold files ``needed``; else None. And why."""
    if previous_build_id is None:
        return None, "no graph build was published before"
    if previous_build_id == build_id:
        return None, f"graph build {build_id} is the published one"
    base, why = incremental_fold_base(lake)
    if base is None:
        return None, why
    try:
        previous = KGStore.open(lake, previous_build_id)
    except (ValueError, FileNotFoundError) as exc:
        return None, f"graph build {previous_build_id} cannot be opened ({exc})"
    read = previous.manifest.get("inputs", {})
    for name in layout.CORPUS_INPUTS:
        if read.get(name) != base.get(name):
            return None, (
                f"graph build {previous_build_id} read another corpus {name} table than the "
                "one the last fold replaced"
            )
    for name in layout.MESH_INPUTS:
        if read.get(name) != inputs.get(name):
            return None, f"graph build {previous_build_id} read another MeSH {name} table"
    if previous.manifest.get("format") != layout.GRAPH_FORMAT:
        return None, f"graph build {previous_build_id} has format {previous.manifest.get('format')}"
    for key in needed:
        if not lake.exists(key):
            return None, f"{lake.path(key)}: missing"
    return previous, ""


def fold_table(lake: Lake, key: str, columns: list[str] | None = None) -> pa.Table:
    """One of the fold's change files (``columns`` of it, or every one)."""
    try:
        return lake.read_parquet(key, columns=columns)
    except (pa.ArrowException, OSError, KeyError) as exc:
        with_columns = f" with columns {columns}" if columns else ""
        raise GraphInputError(
            f"{lake.path(key)}: not readable as the fold's Parquet{with_columns} ({exc})"
        ) from exc


def touched_pmids(lake: Lake) -> np.ndarray:
    """The PMIDs the last fold touched (int64), strictly ascending."""
    touched = fold_table(lake, FOLD_TOUCHED, ["pmid"]).column("pmid").to_numpy()
    touched = touched.astype(np.int64, copy=False)
    if touched.size and np.any(touched[1:] <= touched[:-1]):
        raise GraphInputError(f"{lake.path(FOLD_TOUCHED)}: pmid is not strictly ascending")
    return touched


def changed_array(store: KGStore, names: tuple[str, ...]) -> str | None:
    """The first of the build's arrays ``names`` that no longer hashes as its manifest says
    (hashed on a thread per core the process may use, largest first)."""
    arrays = store.manifest["arrays"]
    largest = sorted(names, key=lambda name: -int(arrays[name]["nbytes"]))
    with ThreadPoolExecutor(workers()) as pool:
        hashed = dict(zip(largest, pool.map(array_sha256, map(store.array, largest)), strict=True))
    return next((name for name in names if hashed[name] != arrays[name]["sha256"]), None)
