"""Whether a published object still matches what was published: the instance can say a
partition is fresh while its files were truncated or overwritten since. `kg status` reports
such a partition as `corrupt`, naming the object, and `kg build` redoes it without --force.

Three levels, cheapest first:
- the cheap check, on every status and every build plan (listings, Parquet footers, headers;
  no full read): the graph build (its pointer, manifest and every array's size against the
  manifest), the corpus tables (a readable footer), the embedding index (its two arrays'
  sizes against its manifest), the grounding index (both files' sizes against its manifest,
  the index file against its own header);
- the stamp: a file written after its partition's latest materialisation (its mtime, an S3
  object's LastModified, later than the instance's event) was changed since it was
  published, at any size. Files are published inside the asset's lake transaction, before
  Dagster records the materialisation, so a file the build wrote is never later than it.
  Such a partition's content is then hashed to confirm (a file copied or touched with the
  same bytes is not corrupt);
- the hashes (``verify``, `kg status --verify`: every byte read): each array or file
  against the sha256 its manifest records (the graph, the embedding index, the grounding
  index), the corpus tables against the data version of their materialisation (the digest
  of their bytes)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from kg_platform.storage.lake import Lake


@dataclass(frozen=True)
class Materialised:
    """A partition's latest materialisation, as the instance records it."""

    asset: str
    partition: str
    timestamp: float
    data_version: str | None


def last_materialised(instance, asset: str, partition: str) -> Materialised | None:
    """The latest materialisation of ``asset``'s ``partition`` in the instance (None when
    there is none)."""
    import dagster as dg

    found = instance.fetch_materializations(
        dg.AssetRecordsFilter(
            asset_key=dg.AssetKey.from_user_string(asset), asset_partitions=[partition]
        ),
        limit=1,
    ).records
    if not found:
        return None
    event = found[0].asset_materialization
    version = (event.tags or {}).get("dagster/data_version") if event is not None else None
    return Materialised(asset, partition, found[0].timestamp, version)


def _dimensions(partition: str) -> dict[str, str]:
    found = getattr(partition, "keys_by_dimension", None)
    if found is None:
        raise ValueError(f"{partition!r}: not a multi-dimensional partition key")
    return dict(found)


@dataclass(frozen=True)
class Published:
    """How one asset's published object is checked, each function given the lake scoped to
    the partition."""

    scope: Callable[[Lake, str], Lake]
    cheap: Callable[[Lake], str | None]
    files: Callable[[Lake], list[str]]  # the keys the stamp compares
    hashed: Callable[[Lake, Materialised | None], str | None]


def _deferred(function: str, first: bool = False, **kwargs) -> Callable[..., str | None]:
    """``module:name``, imported when first called (the domain modules load numpy and Polars;
    `kg status` imports this one at start), called on the lake with ``kwargs``; with
    ``first``, the first line of the list it returns, or None."""
    module, name = function.split(":")

    def call(lake: Lake, *_) -> str | None:
        found = getattr(importlib.import_module(module), name)(lake, **kwargs)
        return (found[0] if found else None) if first else found

    return call


def _listed(module: str, manifest: str, *others: str) -> Callable[[Lake], list[str]]:
    """The keys named ``manifest`` and ``others`` in ``module``, when the manifest is
    published (none before)."""

    def keys(lake: Lake) -> list[str]:
        found = [getattr(importlib.import_module(module), n) for n in (manifest, *others)]
        return found if lake.exists(found[0]) else []

    return keys


# -- the graph build -----------------------------------------------------------------------
def _graph_files(lake: Lake) -> list[str]:
    from kg_platform.graph.layout import (
        CURRENT_POINTER,
        array_key,
        current_build_id,
        manifest_key,
        read_manifest,
    )

    if not lake.exists(CURRENT_POINTER):
        return []
    build_id = current_build_id(lake)
    arrays = read_manifest(lake, build_id)["arrays"]
    return [CURRENT_POINTER, manifest_key(build_id), *(array_key(build_id, a) for a in arrays)]


# -- the corpus tables ---------------------------------------------------------------------
def _corpus_cheap(lake: Lake) -> str | None:
    """Every part the fold's manifest records is there at its size, and no other."""
    from kg_platform.pubmed.fold import parts_problem

    return parts_problem(lake)


