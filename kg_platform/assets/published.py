"""How each asset's published objects are checked (integrity.py runs the checks): the
cheap check, the files whose stamps are compared with the materialisation, and the hashes,
per asset, each given the lake scoped to the partition, the partition's latest
materialisation and the listings. Every published object has one: the raw file
(pubmed_xml), a file's seven tables (pubmed_tables), the MeSH tables, the corpus parts, the
graph build and its pointer, the embedding index and the grounding index. Domain modules
that load numpy or Polars are imported when a check runs (`kg status` loads this at start)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kg_platform.orchestration.records import Recorded
from kg_platform.storage.lake import Lake
from kg_platform.storage.mesh import mesh_key
from kg_platform.storage.tables import file_tables_glob


def _dimensions(partition: str) -> dict[str, str]:
    found = getattr(partition, "keys_by_dimension", None)
    if found is None:
        raise ValueError(f"{partition!r}: not a multi-dimensional partition key")
    return dict(found)


class Listings:
    """Each folder's objects (bytes, when written), listed once per check of many
    partitions: 335 files' tables are seven listings, not 2,345 requests."""

    def __init__(self) -> None:
        self._found: dict[str, dict[str, tuple[int, float]]] = {}

    def of(self, lake: Lake, folder: str) -> dict[str, tuple[int, float]]:
        path = lake.path(folder)
        if path not in self._found:
            self._found[path] = lake.entries(folder)
        return self._found[path]

    def entry(self, lake: Lake, key: str) -> tuple[int, float] | None:
        folder, _, name = key.rpartition("/")
        return self.of(lake, folder).get(name)


@dataclass(frozen=True)
class Published:
    """How one asset's published object is checked, each function given the lake scoped to
    the partition, the partition's latest materialisation (None when not known) and the
    listings."""

    scope: Callable[[Lake, str], Lake]
    cheap: Callable[[Lake, Recorded | None, Listings], str | None]
    files: Callable[[Lake, Recorded | None, Listings], list[str]]  # what the stamp compares
    hashed: Callable[[Lake, Recorded | None, Listings], str | None]


def _digest_problem(lake: Lake, keys: list[str], m: Recorded | None, what: str) -> str | None:
    """The objects' content digest (Lake.digest, as the asset computed its data version)
    against the materialisation's data version; None when they agree or none is recorded."""
    if m is None or not m.data_version:
        return None
    digest = lake.digest(keys)[: len(m.data_version)]
    if digest == m.data_version:
        return None
    return (
        f"{what}: no longer hash to the data version of {m.asset}[{m.partition}] "
        f"({digest} != {m.data_version})"
    )


# -- the graph build -----------------------------------------------------------------------
def _graph_cheap(lake: Lake, *_) -> str | None:
    """The pointer is there (a materialised graph without one answers nothing), then the
    build it points at against its manifest."""
    from kg_platform.graph.layout import CURRENT_POINTER, published_problem

    if not lake.exists(CURRENT_POINTER):
        return f"{lake.path(CURRENT_POINTER)}: missing"
    return published_problem(lake)


def _graph_hashed(lake: Lake, *_) -> str | None:
    from kg_platform.graph.layout import published_problem

    return published_problem(lake, verify=True)


def _graph_files(lake: Lake, *_) -> list[str]:
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
def _corpus_cheap(lake: Lake, *_) -> str | None:
    """Every part the fold's manifest records is there at its size, and no other."""
    from kg_platform.pubmed.fold import parts_problem

    return parts_problem(lake)


def _corpus_files(lake: Lake, *_) -> list[str]:
    from kg_platform.storage.corpus import CORPUS_TABLES, corpus_parts

    return [key for table in CORPUS_TABLES for key in corpus_parts(lake, table)]


def _corpus_hashed(lake: Lake, materialised: Recorded | None, *_) -> str | None:
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


