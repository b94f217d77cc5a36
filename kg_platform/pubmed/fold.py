"""The release fold: every file of a release, in order, into the current state of PubMed.

Rules (NLM's): files are applied in order, baseline before updates. Per PMID the record from
the latest file wins, and within that file the highest ``Version``. A ``DeleteCitation`` in
a file later than the PMID's last record removes the PMID (a record re-issued after its
deletion comes back). Child rows (MeSH edges, citations, ...) are kept only for the winning
(pmid, version, file), so a revised record never mixes with rows of its older version.

The fold runs in DuckDB over the per-file Parquet tables; :func:`recount_fold_polars` is a
separate Polars implementation of the same rules that the corpus check compares against.

A daily update does not refold the release: when the lake holds the fold of the files before
it (``corpus/fold/``: the files, an identity of their tables, the DeleteCitation state),
:func:`fold_new_files` streams the previous corpus through, replacing the PMIDs the new files
touch. Its tables are byte for byte those of a full fold (``KG_FOLD_FULL=1`` forces one), and
the corpus check refolds a sample of PMID windows from every file to show it.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from kg_platform.checks import CheckOutcome
from kg_platform.storage.corpus import (
    CORPUS_TABLES,
    PMID_BUCKET,
    bucket_bounds,
    corpus_batches,
    corpus_fingerprint,
    corpus_folder,
    corpus_parts,
    legacy_key,
    part_bucket,
    part_key,
    part_name,
    read_corpus,
)
from kg_platform.storage.digest import file_sha256
from kg_platform.storage.lake import Lake

# rows per row group of a corpus/articles part: small enough that an answer's title lookup
# reads little (8 PMIDs touch at most 8 groups of titles), large enough that a part keeps a
# small footer (~15 groups; kg_platform.answer.titles)
ARTICLE_ROW_GROUP_ROWS = 16_384

CHILD_TABLES = [t for t in CORPUS_TABLES if t != "articles"]

# DuckDB's memory for the fold; past it the sorts and joins spill to the fold's staging folder.
# The articles sort carries every abstract (~60 GB for a 40M-record baseline), so without a
# limit it grows to DuckDB's default of 80% of RAM; a limit holds the RSS for some more CPU
# (benchmarks/build.py --fold-records; docs/BENCHMARKS.md, *The fold*).
FOLD_MEMORY_LIMIT_ENV = "KG_FOLD_MEMORY_LIMIT"
DEFAULT_FOLD_MEMORY_LIMIT = "4GB"
# The corpus tables are written sorted by PMID one PMID range at a time, each range holding
# at most this many surviving records: one range's articles (~1.5 KB of abstract each, ~1.5
# GB) sort within the memory limit, so no sort spills; the ranges are written in order, cut
# into one Parquet part per PMID bucket (kg_platform.storage.corpus). Sorting a whole release
# at once spills every abstract and costs about twice the CPU (benchmarks/build.py
# --fold-records; docs/BENCHMARKS.md, *The fold*). Each range re-reads the
# files whose PMIDs overlap it (with the footers cached), so fewer, larger ranges read less.
FOLD_RANGE_RECORDS = 1_000_000
# rows per row group of the other corpus tables (DuckDB's own default)
CHILD_ROW_GROUP_ROWS = 122_880


def table_key(table: str, file: str) -> str:
    return f"tables/{table}/{file}.parquet"


@dataclass(frozen=True)
class FoldResult:
    rows: dict[str, int]  # rows per corpus table
    deleted: int  # PMIDs that had a record and were removed by a later DeleteCitation
    deletions_listed: int  # distinct PMIDs named by DeleteCitation in these files
    dangling_citations: int  # citation rows whose cited PMID is not a corpus article
    files: list[str] = field(default_factory=list)
    mode: str = "full"  # full, incremental (new files folded into the corpus) or unchanged
    reason: str = ""  # why this mode: what the previous fold was, or why it could not be used
    new_files: int = 0  # files read beyond the previous fold (all of them in a full fold)
    touched_pmids: int = 0  # PMIDs with a record or a DeleteCitation in the new files
    touched_parts: list[int] = field(default_factory=list)  # buckets holding a touched PMID


def _check_files(lake: Lake, files: list[str]) -> None:
    if not files:
        raise ValueError("fold: no files given")
    if len(set(files)) != len(files):
        dupes = sorted({f for f in files if files.count(f) > 1})
        raise ValueError(f"fold: files listed twice: {', '.join(dupes[:5])}")
    for file in files:
        for table in [*CORPUS_TABLES, "deletions"]:
            if not lake.exists(table_key(table, file)):
                raise FileNotFoundError(
                    f"{file}: per-file table {table_key(table, file)} is missing; "
                    f"materialise pubmed_tables[{file}] first"
                )


def fold_memory_limit() -> str:
    """DuckDB's memory limit for the fold and the graph's recount (``KG_FOLD_MEMORY_LIMIT``)."""
    return os.environ.get(FOLD_MEMORY_LIMIT_ENV) or DEFAULT_FOLD_MEMORY_LIMIT


def _connect(
    lake: Lake, con: duckdb.DuckDBPyConnection | None, spill_dir: str
) -> duckdb.DuckDBPyConnection:
    """The caller's connection as it is, or a new one bounded to the fold's memory limit."""
    if con is not None:
        return con
    limit = fold_memory_limit()
    try:
        con = duckdb.connect(config={"memory_limit": limit, "temp_directory": spill_dir})
    except duckdb.Error as exc:
        raise ValueError(f"{FOLD_MEMORY_LIMIT_ENV}={limit!r}: not a DuckDB memory limit") from exc
    if not lake.is_local:
        con.register_filesystem(lake.fs)
    return con


def _run(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple]:
    # fetch every statement to the end: DuckDB 2 refuses new work while a result is open
    return con.execute(sql).fetchall()


def _scalar(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    return int(_run(con, sql)[0][0])


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _pmid_ranges(con: duckdb.DuckDBPyConnection, records: int) -> list[tuple[int, int]]:
    """Inclusive PMID bounds of consecutive ranges of at most ``records`` surviving PMIDs,
    covering every survivor, in order; one open range when there is none."""
    pmids = con.sql("SELECT pmid FROM fold_survivors ORDER BY pmid").fetchnumpy()["pmid"]
    if pmids.size == 0:
        return [(-(2**62), 2**62)]
    lows = pmids[::records]
    highs = np.append(lows[1:] - 1, pmids[-1])
    return [(int(lo), int(hi)) for lo, hi in zip(lows, highs, strict=True)]


class _GroupWriter:
    """Batches in PMID order into one zstd Parquet file at ``local``, in row groups of
    exactly ``group_rows`` rows but the last: the same rows give the same file, whichever
    batches they came in (a full fold and an incremental one write byte-identical tables)."""

    def __init__(self, local: str, group_rows: int, schema: pa.Schema | None = None) -> None:
        self.local, self.group_rows, self.schema = local, group_rows, schema
        self._writer: pq.ParquetWriter | None = None
        self._pending: list[pa.RecordBatch] = []
        self._held = 0
        self.rows = 0

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        if self.schema is None:
            self.schema = batch.schema
        batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
        for b in batches:
            self._pending.append(b.cast(self.schema) if b.schema != self.schema else b)
            self._held += b.num_rows
            self.rows += b.num_rows
        if self._held >= self.group_rows:
            self._flush(final=False)

    def _flush(self, final: bool) -> None:
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.local, self.schema, compression="zstd")
        table = pa.Table.from_batches(self._pending, schema=self.schema)
        whole = table.num_rows if final else table.num_rows - table.num_rows % self.group_rows
        if whole:
            # one chunk per column: the writer's page breaks follow its input's chunks
            whole_groups = table.slice(0, whole).combine_chunks()
            self._writer.write_table(whole_groups, row_group_size=self.group_rows)
        rest = table.slice(whole)
        self._pending = rest.to_batches()
        self._held = rest.num_rows

    def close(self) -> int:
        """Write what is held and close; the rows written."""
        try:
            if self.schema is not None:
                self._flush(final=True)
        finally:
            if self._writer is not None:
                self._writer.close()
        return self.rows


class _PartWriter:
    """Batches of one corpus table in PMID order into one part per PMID bucket under the
    local folder ``folder`` (part_name), each a _GroupWriter; ``written`` holds the rows
    of each part written, by bucket."""

    def __init__(self, folder: str, table: str, schema: pa.Schema | None = None) -> None:
        os.makedirs(folder, exist_ok=True)
        self.folder, self.table, self.schema = folder, table, schema
        self.written: dict[int, int] = {}
        self._bucket: int | None = None
        self._writer: _GroupWriter | None = None

    def _close_part(self) -> None:
        if self._writer is not None and self._bucket is not None:
            self.written[self._bucket] = self._writer.close()
        self._writer = None

    def _open(self, bucket: int) -> None:
        self._close_part()
        if bucket in self.written:
            raise ValueError(f"{self.table}: rows of bucket {bucket} came after later ones")
        local = os.path.join(self.folder, part_name(bucket))
        self._writer = _GroupWriter(local, _group_rows(self.table), self.schema)
        self._bucket = bucket

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        if self.schema is None:
            self.schema = batch.schema
        pmids = batch.column(CORPUS_TABLES[self.table]).to_numpy()
        if not len(pmids):
            return
        buckets = pmids // PMID_BUCKET
        cuts = [0, *(np.flatnonzero(np.diff(buckets)) + 1).tolist(), len(pmids)]
        for start, stop in zip(cuts, cuts[1:], strict=False):
            if int(buckets[start]) != self._bucket:
                self._open(int(buckets[start]))
            self._writer.add(batch.slice(start, stop - start))  # type: ignore[union-attr]

    def close(self, buckets: list[int] | None = None) -> dict[int, int]:
        """Close the last part, then write an empty part (the schema, no rows) for each of
        ``buckets`` that has none: every bucket holding an article has a part in every
        table. The rows of each part, by bucket."""
        self._close_part()
        for bucket in buckets or []:
            if bucket not in self.written:
                local = os.path.join(self.folder, part_name(bucket))
                self.written[bucket] = _GroupWriter(local, 1, self.schema).close()
        return self.written


def _write_parts(
    con: duckdb.DuckDBPyConnection,
    query: str,
    ranges: list[tuple[int, int]],
    writer: _PartWriter,
    buckets: list[int],
) -> dict[int, int]:
    """``query`` (ordered, with ``{lo}`` and ``{hi}`` for a range's PMID bounds) run range by
    range into ``writer``'s parts (a part for each of ``buckets``); the rows of each part.
    Each range is sorted on its own, in memory, and streamed to the part writers."""
    try:
        for lo, hi in ranges:
            reader = con.sql(query.format(lo=lo, hi=hi)).to_arrow_reader(CHILD_ROW_GROUP_ROWS)
            if writer.schema is None:
                writer.schema = reader.schema
            for batch in reader:
                writer.add(batch)
    finally:
        written = writer.close(buckets)
    return written


def _fold_tables(
    con: duckdb.DuckDBPyConnection,
    lake: Lake,
    files: list[str],
    window: str = "",
    only: set[str] | None = None,
) -> Callable[[str], str]:
    """fold_winners, fold_deletions and fold_survivors of ``files`` (all PMIDs, or those
    matching the SQL condition ``window``); returns the per-file union for a table. With
    ``only``, the other files are left out (each file kept keeps its place in the order):
    for a window, the files that hold none of its PMIDs."""

    def per_file(table: str) -> str:
        # each file's rows with its place in the fold order as a constant (no join on
        # the file name per row); file_row_number keeps the row order within a file
        return " UNION ALL ".join(
            f"SELECT *, {n}::INTEGER AS file_ord FROM read_parquet("
            f"{_sql_string(lake.path(table_key(table, f)))}, file_row_number=true)"
            for n, f in enumerate(files)
            if only is None or f in only
        )

    where = f"WHERE {window} " if window else ""
    # the winner per PMID from keys only: titles and abstracts are read once, at the output
    _run(
        con,
        "CREATE OR REPLACE TEMP TABLE fold_winners AS "
        f"SELECT pmid, version, file_ord FROM ({per_file('articles')}) {where}"
        "QUALIFY row_number() OVER (PARTITION BY pmid ORDER BY file_ord DESC, version DESC) = 1",
    )
    _run(
        con,
        "CREATE OR REPLACE TEMP TABLE fold_deletions AS "
        f"SELECT pmid, max(file_ord) AS deleted_ord FROM ({per_file('deletions')}) {where}"
        "GROUP BY pmid",
    )
    _run(
        con,
        "CREATE OR REPLACE TEMP TABLE fold_survivors AS "
        "SELECT w.* FROM fold_winners w LEFT JOIN fold_deletions d USING (pmid) "
        "WHERE d.deleted_ord IS NULL OR d.deleted_ord <= w.file_ord",
    )
    return per_file


def _rows_query(per_file: Callable[[str], str], table: str) -> str:
    """The surviving rows of ``table`` with PMIDs in [{lo}, {hi}], in corpus order."""
    pmid_col = CORPUS_TABLES[table]
    return (
        f"SELECT t.* EXCLUDE (file_ord, file_row_number) FROM ({per_file(table)}) t "
        f"JOIN fold_survivors s ON t.{pmid_col} = s.pmid AND t.version = s.version "
        f"AND t.file_ord = s.file_ord WHERE t.{pmid_col} BETWEEN {{lo}} AND {{hi}} "
        f"ORDER BY t.{pmid_col}, t.file_row_number"
    )


def _group_rows(table: str) -> int:
    return ARTICLE_ROW_GROUP_ROWS if table == "articles" else CHILD_ROW_GROUP_ROWS


def fold_release(
    lake: Lake, files: list[str], con: duckdb.DuckDBPyConnection | None = None
) -> FoldResult:
    """Fold the per-file tables of ``files`` (in processing order) into the corpus tables,
    one Parquet part per PMID bucket (kg_platform.storage.corpus).

    When the lake holds the fold of a prefix of ``files`` whose per-file tables are unchanged
    (corpus/fold/manifest.json), only the new files are folded into it
    (:func:`fold_new_files`): the same parts, byte for byte, as a full fold. Every part is
    written to local staging first and only then moved into the lake (each move atomic), so
    a failing fold leaves the previous corpus untouched.
    """
    _check_files(lake, files)
    stamps = file_stamps(lake, files)
    previous, reason = previous_fold(lake, files, stamps)
    if previous is not None:
        return fold_new_files(lake, files, previous, stamps, reason)
    own_connection = con is None
    staging = lake.staging_dir()
    try:
        con = _connect(lake, con, spill_dir=os.path.join(staging, "spill"))
        # every range's query opens every file: read each footer once
        _run(con, "SET parquet_metadata_cache = true")
        per_file = _fold_tables(con, lake, files)
        ranges = _pmid_ranges(con, FOLD_RANGE_RECORDS)
        buckets = [
            int(b)
            for (b,) in _run(
                con, f"SELECT DISTINCT pmid // {PMID_BUCKET} FROM fold_survivors ORDER BY 1"
            )
        ]
        rows: dict[str, int] = {}
        for table in CORPUS_TABLES:
            writer = _PartWriter(os.path.join(staging, table), table)
            written = _write_parts(con, _rows_query(per_file, table), ranges, writer, buckets)
            rows[table] = sum(written.values())
        state = con.sql(
            "SELECT d.pmid, d.deleted_ord, coalesce(d.deleted_ord > w.file_ord, false) AS removed "
            "FROM fold_deletions d LEFT JOIN fold_winners w USING (pmid) ORDER BY d.pmid"
        ).pl()
        dangling = (
            _scalar(
                con,
                f"SELECT count(*) FROM read_parquet('{os.path.join(staging, 'citations', '*')}') c "
                f"ANTI JOIN read_parquet('{os.path.join(staging, 'articles', '*')}') a "
                "ON c.cited_pmid = a.pmid",
            )
            if buckets
            else 0
        )
        result = FoldResult(
            rows=rows,
            deleted=int(state["removed"].sum()),
            deletions_listed=state.height,
            dangling_citations=int(dangling),
            files=list(files),
            mode="full",
            reason=reason,
            new_files=len(files),
        )
        _publish(lake, staging, result, stamps, state, _staged_parts(staging, {}))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if own_connection and con is not None:
            con.close()
    return result


# -- the incremental fold --------------------------------------------------------------------
# The fold's own state beside the corpus (not a corpus table: no catalog view, no listing):
# the files folded, an identity of each one's per-file tables, the corpus tables' sizes and
# figures, and every PMID named by a DeleteCitation (the last file naming it, and whether it
# removed a record), which is what a later update needs besides the corpus itself.
FOLD_MANIFEST = "corpus/fold/manifest.json"
FOLD_DELETIONS = "corpus/fold/deletions.parquet"
# what the last incremental fold changed, for a graph build that checks only the change
# (kg_platform.graph.checks): the PMIDs the new files touched, and the rows of those PMIDs
# the previous corpus held in these tables; the manifest's base_inputs are the fingerprints
# (Lake.fingerprint) of the corpus tables it replaced
FOLD_TOUCHED = "corpus/fold/touched.parquet"
REPLACED_TABLES = ("citations", "mesh_edges")
# and the rows of the touched PMIDs the new corpus holds (the new files' winners), in corpus
# order: a graph build patches the previous build's arrays with them (kg_platform.graph.patch)
ADDED_TABLES = ("articles", "citations", "mesh_edges", "corrections", "pubtypes")


def replaced_key(table: str) -> str:
    return f"corpus/fold/replaced_{table}.parquet"


def added_key(table: str) -> str:
    return f"corpus/fold/added_{table}.parquet"


# bump when the fold's rules or its state change: the next fold is then a full one
# (format 2: the corpus as parts per PMID bucket; format 1 kept each table in one file)
FOLD_FORMAT = 2
LAYOUT_CHANGE = "corpus layout: single files -> parts"
# KG_FOLD_FULL=1: every fold reads every file (the reference the incremental fold equals)
FULL_FOLD_ENV = "KG_FOLD_FULL"
STATE_SCHEMA = {"pmid": pl.Int64, "deleted_ord": pl.Int32, "removed": pl.Boolean}


def file_stamps(lake: Lake, files: list[str]) -> dict[str, str]:
    """An identity per file of its seven per-file tables (their sizes and modification times,
    or S3 ETags), so a file parsed again is never taken for the one a corpus was folded from."""
    parts: dict[str, list[str]] = {f: [] for f in files}
    for table in [*CORPUS_TABLES, "deletions"]:
        if lake.is_local:
            for f in files:
                st = os.stat(lake.path(table_key(table, f)))
                parts[f].append(f"{st.st_size}:{st.st_mtime_ns}")
            continue
        listed = {
            posixpath.basename(e["name"]).removesuffix(".parquet"): e
            for e in lake.fs.ls(lake.path(f"tables/{table}"), detail=True)
        }
        for f in files:
            entry = listed.get(f, {})
            parts[f].append(f"{entry.get('size')}:{entry.get('ETag') or entry.get('LastModified')}")
    return {f: hashlib.sha256("|".join(p).encode()).hexdigest()[:20] for f, p in parts.items()}


def previous_fold(lake: Lake, files: list[str], stamps: dict[str, str]) -> tuple[dict | None, str]:
    """The manifest of the corpus in ``lake`` when ``files`` can be folded into it (a prefix
    of ``files``, unchanged since, the corpus as that fold wrote it), else None; and why."""
    if os.environ.get(FULL_FOLD_ENV) == "1":
        return None, f"{FULL_FOLD_ENV}=1"
    if any(lake.exists(legacy_key(t)) for t in CORPUS_TABLES):
        return None, LAYOUT_CHANGE
    if not lake.exists(FOLD_MANIFEST):
        return None, "no previous fold in the lake"
    try:
        manifest = json.loads(lake.read_bytes(FOLD_MANIFEST))
        folded = list(manifest["files"])
        if manifest.get("format") == 1:
            return None, LAYOUT_CHANGE
        if manifest.get("format") != FOLD_FORMAT:
            return None, f"the previous fold has format {manifest.get('format')}"
        if not isinstance(manifest.get("parts"), dict):
            raise KeyError("parts")
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"{lake.path(FOLD_MANIFEST)}: unreadable ({exc})"
    if files[: len(folded)] != folded:
        return None, "the previous fold read other files"
    changed = [f for f in folded if manifest.get("stamps", {}).get(f) != stamps[f]]
    if changed:
        return None, f"{len(changed)} folded file(s) parsed again since (first: {changed[0]})"
    parts = manifest.get("parts", {})
    for table in CORPUS_TABLES:
        published = lake.sizes(corpus_folder(table))
        expected = {part_name(int(b)): e["bytes"] for b, e in parts.get(table, {}).items()}
        if published != expected:
            return (
                None,
                f"{lake.path(corpus_folder(table))} is not the table the previous fold wrote",
            )
    changed_part = _part_changed_since(lake, manifest)
    if changed_part is not None:
        return None, f"{lake.path(changed_part)} is not the part the previous fold wrote"
    if not lake.exists(FOLD_DELETIONS):
        return None, f"{lake.path(FOLD_DELETIONS)}: missing"
    return manifest, f"{len(folded)} files folded before"


def _part_changed_since(lake: Lake, manifest: dict) -> str | None:
    """The first corpus part overwritten since the fold at its size: written after the
    fold's manifest (which the fold writes last) and no longer of the sha256 the manifest
    records. Only such a part is read, so an untouched corpus costs a stat per part."""
    written = lake.modified(FOLD_MANIFEST)
    for table, entries in manifest["parts"].items():
        for bucket, entry in entries.items():
            key = part_key(table, int(bucket))
            if lake.modified(key) <= written:
                continue
            with lake.open(key) as f:
                if file_sha256(f) != entry["sha256"]:
                    return key
    return None


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return file_sha256(f)


def _staged_parts(staging: str, carried: dict[str, dict[str, dict]]) -> dict[str, dict[str, dict]]:
    """The parts of each table as they will be published: ``carried`` (bucket -> entry of
    the previous manifest, for the parts kept as they are) and those written under
    ``staging/<table>/``, each with its bytes, sha256 and rows, by bucket."""
    parts: dict[str, dict[str, dict]] = {}
    for table in CORPUS_TABLES:
        entries = dict(carried.get(table, {}))
        folder = os.path.join(staging, table)
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            local = os.path.join(folder, name)
            entries[str(part_bucket(name))] = {
                "bytes": os.path.getsize(local),
                "sha256": _sha256(local),
                "rows": pq.ParquetFile(local).metadata.num_rows,
            }
        parts[table] = dict(sorted(entries.items(), key=lambda e: int(e[0])))
    return parts


def corpus_digest(parts: dict[str, dict[str, dict]]) -> str:
    """The content identity of a corpus (the corpus asset's data version): sha256 over each
    part's key and sha256, tables in CORPUS_TABLES order, parts in PMID order."""
    digest = hashlib.sha256()
    for table in CORPUS_TABLES:
        for bucket, entry in sorted(parts.get(table, {}).items(), key=lambda e: int(e[0])):
            digest.update(f"{part_key(table, int(bucket))}\0{entry['sha256']}\n".encode())
    return digest.hexdigest()


def corpus_version(lake: Lake, verify: bool = False) -> str:
    """corpus_digest of the corpus in ``lake``: of the parts its fold's manifest records
    (what the corpus asset's data version is made of), or with ``verify`` of every part's
    bytes as they are now."""
    parts = _manifest_parts(lake)
    if verify:
        parts = {
            table: {
                bucket: {"sha256": _lake_sha256(lake, part_key(table, int(bucket)))}
                for bucket in entries
            }
            for table, entries in _listed_parts(lake).items()
        }
    return corpus_digest(parts)


def parts_problem(lake: Lake) -> str | None:
    """What of the corpus parts in ``lake`` is not as its fold's manifest records (a part
    missing, added or of another size), in one line; None when every part is."""
    expected = _manifest_parts(lake)
    for table in CORPUS_TABLES:
        folder = corpus_folder(table)
        published = lake.sizes(folder)
        if not published:
            return f"{lake.path(folder)}: missing"
        recorded = {part_name(int(b)): e["bytes"] for b, e in expected.get(table, {}).items()}
        for name in sorted(set(published) | set(recorded)):
            if name not in recorded:
                return f"{lake.path(folder)}/{name}: a part the fold did not write"
            if name not in published:
                return f"{lake.path(folder)}/{name}: missing"
            if published[name] != recorded[name]:
                return (
                    f"{lake.path(folder)}/{name}: {published[name]} bytes, the fold wrote "
                    f"{recorded[name]}"
                )
    return None


def _manifest_parts(lake: Lake) -> dict[str, dict[str, dict]]:
    try:
        return json.loads(lake.read_bytes(FOLD_MANIFEST))["parts"]
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{lake.path(FOLD_MANIFEST)}: missing; materialise `corpus`"
        ) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{lake.path(FOLD_MANIFEST)}: not a fold manifest with parts ({exc})"
        ) from None