def _corpus_files(lake: Lake) -> list[str]:
    from kg_platform.storage.corpus import CORPUS_TABLES, corpus_parts

    return [key for table in CORPUS_TABLES for key in corpus_parts(lake, table)]


def _corpus_hashed(lake: Lake, materialised: Materialised | None) -> str | None:
    """The parts against their materialisation's data version: the first 16 hex digits of
    fold.corpus_version over every part's bytes (assets/pubmed.py's corpus)."""
    from kg_platform.pubmed.fold import corpus_version

    problem = _corpus_cheap(lake)
    if problem is not None or materialised is None or not materialised.data_version:
        return problem
    digest = corpus_version(lake, verify=True)[: len(materialised.data_version)]
    if digest == materialised.data_version:
        return None
    return (
        f"{lake.path('corpus')}: the parts no longer hash to the data version "
        f"of corpus[{materialised.partition}] ({digest} != {materialised.data_version})"
    )


CHECKED: dict[str, Published] = {
    "graph": Published(
        lambda lake, p: lake.scoped(**_dimensions(p)),
        _deferred("kg_platform.graph.layout:published_problem"),
        _graph_files,
        _deferred("kg_platform.graph.layout:published_problem", verify=True),
    ),
    "corpus": Published(
        lambda lake, p: lake.scoped(release=p), _corpus_cheap, _corpus_files, _corpus_hashed
    ),
    "embedding_index": Published(
        lambda lake, p: lake.scoped(release=p),
        _deferred("kg_platform.embeddings.index:index_problem"),
        _listed("kg_platform.embeddings.index", "INDEX_MANIFEST", "INDEX_PMIDS", "INDEX_VECTORS"),
        _deferred("kg_platform.embeddings.index:index_hash_problems", first=True),
    ),
    "grounding_index": Published(
        lambda lake, p: lake.scoped(mesh_year=p),
        _deferred("kg_platform.grounding.index:published_problem"),
        _listed("kg_platform.grounding.index", "MANIFEST_KEY", "SURFACES_KEY", "INDEX_KEY"),
        _deferred("kg_platform.grounding.index:hash_problems", first=True),
    ),
}


def changed_since(lake: Lake, files: list[str], materialised: Materialised) -> str | None:
    """The files written after the materialisation, in one line with its time; None when
    none was."""
    import time

    later = [key for key in files if lake.modified(key) > materialised.timestamp]
    if not later:
        return None
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(materialised.timestamp))
    names = ", ".join(key.rsplit("/", 1)[1] for key in later)
    return (
        f"written after {materialised.asset}[{materialised.partition}] was materialised "
        f"at {when}: {names}"
    )


def published_problem(
    lake: Lake, asset: str, partition: str | None, verify: bool = False, instance=None
) -> str | None:
    """One line naming what of ``asset``'s published ``partition`` no longer matches what was
    published; None when it matches or the asset is not checked. With ``instance``, a file
    written after the partition's latest materialisation has its content hashed; with
    ``verify``, every published file is hashed."""
    checks = CHECKED.get(asset)
    if checks is None or partition is None:
        return None
    try:
        scoped = checks.scope(lake, partition)
        problem = checks.cheap(scoped)
        if problem is not None:
            return problem
        materialised = None
        if instance is not None:
            materialised = last_materialised(instance, asset, partition)
        if verify:
            return checks.hashed(scoped, materialised)
        if materialised is None:
            return None
        changed = changed_since(scoped, checks.files(scoped), materialised)
        if changed is None:
            return None
        problem = checks.hashed(scoped, materialised)
        return None if problem is None else f"{problem} ({changed})"
    except (ValueError, OSError) as exc:
        return str(exc)


def damaged(lake_root: str) -> Callable[..., bool]:
    """For the build planner: whether an AssetKeyPartitionKey's published object is corrupt
    (``instance``: the stamps are compared with its materialisations, so a file changed in
    place since is hashed)."""
    lake = Lake(lake_root)
    return lambda ap, instance=None: (
        published_problem(lake, ap.asset_key.to_user_string(), ap.partition_key, instance=instance)
        is not None
    )
