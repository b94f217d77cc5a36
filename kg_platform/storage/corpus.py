"""Where a release's corpus lives in the lake, and the one way to reach a corpus table.

Each corpus table (articles, citations, mesh_edges, ...) is a folder of Parquet parts,
``corpus/<table>/part-<bucket>.parquet``, one per fixed PMID bucket (``pmid // PMID_BUCKET``)
holding that bucket's rows in PMID order. The buckets are fixed, so an update that touches
few PMIDs rewrites few parts and leaves every other part's file as it was; new PMIDs land in
the last buckets. A bucket has a part in every table when it holds a corpus article (a child
table's part may hold no rows), and no part otherwise.

Readers never name a part file themselves: :func:`corpus_parts` lists a table's part keys in
PMID order, :func:`corpus_glob` is the lake glob of a table for DuckDB's ``read_parquet``,
:func:`read_corpus` and :func:`corpus_batches` read it with pyarrow, :func:`corpus_part_of`
gives the part holding one PMID, and :func:`corpus_fingerprint` names the table's bytes as
they are (what a graph build records of its inputs and a fold of the corpus it replaced).

The corpus lives in the storage layer beside the lake because the catalog (storage) makes its
views from it; the fold (kg_platform.pubmed.fold) is its only writer.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from kg_platform.storage.lake import Lake

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

CORPUS_PREFIX = "corpus"
# the fold's own state beside the corpus tables (kg_platform.pubmed.fold.manifest says what)
FOLD = f"{CORPUS_PREFIX}/fold"
FOLD_MANIFEST = f"{FOLD}/manifest.json"
FOLD_DELETIONS = f"{FOLD}/deletions.parquet"
FOLD_TOUCHED = f"{FOLD}/touched.parquet"
# table -> the column holding the PMID of the record a row belongs to (and cutting the parts)
CORPUS_TABLES: dict[str, str] = {
    "articles": "pmid",
    "mesh_edges": "pmid",
    "citations": "citing_pmid",
    "corrections": "pmid",
    "chemicals": "pmid",
    "pubtypes": "pmid",
}
# PMIDs per part: a 40M-record baseline (PMIDs up to ~42M) has ~170 parts of ~240k records
PMID_BUCKET = 250_000
_PART = re.compile(r"^part-(\d{5})\.parquet$")


def corpus_folder(table: str) -> str:
    """The lake key of a corpus table's folder of parts."""
    return f"{CORPUS_PREFIX}/{table}"


def part_key(table: str, bucket: int) -> str:
    """The lake key of one part of a corpus table."""
    return f"{corpus_folder(table)}/{part_name(bucket)}"


def part_bucket(key: str) -> int:
    """The bucket of a part key; a ValueError naming the key when it is not a part's."""
    match = _PART.match(key.rsplit("/", 1)[-1])
    if match is None:
        raise ValueError(f"{key}: not a corpus part (part-NNNNN.parquet)")
    return int(match.group(1))


def bucket_of(pmids: np.ndarray) -> np.ndarray:
    """The bucket of each PMID."""
    return pmids // PMID_BUCKET


def bucket_bounds(bucket: int) -> tuple[int, int]:
    """The inclusive PMID bounds of a bucket."""
    return bucket * PMID_BUCKET, (bucket + 1) * PMID_BUCKET - 1


def legacy_key(table: str) -> str:
    """Where the corpus kept a table as one file before the parts (read by nobody; the
    next fold replaces it with parts)."""
    return f"{CORPUS_PREFIX}/{table}.parquet"


def corpus_parts(lake: Lake, table: str) -> list[str]:
    """The part keys of a corpus table in PMID order ([] when it has none); inside a
    transaction, the parts as they will be published."""
    keys = lake.list(corpus_folder(table), suffix=".parquet")
    return sorted(keys, key=part_bucket)


def corpus_glob(table: str) -> str:
    """The lake glob of a corpus table's parts (``Lake.path`` of it is what DuckDB's
    ``read_parquet`` reads)."""
    return f"{corpus_folder(table)}/part-*.parquet"


def corpus_part_of(table: str, pmid: int) -> str:
    """The key of the part that holds ``pmid``'s rows if the corpus has them."""
    return part_key(table, int(pmid) // PMID_BUCKET)


def required_parts(lake: Lake, table: str) -> list[str]:
    """corpus_parts, a FileNotFoundError naming the folder when there are none."""
    parts = corpus_parts(lake, table)
    if not parts:
        raise FileNotFoundError(
            f"{lake.path(corpus_folder(table))}: no corpus parts; materialise `corpus` first"
        )
    return parts


def read_corpus(lake: Lake, table: str, columns: list[str] | None = None) -> pa.Table:
    """A whole corpus table (``columns`` of it), its parts in PMID order."""
    import pyarrow as pa

    tables = [lake.read_parquet(key, columns=columns) for key in required_parts(lake, table)]
    return pa.concat_tables(tables, promote_options="permissive")


def corpus_batches(
    lake: Lake, table: str, columns: list[str] | None = None, batch_size: int = 65_536
) -> Iterator[pa.RecordBatch]:
    """A corpus table one record batch at a time, part by part in PMID order."""
    import pyarrow.parquet as pq

    for key in required_parts(lake, table):
        with lake.open(key) as f:
            yield from pq.ParquetFile(f).iter_batches(batch_size=batch_size, columns=columns)


def corpus_rows(lake: Lake, table: str) -> int:
    """The rows of a corpus table, from its parts' footers."""
    import pyarrow.parquet as pq

    total = 0
    for key in required_parts(lake, table):
        with lake.open(key) as f:
            total += pq.ParquetFile(f).metadata.num_rows
    return total


def corpus_fingerprint(lake: Lake, table: str) -> dict[str, str | int]:
    """A corpus table's folder, part count, bytes and one stamp over every part's key, size
    and modification stamp (Lake.fingerprint): equal exactly when no part was written,
    added or removed since."""
    parts = required_parts(lake, table)
    prints = [lake.fingerprint(key) for key in parts]
    stamp = hashlib.sha256(
        "\n".join(f"{p['key']}:{p['size']}:{p['stamp']}" for p in prints).encode()
    ).hexdigest()[:20]
    return {
        "key": corpus_folder(table),
        "parts": len(parts),
        "size": sum(int(p["size"]) for p in prints),
        "stamp": stamp,
    }


def part_name(bucket: int) -> str:
    """The file name of a bucket's part (the last segment of :func:`part_key`)."""
    return f"part-{bucket:05d}.parquet"


def write_corpus_table(
    lake: Lake, table: str, rows: pa.Table, buckets: list[int] | None = None
) -> list[int]:
    """``rows`` of a corpus table written as its parts, each bucket's rows in their order in
    ``rows``, with an empty part for each of ``buckets`` that has no rows (the fold gives
    every bucket holding an article a part in every table), replacing the table's parts:
    for corpora made by hand (tests and benchmarks; the fold writes its own). The buckets
    written."""
    import numpy as np
    import pyarrow as pa

    for key in corpus_parts(lake, table):
        lake.remove(key)
    of_rows = bucket_of(rows.column(CORPUS_TABLES[table]).to_numpy())
    written = sorted({*np.unique(of_rows).tolist(), *(buckets or [])})
    for bucket in written:
        lake.write_parquet(part_key(table, int(bucket)), rows.filter(pa.array(of_rows == bucket)))
    return written