def _listed_parts(lake: Lake) -> dict[str, list[str]]:
    return {t: [str(part_bucket(k)) for k in corpus_parts(lake, t)] for t in CORPUS_TABLES}


def _lake_sha256(lake: Lake, key: str) -> str:
    with lake.open(key) as f:
        return file_sha256(f)


def _publish(
    lake: Lake,
    staging: str,
    result: FoldResult,
    stamps: dict[str, str],
    state: pl.DataFrame,
    parts: dict[str, dict[str, dict]],
    change: dict[str, object] | None = None,
) -> None:
    """The parts written under ``staging`` and the fold's state, each moved into the lake
    atomically; the published parts that are not in ``parts`` (and the tables of the
    single-file layout) removed; after an incremental fold, ``change`` (base_inputs and the
    local files of FOLD_TOUCHED and each replaced_key) too. The manifest comes last."""
    change = change or {}
    state_local = os.path.join(staging, "deletions.parquet")
    state.select(pl.col(c).cast(t) for c, t in STATE_SCHEMA.items()).write_parquet(state_local)
    manifest = {
        "format": FOLD_FORMAT,
        "files": result.files,
        "stamps": stamps,
        "bucket": PMID_BUCKET,
        "parts": parts,
        "rows": result.rows,
        "deleted": result.deleted,
        "deletions_listed": result.deletions_listed,
        "dangling_citations": result.dangling_citations,
        # how this corpus was made, for the operator (never read back by the fold)
        "mode": result.mode,
        "reason": result.reason,
        "new_files": result.new_files,
        "touched_pmids": result.touched_pmids,
        "touched_parts": len(result.touched_parts),
        # the corpus this fold started from (only after an incremental fold)
        **({"base_inputs": change["base_inputs"]} if "base_inputs" in change else {}),
    }
    for table in CORPUS_TABLES:
        published = corpus_parts(lake, table)
        folder = os.path.join(staging, table)
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            lake.move_in(part_key(table, part_bucket(name)), os.path.join(folder, name))
        for key in published:
            if str(part_bucket(key)) not in parts[table]:
                lake.remove(key)
        if lake.exists(legacy_key(table)):
            lake.remove(legacy_key(table))
    lake.copy_in(FOLD_DELETIONS, state_local)
    for key, local in change.get("files", {}).items():  # type: ignore[union-attr]
        lake.copy_in(key, local)
    lake.write_bytes(FOLD_MANIFEST, json.dumps(manifest, indent=1).encode())