# -- the MeSH tables -----------------------------------------------------------------------
def _mesh_keys(m: Recorded | None) -> dict[str, int | None]:
    """key -> the bytes its materialisation records (``bytes_<table>``; None when not
    recorded), for each table of the MeSH year, in the order the data version hashed them."""
    from kg_platform.schemas import MESH_TABLES

    recorded = {
        k.removeprefix("bytes_"): v
        for k, v in (m.metadata if m else {}).items()
        if k.startswith("bytes_")
    }
    names = sorted(recorded) or sorted(MESH_TABLES)
    return {mesh_key(name): recorded.get(name) for name in names}


def _sized_problem(lake: Lake, seen: Listings, keys: dict[str, int | None], who: str) -> str | None:
    """The first key missing, or of another size than recorded."""
    for key, size in keys.items():
        entry = seen.entry(lake, key)
        if entry is None:
            return f"{lake.path(key)}: missing"
        if size is not None and entry[0] != int(size):
            return f"{lake.path(key)}: {entry[0]} bytes, {who} wrote {size}"
    return None


def _mesh_cheap(lake: Lake, m: Recorded | None, seen: Listings) -> str | None:
    return _sized_problem(lake, seen, _mesh_keys(m), f"mesh_tables[{m.partition if m else ''}]")


def _mesh_hashed(lake: Lake, m: Recorded | None, seen: Listings) -> str | None:
    keys = _mesh_keys(m)
    problem = _sized_problem(lake, seen, keys, f"mesh_tables[{m.partition if m else ''}]")
    return problem or _digest_problem(lake, list(keys), m, f"{lake.path('mesh')}: the tables")


# -- a file's tables -----------------------------------------------------------------------
def _file_table_keys(m: Recorded) -> list[str]:
    from kg_platform.schemas import PUBMED_TABLES
    from kg_platform.storage.tables import table_key

    # the tables the parse wrote (rows_<table>), in the order their digest hashed them
    written = sorted(k.removeprefix("rows_") for k in m.metadata if k.startswith("rows_"))
    return [table_key(t, m.partition) for t in written or sorted(PUBMED_TABLES)]


def _tables_cheap(lake: Lake, m: Recorded | None, seen: Listings) -> str | None:
    """Each of the file's tables is there, and together they are the bytes the parse wrote;
    when they are not, the first whose Parquet footer is cut is named."""
    if m is None:
        return None
    keys = _file_table_keys(m)
    total = 0
    for key in keys:
        entry = seen.entry(lake, key)
        if entry is None:
            return f"{lake.path(key)}: missing"
        total += entry[0]
    recorded = m.metadata.get("bytes_total")
    if recorded is None or total == int(recorded):
        return None
    for key in keys:
        size = seen.entry(lake, key)[0]  # type: ignore[index]
        with lake.open(key) as f:
            f.seek(max(0, size - 4))
            if size < 12 or f.read(4) != b"PAR1":
                return f"{lake.path(key)}: {size} bytes, cut short (no Parquet footer)"
    names = ", ".join(k.rsplit("/", 2)[1] for k in keys)
    return (
        f"{lake.path(file_tables_glob(m.partition))} ({names}): {total} bytes in all, "
        f"pubmed_tables[{m.partition}] wrote {recorded}"
    )


def _tables_files(lake: Lake, m: Recorded | None, *_) -> list[str]:
    return _file_table_keys(m) if m is not None else []


def _tables_hashed(lake: Lake, m: Recorded | None, seen: Listings) -> str | None:
    problem = _tables_cheap(lake, m, seen)
    if problem is not None or m is None:
        return problem
    return _digest_problem(lake, _file_table_keys(m), m, lake.path(file_tables_glob(m.partition)))


# -- the raw file --------------------------------------------------------------------------
def _raw_key(lake: Lake, m: Recorded | None, seen: Listings) -> str | None:
    """Where the file's latest download is: its pending key (a download not parsed yet,
    pubmed/source.py) when there is one, else its raw key; None when it is in neither."""
    from kg_platform.pubmed.source import SUB_DIRS, parse_source_name, pending_key, raw_key

    if m is None:
        return None
    for sub_dir in SUB_DIRS:
        f = parse_source_name(f"{m.partition}.xml.gz", sub_dir)
        if f is None:
            continue
        for key in (pending_key(f), raw_key(f)):
            if seen.entry(lake, key) is not None:
                return key
    return None


