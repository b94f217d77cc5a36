"""Whether a published object still matches what was published: the instance can say a
partition is fresh while its files were truncated or overwritten since. `kg status` reports
such a partition as `corrupt`, naming the object, and `kg build` redoes it without --force.

Checked (cheap: listings and Parquet footers, no full read): the graph build (its pointer,
manifest and every array's size against the manifest; the graph's blocking check hashes
them), the corpus tables and the embedding index (its two arrays' sizes against its
manifest). With ``verify`` (`kg status --verify`) the graph's and the embedding index's
arrays are also hashed against the sha256 their manifests record (reads them all), as their
checks do at materialisation. The grounding index is not checked here yet."""

from __future__ import annotations

from collections.abc import Callable

from kg_platform.storage.lake import Lake


def _dimensions(partition: str) -> dict[str, str]:
    found = getattr(partition, "keys_by_dimension", None)
    if found is None:
        raise ValueError(f"{partition!r}: not a multi-dimensional partition key")
    return dict(found)


def graph_problem(lake: Lake, partition: str) -> str | None:
    from kg_platform.graph.layout import published_problem

    return published_problem(lake.scoped(**_dimensions(partition)))


def graph_hash_problem(lake: Lake, partition: str) -> str | None:
    from kg_platform.graph.layout import published_problem

    return published_problem(lake.scoped(**_dimensions(partition)), verify=True)


def corpus_problem(lake: Lake, release: str) -> str | None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kg_platform.pubmed.fold import CORPUS_TABLES

    scoped = lake.scoped(release=release)
    for table in CORPUS_TABLES:
        key = f"corpus/{table}.parquet"
        if not scoped.exists(key):
            return f"{scoped.path(key)}: missing"
        try:
            with scoped.open(key) as f:
                pq.ParquetFile(f).metadata  # noqa: B018 (reads and checks the footer)
        except (pa.ArrowInvalid, OSError) as exc:
            return f"{scoped.path(key)}: not a readable Parquet file ({exc})"
    return None


def embedding_index_problem(lake: Lake, release: str) -> str | None:
    from kg_platform.embeddings.index import index_problem

    return index_problem(lake.scoped(release=release))


def embedding_index_hash_problem(lake: Lake, release: str) -> str | None:
    from kg_platform.embeddings.index import index_hash_problems

    problems = index_hash_problems(lake.scoped(release=release))
    return problems[0] if problems else None


CHECKED: dict[str, Callable[[Lake, str], str | None]] = {
    "graph": graph_problem,
    "corpus": corpus_problem,
    "embedding_index": embedding_index_problem,
}
# the deeper checks of --verify (every byte read), in place of the cheap one
VERIFIED: dict[str, Callable[[Lake, str], str | None]] = {
    "graph": graph_hash_problem,
    "embedding_index": embedding_index_hash_problem,
}


def published_problem(
    lake: Lake, asset: str, partition: str | None, verify: bool = False
) -> str | None:
    """One line naming what of ``asset``'s published ``partition`` no longer matches what was
    published; None when it matches or the asset is not checked. ``verify`` also hashes what
    records hashes."""
    check = (verify and VERIFIED.get(asset)) or CHECKED.get(asset)
    if check is None or partition is None:
        return None
    try:
        return check(lake, partition)
    except (ValueError, OSError) as exc:
        return str(exc)


def damaged(lake_root: str) -> Callable[[object], bool]:
    """For the build planner: whether an AssetKeyPartitionKey's published object is corrupt."""
    lake = Lake(lake_root)
    return lambda ap: (
        published_problem(lake, ap.asset_key.to_user_string(), ap.partition_key) is not None
    )