def _in_sorted(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Membership of each value in a sorted array without repeats."""
    if not len(sorted_set):
        return np.zeros(len(values), dtype=bool)
    at = np.searchsorted(sorted_set, values).clip(max=len(sorted_set) - 1)
    return sorted_set[at] == values


@dataclass(frozen=True)
class _Update:
    """What the new files decide: the PMIDs they touch and the records that now win."""

    touched: np.ndarray  # sorted PMIDs with a record or a DeleteCitation in the new files
    pmid: np.ndarray  # the surviving winners among the new files, by PMID
    version: np.ndarray
    file_ord: np.ndarray
    removed_with_record: np.ndarray  # PMIDs whose new record a later new file deletes
    deletions: pl.DataFrame  # pmid, deleted_ord: the last new file deleting each PMID


def _read_update(lake: Lake, files: list[str], first: int) -> _Update:
    new = list(enumerate(files[first:], start=first))
    records = pl.concat(
        [
            _read(lake, table_key("articles", f), ["pmid", "version"]).with_columns(
                pl.lit(n, pl.Int32).alias("file_ord")
            )
            for n, f in new
        ]
    )
    # latest file first, then highest version: the first row per PMID wins
    winners = records.sort(["pmid", "file_ord", "version"], descending=[False, True, True]).unique(
        subset="pmid", keep="first", maintain_order=True
    )
    deletions = (
        pl.concat(
            [
                _read(lake, table_key("deletions", f), ["pmid"]).with_columns(
                    pl.lit(n, pl.Int32).alias("file_ord")
                )
                for n, f in new
            ]
        )
        .group_by("pmid")
        .agg(pl.col("file_ord").max().alias("deleted_ord"))
        .sort("pmid")
    )
    joined = winners.join(deletions, on="pmid", how="left", maintain_order="left")
    later = pl.col("deleted_ord") > pl.col("file_ord")
    survivors = joined.filter(later.is_null() | ~later)
    return _Update(
        touched=np.union1d(winners["pmid"].to_numpy(), deletions["pmid"].to_numpy()),
        pmid=survivors["pmid"].to_numpy(),
        version=survivors["version"].to_numpy(),
        file_ord=survivors["file_ord"].to_numpy(),
        removed_with_record=joined.filter(later)["pmid"].to_numpy(),
        deletions=deletions,
    )


def _new_rows(lake: Lake, files: list[str], first: int, table: str, update: _Update) -> pa.Table:
    """The rows of ``table`` of the surviving new winners, in corpus order (by PMID, then as
    in the winning file)."""
    pmid_col = CORPUS_TABLES[table]
    parts = []
    for n, f in enumerate(files[first:], start=first):
        rows = lake.read_parquet(table_key(table, f))
        if not len(update.pmid) or not rows.num_rows:
            parts.append(rows.slice(0, 0))
            continue
        pmids = rows.column(pmid_col).to_numpy()
        at = np.searchsorted(update.pmid, pmids).clip(max=len(update.pmid) - 1)
        keep = (
            (update.pmid[at] == pmids)
            & (update.version[at] == rows.column("version").to_numpy())
            & (update.file_ord[at] == n)
        )
        parts.append(rows.filter(keep))
    rows = pa.concat_tables(parts, promote_options="permissive")
    order = np.argsort(rows.column(pmid_col).to_numpy(), kind="stable")
    return rows.take(order)


def _merged(
    lake: Lake,
    source_key: str | None,
    table: str,
    new: pa.Table,
    touched: np.ndarray,
    dropped: list[np.ndarray],
    replaced: list[pa.RecordBatch] | None = None,
) -> Iterator[pa.Table]:
    """One previous part (``source_key``; None when the bucket had none), row group by row
    group, without the touched PMIDs' rows, with the bucket's new rows (cast to the part's
    schema) merged in PMID order; the PMIDs dropped are appended to ``dropped`` (and, given
    ``replaced``, their rows to it)."""
    pmid_col = CORPUS_TABLES[table]
    new_pmids = new.column(pmid_col).to_numpy()
    taken = 0
    if source_key is not None:
        with lake.open(source_key) as f:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=_group_rows(table)):
                pmids = batch.column(pmid_col).to_numpy()
                drop = _in_sorted(pmids, touched)
                if drop.any():
                    dropped.append(pmids[drop])
                    if replaced is not None:
                        replaced.append(batch.filter(pa.array(drop)))
                    batch, pmids = batch.filter(pa.array(~drop)), pmids[~drop]
                if not len(pmids):
                    continue
                upto = int(np.searchsorted(new_pmids, pmids[-1], side="right"))
                if upto == taken:
                    yield pa.Table.from_batches([batch])
                    continue
                merged = pa.concat_tables(
                    [pa.Table.from_batches([batch]), new.slice(taken, upto - taken)]
                )
                taken = upto
                # PMIDs of the two sides never meet, so a stable sort keeps each one's order
                yield merged.take(np.argsort(merged.column(pmid_col).to_numpy(), kind="stable"))
    if taken < len(new_pmids):
        yield new.slice(taken)


def _part_schema(lake: Lake, previous: dict, table: str, new: pa.Table) -> pa.Schema:
    """The schema of a table's parts: that of a part the previous fold wrote (the full fold's
    own), else the new rows'."""
    for bucket in previous["parts"].get(table, {}):
        with lake.open(part_key(table, int(bucket))) as f:
            return pq.ParquetFile(f).schema_arrow
    return new.schema