def _raw_cheap(lake: Lake, m: Recorded | None, seen: Listings) -> str | None:
    from kg_platform.pubmed.source import SUB_DIRS, parse_source_name, raw_key

    if m is None:
        return None
    key = _raw_key(lake, m, seen)
    if key is None:
        f = next(
            (f for d in SUB_DIRS if (f := parse_source_name(f"{m.partition}.xml.gz", d))), None
        )
        where = lake.path(raw_key(f)) if f is not None else m.partition
        if m.metadata.get("key"):
            where = lake.path(m.metadata["key"])
        return f"{where}: missing"
    recorded = m.metadata.get("bytes")
    size = seen.entry(lake, key)[0]  # type: ignore[index]
    if recorded is not None and size != int(recorded):
        return f"{lake.path(key)}: {size} bytes, the download was {recorded}"
    return None


def _raw_files(lake: Lake, m: Recorded | None, seen: Listings) -> list[str]:
    key = _raw_key(lake, m, seen)
    return [key] if key else []


def _raw_hashed(lake: Lake, m: Recorded | None, seen: Listings) -> str | None:
    import hashlib

    problem = _raw_cheap(lake, m, seen)
    if problem is not None or m is None or not m.data_version:
        return problem
    key = _raw_key(lake, m, seen)
    digest = hashlib.md5(usedforsecurity=False)
    with lake.open(key) as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    if digest.hexdigest() == m.data_version:
        return None
    return f"{lake.path(key)}: md5 {digest.hexdigest()}, the download verified {m.data_version}"


# -- the embedding and grounding indexes (their modules load numpy: imported when called) --
def _index_cheap(lake: Lake, *_) -> str | None:
    from kg_platform.embeddings.index import index_problem

    return index_problem(lake)


def _index_files(lake: Lake, *_) -> list[str]:
    from kg_platform.embeddings.index import INDEX_MANIFEST, INDEX_PMIDS, INDEX_VECTORS

    return [INDEX_MANIFEST, INDEX_PMIDS, INDEX_VECTORS] if lake.exists(INDEX_MANIFEST) else []


def _index_hashed(lake: Lake, *_) -> str | None:
    from kg_platform.embeddings.index import index_hash_problems

    return next(iter(index_hash_problems(lake)), None)


def _grounding_cheap(lake: Lake, *_) -> str | None:
    from kg_platform.grounding.index import published_problem

    return published_problem(lake)


def _grounding_files(lake: Lake, *_) -> list[str]:
    from kg_platform.grounding.index import INDEX_KEY, MANIFEST_KEY, SURFACES_KEY

    return [MANIFEST_KEY, SURFACES_KEY, INDEX_KEY] if lake.exists(MANIFEST_KEY) else []


def _grounding_hashed(lake: Lake, *_) -> str | None:
    from kg_platform.grounding.index import hash_problems

    return next(iter(hash_problems(lake)), None)


CHECKED: dict[str, Published] = {
    "pubmed_xml": Published(lambda lake, p: lake, _raw_cheap, _raw_files, _raw_hashed),
    "pubmed_tables": Published(lambda lake, p: lake, _tables_cheap, _tables_files, _tables_hashed),
    "mesh_tables": Published(
        lambda lake, p: lake.scoped(mesh_year=p),
        _mesh_cheap,
        lambda lake, m, *_: list(_mesh_keys(m)),
        _mesh_hashed,
    ),
    "graph": Published(
        lambda lake, p: lake.scoped(**_dimensions(p)),
        _graph_cheap,
        _graph_files,
        _graph_hashed,
    ),
    "corpus": Published(
        lambda lake, p: lake.scoped(release=p), _corpus_cheap, _corpus_files, _corpus_hashed
    ),
    "embedding_index": Published(
        lambda lake, p: lake.scoped(release=p),
        _index_cheap,
        _index_files,
        _index_hashed,
    ),
    "grounding_index": Published(
        lambda lake, p: lake.scoped(mesh_year=p),
        _grounding_cheap,
        _grounding_files,
        _grounding_hashed,
    ),
}