def fold_new_files(
    lake: Lake, files: list[str], previous: dict, stamps: dict[str, str], reason: str
) -> FoldResult:
    """The corpus of ``files`` from the corpus of the prefix ``previous`` folded and the files
    after it: the touched PMIDs (a record or a DeleteCitation in a new file) take the new
    files' verdict, every other PMID keeps its rows. Only the parts of the buckets holding a
    touched PMID are rewritten (each previous one streamed one row group at a time); every
    other part stays the file it was, so the work grows with the new files, not the release."""
    first = len(previous["files"])
    if first == len(files):
        result = FoldResult(
            rows=previous["rows"],
            deleted=previous["deleted"],
            deletions_listed=previous["deletions_listed"],
            dangling_citations=previous["dangling_citations"],
            files=list(files),
            mode="unchanged",
            reason=reason,
        )
        return result
    update = _read_update(lake, files, first)
    # the corpus as it is before this fold: what the graph build of it recorded as inputs
    base_inputs = {t: corpus_fingerprint(lake, t) for t in CORPUS_TABLES}
    touched_buckets = [int(b) for b in np.unique(update.touched // PMID_BUCKET)]
    staging = lake.staging_dir()
    try:

        def rewrite(table: str) -> _Rewritten:
            new = _new_rows(lake, files, first, table, update)
            schema = _part_schema(lake, previous, table, new)
            new = new.cast(schema)
            new_pmids = new.column(CORPUS_TABLES[table]).to_numpy()
            writer = _PartWriter(os.path.join(staging, table), table, schema)
            done = _Rewritten(added=new)  # as the corpus holds them
            keep = done.replaced if table in REPLACED_TABLES else None
            try:
                for bucket in touched_buckets:
                    lo, hi = bucket_bounds(bucket)
                    start, stop = np.searchsorted(new_pmids, [lo, hi + 1])
                    had = str(bucket) in previous["parts"].get(table, {})
                    source = part_key(table, bucket) if had else None
                    rows = new.slice(int(start), int(stop - start))
                    for part in _merged(
                        lake, source, table, rows, update.touched, done.dropped, keep
                    ):
                        writer.add(part)
            finally:
                done.written = writer.close()
            done.writer = writer
            return done

        # two threads (pyarrow decodes, encodes and compresses without the GIL): the articles
        # and the citations beside the four smaller tables
        others = [t for t in CORPUS_TABLES if t not in ("articles", "citations")]
        with ThreadPoolExecutor(max_workers=2) as pool:
            first_two = pool.submit(lambda: [rewrite(t) for t in ("articles", "citations")])
            rest = pool.submit(lambda: [rewrite(t) for t in others])
            done = dict(
                zip(
                    ["articles", "citations", *others],
                    first_two.result() + rest.result(),
                    strict=True,
                )
            )
        # a touched bucket keeps a part in every table while it holds an article
        holding = sorted(b for b, n in done["articles"].written.items() if n)
        for table in CORPUS_TABLES:
            _settle_parts(staging, table, done[table], touched_buckets, holding)
        carried = {
            t: {
                b: e
                for b, e in previous["parts"].get(t, {}).items()
                if int(b) not in touched_buckets
            }
            for t in CORPUS_TABLES
        }
        parts = _staged_parts(staging, carried)
        rows = {t: sum(e["rows"] for e in parts[t].values()) for t in CORPUS_TABLES}
        present = done["articles"].dropped  # previous corpus PMIDs the new files touch
        state = _next_state(lake, update, np.concatenate([np.zeros(0, "<i8"), *present]))
        result = FoldResult(
            rows=rows,
            deleted=int(state["removed"].sum()),
            deletions_listed=state.height,
            dangling_citations=_dangling(lake, staging, parts, set(touched_buckets)),
            files=list(files),
            mode="incremental",
            reason=reason,
            new_files=len(files) - first,
            touched_pmids=len(update.touched),
            touched_parts=touched_buckets,
        )
        _publish(
            lake, staging, result, stamps, state, parts, _change(staging, update, done, base_inputs)
        )
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result


def _settle_parts(
    staging: str, table: str, done: _Rewritten, touched: list[int], holding: list[int]
) -> None:
    """A touched bucket's parts as a full fold leaves them: an empty part where the bucket
    holds articles but this table no rows, and no part where it holds no article."""
    for bucket in touched:
        local = os.path.join(staging, table, part_name(bucket))
        if bucket not in holding and os.path.exists(local):
            os.remove(local)
    done.writer.close(holding)  # type: ignore[union-attr]


def _dangling(
    lake: Lake, staging: str, parts: dict[str, dict[str, dict]], touched: set[int]
) -> int:
    """Citation rows whose cited PMID is no corpus article, over every part as it will be
    published (the touched buckets' from staging): two integer columns, never the rows."""

    def column(table: str, column: str) -> Iterator[np.ndarray]:
        for bucket in parts[table]:
            if int(bucket) in touched:
                rows = pq.read_table(
                    os.path.join(staging, table, part_name(int(bucket))), columns=[column]
                )
            else:
                rows = lake.read_parquet(part_key(table, int(bucket)), columns=[column])
            yield rows.column(column).to_numpy()

    articles = PmidSet(np.concatenate([np.zeros(0, "<i8"), *column("articles", "pmid")]))
    return sum(articles.missing(cited) for cited in column("citations", "cited_pmid"))


def _change(
    staging: str, update: _Update, done: dict[str, _Rewritten], base_inputs: dict
) -> dict[str, object]:
    """What an incremental fold changed, staged as local files: the touched PMIDs, the
    replaced rows of each of REPLACED_TABLES and the added rows of each of ADDED_TABLES
    (in corpus order)."""
    files = {}
    touched = os.path.join(staging, "touched.parquet")
    pq.write_table(pa.table({"pmid": pa.array(update.touched, pa.int64())}), touched)
    files[FOLD_TOUCHED] = touched
    for table in REPLACED_TABLES:
        local = os.path.join(staging, f"replaced_{table}.parquet")
        batches = done[table].replaced
        rows = (
            pa.Table.from_batches(batches) if batches else done[table].writer.schema.empty_table()  # type: ignore[union-attr]
        )
        pq.write_table(rows, local, compression="zstd")
        files[replaced_key(table)] = local
    for table in ADDED_TABLES:
        local = os.path.join(staging, f"added_{table}.parquet")
        pq.write_table(done[table].added, local, compression="zstd")
        files[added_key(table)] = local
    return {"base_inputs": base_inputs, "files": files}


@dataclass
class _Rewritten:
    """One corpus table rewritten by fold_new_files."""

    written: dict[int, int] = field(default_factory=dict)  # rows of each part, by bucket
    dropped: list[np.ndarray] = field(default_factory=list)  # previous PMIDs replaced
    replaced: list[pa.RecordBatch] = field(default_factory=list)  # previous rows dropped
    writer: _PartWriter | None = None
    added: pa.Table | None = None  # the touched PMIDs' rows written (the new winners')


def _next_state(lake: Lake, update: _Update, present: np.ndarray) -> pl.DataFrame:
    """The deletion state after the new files: a touched PMID is removed when a new file
    deletes its new record, or when only a DeleteCitation touched it and it had a record
    (it was in the corpus, or was removed before); every other PMID keeps its state."""
    previous = pl.from_arrow(lake.read_parquet(FOLD_DELETIONS))
    had_record = np.union1d(present, previous.filter(pl.col("removed"))["pmid"].to_numpy())
    named = update.deletions["pmid"].to_numpy()
    with_record = np.union1d(update.pmid, update.removed_with_record)
    deleted_only = named[~_in_sorted(named, with_record)]
    removed = np.union1d(
        update.removed_with_record, deleted_only[_in_sorted(deleted_only, had_record)]
    )
    merged = (
        pl.concat([previous.select("pmid", "deleted_ord"), update.deletions])
        .group_by("pmid")
        .agg(pl.col("deleted_ord").max())
        .join(previous.select("pmid", "removed"), on="pmid", how="left")
        .sort("pmid")
    )
    pmids = merged["pmid"].to_numpy()
    verdict = np.where(
        _in_sorted(pmids, update.touched),
        _in_sorted(pmids, removed),
        merged["removed"].fill_null(False).to_numpy(),
    )
    merged = merged.with_columns(pl.Series("removed", verdict, dtype=pl.Boolean))
    return merged.select(pl.col(c).cast(t) for c, t in STATE_SCHEMA.items())


# -- the independent recount ---------------------------------------------------------------
# Polars and numpy, never DuckDB; one per-file table at a time, so the peak follows the
# articles (a few integers per record) and never the child tables' rows (~800M citations
# for a 40M-record baseline).
def _read(lake: Lake, key: str, columns: list[str]) -> pl.DataFrame:
    return pl.from_arrow(lake.read_parquet(key, columns=columns))


def _batches(lake: Lake, key: str, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """A Parquet table of the lake (local, staged or S3) one row group at a time."""
    with lake.open(key) as f:
        yield from pq.ParquetFile(f).iter_batches(columns=columns)


def _file_codes(files: pl.Series, names: dict[str, int]) -> np.ndarray:
    """The file names as int32 codes, new names added to ``names`` (name -> code)."""
    for name in files.unique().to_list():
        names.setdefault(name, len(names))
    return files.replace_strict(names, return_dtype=pl.Int32).to_numpy()


# PMIDs run to ~42M, so a byte per possible PMID is a 42 MB set with O(1) lookups; past
# this bound (never seen in PubMed) the set falls back to a sorted array and binary search
PMID_BITMAP_MAX = 200_000_000


class PmidSet:
    """A set of PMIDs for membership of many values at once (numpy, no hashing)."""

    def __init__(self, pmids: np.ndarray) -> None:
        self._top = int(pmids.max()) if len(pmids) else -1
        if 0 <= self._top <= PMID_BITMAP_MAX and (not len(pmids) or pmids.min() >= 0):
            self._bitmap: np.ndarray | None = np.zeros(self._top + 1, dtype=bool)
            self._bitmap[pmids] = True
            self._sorted = None
        else:
            self._bitmap, self._sorted = None, np.unique(pmids)

    def missing(self, values: np.ndarray) -> int:
        """How many of ``values`` are not in the set."""
        if self._bitmap is not None:
            inside = (values >= 0) & (values <= self._top)
            return len(values) - int(self._bitmap[values[inside]].sum())
        if self._sorted is None or not len(self._sorted):
            return len(values)
        at = np.searchsorted(self._sorted, values).clip(max=len(self._sorted) - 1)
        return int((self._sorted[at] != values).sum())


def survivors_digest(
    pmid: np.ndarray, version: np.ndarray, file_code: np.ndarray, names: dict[str, int]
) -> str:
    """md5 over the sorted (pmid, version, file) of the surviving records: three numpy
    columns, the file as its rank among the distinct names in use, which the digest lists."""
    used = np.unique(file_code)
    by_code = {code: name for name, code in names.items()}
    in_use = sorted(by_code[int(c)] for c in used)
    rank = np.zeros(max(names.values(), default=0) + 1, dtype="<i4")
    rank[[names[n] for n in in_use]] = np.arange(len(in_use), dtype="<i4")
    file_rank = rank[file_code]
    order = np.lexsort((file_rank, version, pmid))
    digest = hashlib.md5(usedforsecurity=False)
    digest.update(np.ascontiguousarray(pmid[order], dtype="<i8").tobytes())
    digest.update(np.ascontiguousarray(version[order], dtype="<i8").tobytes())
    digest.update(np.ascontiguousarray(file_rank[order]).tobytes())
    digest.update("\n".join(in_use).encode())
    return digest.hexdigest()


def _records(lake: Lake, files: list[str], names: dict[str, int]) -> pl.DataFrame:
    """(pmid, version, file_code, file_ord) of every record of every file."""
    frames = []
    for ord_, file in enumerate(files):
        frame = _read(lake, table_key("articles", file), ["pmid", "version", "file"])
        frames.append(
            pl.DataFrame(
                {
                    "pmid": frame["pmid"],
                    "version": frame["version"],
                    "file_code": _file_codes(frame["file"], names),
                    "file_ord": np.full(frame.height, ord_, dtype=np.int32),
                }
            )
        )
    return pl.concat(frames, how="vertical")


def recount_fold_polars(lake: Lake, files: list[str]) -> dict[str, object]:
    """The fold again, in Polars, from the per-file tables: rows per table, deleted count,
    dangling citations and a digest of the surviving (pmid, version, file)."""
    _check_files(lake, files)
    names: dict[str, int] = {}
    records = (
        _records(lake, files, names)
        # latest file first, then highest version: the first row per PMID wins
        .sort(["pmid", "file_ord", "version"], descending=[False, True, True])
        .unique(subset="pmid", keep="first", maintain_order=True)
    )
    deletions = pl.concat(
        [
            _read(lake, table_key("deletions", f), ["pmid"]).with_columns(
                pl.lit(n, pl.Int32).alias("file_ord")
            )
            for n, f in enumerate(files)
        ]
    )
    last_deletion = deletions.group_by("pmid").agg(pl.col("file_ord").max().alias("deleted_ord"))
    joined = records.join(last_deletion, on="pmid", how="left")
    removed = joined.filter(pl.col("deleted_ord") > pl.col("file_ord")).height
    # the survivors grouped by the file their record came from, for one file at a time below
    survivors = joined.filter(
        pl.col("deleted_ord").is_null() | (pl.col("deleted_ord") <= pl.col("file_ord"))
    ).sort("file_ord")
    del records, joined
    starts = np.searchsorted(survivors["file_ord"].to_numpy(), np.arange(len(files) + 1))
    survivor_pmids = PmidSet(survivors["pmid"].to_numpy())
    rows = {"articles": survivors.height, **dict.fromkeys(CHILD_TABLES, 0)}
    dangling = 0
    for ord_, file in enumerate(files):
        keys = survivors.slice(starts[ord_], starts[ord_ + 1] - starts[ord_]).select(
            "pmid", "version"
        )
        for table in CHILD_TABLES:
            pmid_col = CORPUS_TABLES[table]
            cols = [pmid_col, "version"] + (["cited_pmid"] if table == "citations" else [])
            kept = _read(lake, table_key(table, file), cols).join(
                keys.rename({"pmid": pmid_col}), on=[pmid_col, "version"], how="inner"
            )
            rows[table] += kept.height
            if table == "citations":
                dangling += survivor_pmids.missing(kept["cited_pmid"].to_numpy())
    return {
        "rows": rows,
        "deleted": removed,
        "deletions_listed": last_deletion.height,
        "dangling_citations": dangling,
        "survivors_digest": survivors_digest(
            survivors["pmid"].to_numpy(),
            survivors["version"].to_numpy(),
            survivors["file_code"].to_numpy(),
            names,
        ),
    }


# -- checks on the written corpus ------------------------------------------------------------
def _corpus(lake: Lake, table: str, columns: list[str]) -> pl.DataFrame:
    return pl.from_arrow(read_corpus(lake, table, columns=columns))


def _digest_of(batches: Iterator[pa.RecordBatch]) -> str:
    """survivors_digest of articles' (pmid, version, file) batches."""
    names: dict[str, int] = {}
    pmid, version, file_code = [], [], []
    for batch in batches:
        frame = pl.from_arrow(batch)
        pmid.append(frame["pmid"].to_numpy())
        version.append(frame["version"].to_numpy())
        file_code.append(_file_codes(frame["file"], names))
    if not pmid:
        return survivors_digest(*(np.zeros(0, dtype=t) for t in ("<i8", "<i4", "<i4")), names)
    return survivors_digest(
        np.concatenate(pmid), np.concatenate(version), np.concatenate(file_code), names
    )


def _written_digest(lake: Lake) -> str:
    """survivors_digest of the corpus articles as written, read one row group at a time."""
    return _digest_of(corpus_batches(lake, "articles", ["pmid", "version", "file"]))


def check_one_row_per_pmid(lake: Lake) -> tuple[bool, str]:
    pmids = _corpus(lake, "articles", ["pmid"])["pmid"]
    duplicated = pmids.len() - pmids.n_unique()
    return duplicated == 0, f"{pmids.len()} rows, {duplicated} duplicated PMIDs"


def check_no_deleted_pmid(lake: Lake, files: list[str]) -> tuple[bool, str]:
    """No corpus PMID has a DeleteCitation in a file later than its record's file."""
    order = pl.DataFrame({"file": files, "record_ord": list(range(len(files)))})
    articles = _corpus(lake, "articles", ["pmid", "file"]).join(order, on="file", how="left")
    unknown = articles.filter(pl.col("record_ord").is_null()).height
    deletions = pl.concat(
        [
            _read(lake, table_key("deletions", f), ["pmid"]).with_columns(
                pl.lit(n, pl.Int32).alias("file_ord")
            )
            for n, f in enumerate(files)
        ]
    )
    present = articles.join(deletions, on="pmid").filter(pl.col("file_ord") > pl.col("record_ord"))
    bad = present["pmid"].unique().sort().to_list()
    details = f"{len(bad)} deleted PMIDs present" + (f": {bad[:10]}" if bad else "")
    if unknown:
        details += f"; {unknown} articles from files outside the release"
    return not bad and unknown == 0, details


def check_recount(lake: Lake, files: list[str], result: FoldResult) -> tuple[bool, str]:
    """DuckDB's fold (as written) against the Polars recount of every file."""
    recount = recount_fold_polars(lake, files)
    written = _written_digest(lake)
    ours = {
        "rows": result.rows,
        "deleted": result.deleted,
        "deletions_listed": result.deletions_listed,
        "dangling_citations": result.dangling_citations,
        "survivors_digest": written,
    }
    diffs = [f"{k}: duckdb {ours[k]} != polars {recount[k]}" for k in ours if ours[k] != recount[k]]
    return not diffs, "; ".join(diffs) or f"equal: rows {result.rows}, digest {written}"


def check_edge_sources_in_articles(lake: Lake) -> tuple[bool, str]:
    """Every child row's PMID is a corpus article; the child tables are read one row group
    at a time against the set of article PMIDs."""
    pmids = PmidSet(_corpus(lake, "articles", ["pmid"])["pmid"].to_numpy())
    orphans = {}
    for table in CHILD_TABLES:
        col = CORPUS_TABLES[table]
        orphans[table] = sum(
            pmids.missing(batch.column(0).to_numpy())
            for batch in corpus_batches(lake, table, [col])
        )
    bad = {t: n for t, n in orphans.items() if n}
    return not bad, (f"rows without a corpus article: {bad}" if bad else "all edge sources found")


# -- the checks of an incremental fold, on parts ---------------------------------------------
# untouched parts an incremental fold's checks judge besides every touched one, drawn at random
# (seeded by the file list)
SAMPLE_UNTOUCHED_PARTS = 3


def checked_parts(lake: Lake, files: list[str], result: FoldResult) -> tuple[list[int], list[int]]:
    """The buckets an incremental fold's checks judge: every touched one, and up to
    SAMPLE_UNTOUCHED_PARTS of the corpus's other parts, drawn with a seed from the file list."""
    touched = sorted(result.touched_parts)
    held = set(touched)
    others = [b for b in map(part_bucket, corpus_parts(lake, "articles")) if b not in held]
    seed = int(hashlib.sha256("\n".join(files).encode()).hexdigest()[:8], 16)
    drawn = np.random.default_rng(seed).permutation(len(others))[:SAMPLE_UNTOUCHED_PARTS]
    return touched, sorted(others[int(i)] for i in drawn)


def _named_parts(buckets: list[int], most: int = 12) -> str:
    names = [part_name(b).removesuffix(".parquet") for b in buckets]
    if not names:
        return "none"
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def _what_parts(
    touched: list[int],
    sampled: list[int],
    holding: list[str],
    files: list[str],
    of_touched: int | None = None,
) -> str:
    how_many = f"{len(touched)}" if of_touched is None else f"{len(touched)} of {of_touched}"
    return (
        f"{len(touched) + len(sampled)} parts ({how_many} touched: {_named_parts(touched)}; "
        f"{len(sampled)} untouched, sampled: {_named_parts(sampled)}), from the "
        f"{len(holding)} of {len(files)} files holding their PMIDs"
    )


def _in_buckets(column: str, buckets: list[int]) -> pl.Expr:
    return (pl.col(column) // PMID_BUCKET).is_in(buckets)


def recount_parts_polars(
    lake: Lake, files: list[str], buckets: list[int]
) -> tuple[dict[int, dict[str, object]], list[str]]:
    """The fold again, in Polars, for the PMIDs of ``buckets`` only, from the per-file tables
    of the files that may hold them (files_holding): per bucket, the rows of each table, the
    PMIDs removed by a DeleteCitation and the digest of the surviving (pmid, version, file);
    and the files read."""
    _check_files(lake, files)
    holding = files_holding(lake, files, [bucket_bounds(b) for b in buckets])
    order = {f: n for n, f in enumerate(files)}
    names: dict[str, int] = {}
    frames = []
    for file in holding:
        frame = _read(lake, table_key("articles", file), ["pmid", "version", "file"])
        frame = frame.filter(_in_buckets("pmid", buckets))
        frames.append(
            pl.DataFrame(
                {
                    "pmid": frame["pmid"],
                    "version": frame["version"],
                    "file_code": _file_codes(frame["file"], names),
                    "file_ord": np.full(frame.height, order[file], dtype=np.int32),
                }
            )
        )
    records = (
        pl.concat(frames, how="vertical")
        .sort(["pmid", "file_ord", "version"], descending=[False, True, True])
        .unique(subset="pmid", keep="first", maintain_order=True)
    )
    deletions = pl.concat(
        [
            _read(lake, table_key("deletions", f), ["pmid"])
            .filter(_in_buckets("pmid", buckets))
            .with_columns(pl.lit(order[f], pl.Int32).alias("file_ord"))
            for f in holding
        ]
    )
    last_deletion = deletions.group_by("pmid").agg(pl.col("file_ord").max().alias("deleted_ord"))
    joined = records.join(last_deletion, on="pmid", how="left").with_columns(
        (pl.col("pmid") // PMID_BUCKET).alias("bucket")
    )
    later = pl.col("deleted_ord") > pl.col("file_ord")
    removed = joined.filter(later)
    survivors = joined.filter(later.is_null() | ~later)
    out: dict[int, dict[str, object]] = {}
    for bucket in buckets:
        mine = survivors.filter(pl.col("bucket") == bucket)
        out[bucket] = {
            "rows": {"articles": mine.height, **dict.fromkeys(CHILD_TABLES, 0)},
            "removed": removed.filter(pl.col("bucket") == bucket).height,
            "digest": survivors_digest(
                mine["pmid"].to_numpy(),
                mine["version"].to_numpy(),
                mine["file_code"].to_numpy(),
                names,
            ),
        }
    for file in holding:
        keys = survivors.filter(pl.col("file_ord") == order[file]).select("pmid", "version")
        for table in CHILD_TABLES:
            pmid_col = CORPUS_TABLES[table]
            kept = (
                _read(lake, table_key(table, file), [pmid_col, "version"])
                .join(keys.rename({"pmid": pmid_col}), on=[pmid_col, "version"], how="inner")
                .group_by(pl.col(pmid_col) // PMID_BUCKET)
                .len()
            )
            for bucket, n in kept.iter_rows():
                out[int(bucket)]["rows"][table] += n  # type: ignore[index]
    return out, holding


def _written_part(lake: Lake, bucket: int) -> dict[str, object]:
    """One bucket's parts as written: the rows of each table (0 where there is no part) and
    the digest of its articles' (pmid, version, file)."""
    rows = {}
    for table in CORPUS_TABLES:
        key = part_key(table, bucket)
        if not lake.exists(key):
            rows[table] = 0
            continue
        with lake.open(key) as f:
            rows[table] = pq.ParquetFile(f).metadata.num_rows
    articles = part_key("articles", bucket)
    batches = (
        _batches(lake, articles, ["pmid", "version", "file"]) if rows["articles"] else iter([])
    )
    return {"rows": rows, "digest": _digest_of(batches)}


def check_recount_parts(lake: Lake, files: list[str], result: FoldResult) -> tuple[bool, str]:
    """An incremental fold's parts against the Polars recount, part by part, on every touched
    part and a sample of untouched ones (checked_parts), each recounted from the per-file
    tables that hold its PMIDs: the rows of every table, the surviving (pmid, version, file),
    and the PMIDs the fold's state says were removed."""
    touched, sampled = checked_parts(lake, files, result)
    buckets = sorted(touched + sampled)
    recount, holding = recount_parts_polars(lake, files, buckets)
    state = pl.from_arrow(lake.read_parquet(FOLD_DELETIONS, columns=["pmid", "removed"]))
    removed = state.filter(pl.col("removed") & _in_buckets("pmid", buckets))
    diffs = []
    for bucket in buckets:
        written, expected = _written_part(lake, bucket), recount[bucket]
        for table in CORPUS_TABLES:
            ours, theirs = written["rows"][table], expected["rows"][table]  # type: ignore[index]
            if ours != theirs:
                diffs.append(f"{part_key(table, bucket)}: {ours} rows, the recount {theirs}")
        if written["digest"] != expected["digest"]:
            diffs.append(
                f"{part_key('articles', bucket)}: other surviving (pmid, version, file) "
                "than the recount"
            )
        state_removed = removed.filter(pl.col("pmid") // PMID_BUCKET == bucket).height
        if state_removed != expected["removed"]:
            diffs.append(
                f"bucket {bucket}: {state_removed} PMIDs removed in {FOLD_DELETIONS}, "
                f"the recount {expected['removed']}"
            )
    what = _what_parts(touched, sampled, holding, files)
    if diffs:
        return False, f"recount differs on {what}: " + "; ".join(diffs)
    return True, f"recount equal on {what}"


def _pmid_bounds(lake: Lake, table: str, file: str) -> tuple[int, int] | None:
    """The lowest and highest PMID of one per-file table from its footer's row-group
    statistics; None when the table is empty, every PMID when a group has no statistics."""
    with lake.open(table_key(table, file)) as f:
        meta = pq.ParquetFile(f).metadata
    column = meta.schema.to_arrow_schema().get_field_index(CORPUS_TABLES.get(table, "pmid"))
    lows, highs = [], []
    for g in range(meta.num_row_groups):
        if not meta.row_group(g).num_rows:
            continue
        stats = meta.row_group(g).column(column).statistics
        if stats is None or not stats.has_min_max:
            return -(2**63), 2**63 - 1
        lows.append(stats.min)
        highs.append(stats.max)
    return (int(min(lows)), int(max(highs))) if lows else None


def files_holding(lake: Lake, files: list[str], bounds: list[tuple[int, int]]) -> list[str]:
    """The files, in order, whose per-file tables (any of the seven) may hold a PMID inside
    one of the inclusive ``bounds``: the PMID range of each table from its footer. A file
    outside every window adds nothing to a fold of the windows' PMIDs (a PMID's verdict
    reads only the rows naming it), so the refold can leave it out."""
    held = []
    for f in files:
        for table in [*CORPUS_TABLES, "deletions"]:
            span = _pmid_bounds(lake, table, f)
            if span is not None and any(lo <= span[1] and hi >= span[0] for lo, hi in bounds):
                held.append(f)
                break
    return held


def check_incremental_sample(
    lake: Lake, files: list[str], result: FoldResult, prune: bool = True
) -> tuple[bool, str]:
    """An incremental fold's parts against a full fold, row for row, on the first, middle and
    last touched parts and the sample of untouched ones (checked_parts). Their PMIDs are refolded in DuckDB from
    the per-file tables alone, with the full fold's own SQL restricted to them and to the
    files that hold any of them (NLM's files hold consecutive PMID ranges, so a part reads a
    few baseline files and the updates, not the release; ``prune=False`` reads every file,
    the reference benchmarks/fold_sample_check.py times it against)."""
    every_touched, sampled = checked_parts(lake, files, result)
    # the first, middle and last touched parts: polars_recount's Polars side has counted
    # every touched part; this one compares every column of a few, row for row
    of_touched = len(every_touched)
    middle = {0, of_touched // 2, of_touched - 1}
    touched = [every_touched[i] for i in sorted(middle)] if of_touched else []
    buckets = sorted(touched + sampled)
    bounds = [bucket_bounds(b) for b in buckets]
    staging = lake.staging_dir()
    con = None
    compared, diffs = 0, []
    try:
        con = _connect(lake, None, spill_dir=os.path.join(staging, "spill"))
        _run(con, "SET parquet_metadata_cache = true")
        # one refold for all the parts: their PMIDs only, from every file that holds any
        window = f"pmid // {PMID_BUCKET} IN ({', '.join(map(str, buckets))})"
        holding = files_holding(lake, files, bounds) if prune else list(files)
        per_file = _fold_tables(con, lake, files, window=f"({window})", only=set(holding))
        for table in CORPUS_TABLES:
            query = _rows_query(per_file, table).format(lo=bounds[0][0], hi=bounds[-1][1])
            refolded = con.sql(query).to_arrow_reader(1 << 16).read_all()
            pmids = refolded.column(CORPUS_TABLES[table]).to_numpy()
            for bucket, (lo, hi) in zip(buckets, bounds, strict=True):
                key = part_key(table, bucket)
                expected = refolded.filter(pa.array((pmids >= lo) & (pmids <= hi)))
                written = lake.read_parquet(key) if lake.exists(key) else None
                compared += 0 if written is None else written.num_rows
                if written is None and not expected.num_rows:
                    continue
                if written is None or not written.equals(expected.cast(written.schema)):
                    n = 0 if written is None else written.num_rows
                    same = n == expected.num_rows
                    diffs.append(
                        f"{key}: {n} rows written, a full fold gives {expected.num_rows}"
                        + (" (same count, other rows)" if same else "")
                    )
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if con is not None:
            con.close()
    what = f"{_what_parts(touched, sampled, holding, files, of_touched)} ({compared} rows)"
    if diffs:
        return False, f"incremental fold differs from a full fold on {what}: " + "; ".join(diffs)
    return True, f"incremental fold equals a full fold on {what}"


def fold_checks(lake: Lake, files: list[str], result: FoldResult) -> list[CheckOutcome]:
    """The four blocking corpus checks (contracts.CORPUS_CHECKS), each with its wall seconds
    (metadata ``seconds``). After an incremental fold, polars_recount recounts every touched
    part and a sample of untouched ones from the files holding their PMIDs
    (check_recount_parts) and refolds the sampled parts and three of the touched ones in
    DuckDB, requiring the same rows (check_incremental_sample); after a full fold it recounts
    every file (check_recount)."""

    def timed(name: str, check: Callable[[], tuple[bool, str]]) -> CheckOutcome:
        started = time.perf_counter()
        passed, details = check()
        return CheckOutcome(
            name, passed, details, {"seconds": round(time.perf_counter() - started, 3)}
        )

    def recount() -> tuple[bool, str]:
        if result.mode != "incremental":
            return check_recount(lake, files, result)
        passed, details = check_recount_parts(lake, files, result)
        sampled, sample_details = check_incremental_sample(lake, files, result)
        return passed and sampled, f"{details}; {sample_details}"

    return [
        timed("one_row_per_pmid", lambda: check_one_row_per_pmid(lake)),
        timed("no_deleted_pmid", lambda: check_no_deleted_pmid(lake, files)),
        timed("polars_recount", recount),
        timed("edge_sources_in_articles", lambda: check_edge_sources_in_articles(lake)),
    ]
