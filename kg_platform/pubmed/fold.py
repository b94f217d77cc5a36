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
from kg_platform.storage.digest import file_sha256
from kg_platform.storage.lake import Lake

# rows per row group of corpus/articles.parquet: small enough that an answer's title lookup
# reads little (8 PMIDs touch at most 8 groups of titles), large enough that a 40M-row table
# keeps a footer of ~2,400 groups (kg_platform.answer.titles)
ARTICLE_ROW_GROUP_ROWS = 16_384

# table -> the column holding the PMID of the record a row belongs to
CORPUS_TABLES: dict[str, str] = {
    "articles": "pmid",
    "mesh_edges": "pmid",
    "citations": "citing_pmid",
    "corrections": "pmid",
    "chemicals": "pmid",
    "pubtypes": "pmid",
}
CHILD_TABLES = [t for t in CORPUS_TABLES if t != "articles"]

# DuckDB's memory for the fold; past it the sorts and joins spill to the fold's staging folder.
# The articles sort carries every abstract (~60 GB for a 40M-record baseline), so without a
# limit it grows to DuckDB's default of 80% of RAM. Measured by benchmarks/build.py
# --fold-records: at 1M records a 1 GB limit held RSS at 1.2 GiB for 1.4x the CPU.
FOLD_MEMORY_LIMIT_ENV = "KG_FOLD_MEMORY_LIMIT"
DEFAULT_FOLD_MEMORY_LIMIT = "4GB"
# The corpus tables are written sorted by PMID one PMID range at a time, each range holding
# at most this many surviving records: one range's articles (~1.5 KB of abstract each, ~1.5
# GB) sort within the memory limit, so no sort spills; the ranges are written in order into
# one Parquet file. Sorting all 40M at once spilled ~60 GB of abstracts: at 5M records this
# halved the fold's CPU seconds (benchmarks/build.py --fold-records). Each range re-reads the
# files whose PMIDs overlap it (with the footers cached), so fewer, larger ranges read less.
FOLD_RANGE_RECORDS = 1_000_000
# rows per row group of the other corpus tables (DuckDB's own default)
CHILD_ROW_GROUP_ROWS = 122_880


def table_key(table: str, file: str) -> str:
    return f"tables/{table}/{file}.parquet"


def corpus_key(table: str) -> str:
    return f"corpus/{table}.parquet"


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
    sample_pmids: list[int] = field(default_factory=list)  # touched PMIDs the check looks at


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


def _write_in_pmid_order(
    con: duckdb.DuckDBPyConnection,
    query: str,
    ranges: list[tuple[int, int]],
    local: str,
    group_rows: int,
) -> int:
    """``query`` (ordered, with ``{lo}`` and ``{hi}`` for a range's PMID bounds) run range by
    range and written to ``local`` (zstd) in row groups of exactly ``group_rows`` rows but the
    last; returns the rows. Each range is sorted on its own, in memory, and streamed to one
    Parquet writer."""
    writer = _GroupWriter(local, group_rows)
    try:
        for lo, hi in ranges:
            reader = con.sql(query.format(lo=lo, hi=hi)).to_arrow_reader(group_rows)
            if writer.schema is None:
                writer.schema = reader.schema
            for batch in reader:
                writer.add(batch)
    finally:
        rows = writer.close()
    return rows


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
    """Fold the per-file tables of ``files`` (in processing order) into corpus/<table>.parquet.

    When the lake holds the fold of a prefix of ``files`` whose per-file tables are unchanged
    (corpus/fold/manifest.json), only the new files are folded into it
    (:func:`fold_new_files`): the same tables, byte for byte, as a full fold. All six tables
    are written to local staging first and only then copied into the lake (each copy
    atomic), so a failing fold leaves the previous corpus untouched.
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
        rows: dict[str, int] = {}
        for table in CORPUS_TABLES:
            local = os.path.join(staging, f"{table}.parquet")
            rows[table] = _write_in_pmid_order(
                con, _rows_query(per_file, table), ranges, local, _group_rows(table)
            )
        state = con.sql(
            "SELECT d.pmid, d.deleted_ord, coalesce(d.deleted_ord > w.file_ord, false) AS removed "
            "FROM fold_deletions d LEFT JOIN fold_winners w USING (pmid) ORDER BY d.pmid"
        ).pl()
        dangling = _scalar(
            con,
            f"SELECT count(*) FROM read_parquet('{os.path.join(staging, 'citations.parquet')}') c "
            f"ANTI JOIN read_parquet('{os.path.join(staging, 'articles.parquet')}') a "
            "ON c.cited_pmid = a.pmid",
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
        _publish(lake, staging, result, stamps, state)
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


def replaced_key(table: str) -> str:
    return f"corpus/fold/replaced_{table}.parquet"


# bump when the fold's rules or its state change: the next fold is then a full one
FOLD_FORMAT = 1
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
    if not lake.exists(FOLD_MANIFEST):
        return None, "no previous fold in the lake"
    try:
        manifest = json.loads(lake.read_bytes(FOLD_MANIFEST))
        folded = list(manifest["files"])
        if manifest.get("format") != FOLD_FORMAT:
            return None, f"the previous fold has format {manifest.get('format')}"
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"{lake.path(FOLD_MANIFEST)}: unreadable ({exc})"
    if files[: len(folded)] != folded:
        return None, "the previous fold read other files"
    changed = [f for f in folded if manifest.get("stamps", {}).get(f) != stamps[f]]
    if changed:
        return None, f"{len(changed)} folded file(s) parsed again since (first: {changed[0]})"
    for table in CORPUS_TABLES:
        key = corpus_key(table)
        expected = manifest.get("corpus_bytes", {}).get(table)
        if not lake.exists(key) or lake.size(key) != expected:
            return None, f"{lake.path(key)} is not the table the previous fold wrote"
    changed_table = _table_changed_since(lake, manifest)
    if changed_table is not None:
        return None, f"{lake.path(changed_table)} is not the table the previous fold wrote"
    if not lake.exists(FOLD_DELETIONS):
        return None, f"{lake.path(FOLD_DELETIONS)}: missing"
    return manifest, f"{len(folded)} files folded before"


def _table_changed_since(lake: Lake, manifest: dict) -> str | None:
    """The first corpus table overwritten since the fold at its size: written after the
    fold's manifest (which the fold writes last) and no longer of the sha256 the manifest
    records. Only such a table is read, so an untouched corpus costs a stat per table."""
    recorded = manifest.get("corpus_sha256", {})
    written = lake.modified(FOLD_MANIFEST)
    for table in CORPUS_TABLES:
        key = corpus_key(table)
        if table not in recorded or lake.modified(key) <= written:
            continue
        with lake.open(key) as f:
            if file_sha256(f) != recorded[table]:
                return key
    return None


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return file_sha256(f)


def _publish(
    lake: Lake,
    staging: str,
    result: FoldResult,
    stamps: dict[str, str],
    state: pl.DataFrame,
    change: dict[str, object] | None = None,
) -> None:
    """The corpus tables and the fold's state, each copied into the lake atomically; after
    an incremental fold, ``change`` (base_inputs and the local files of FOLD_TOUCHED and
    each replaced_key) too."""
    change = change or {}
    state_local = os.path.join(staging, "deletions.parquet")
    state.select(pl.col(c).cast(t) for c, t in STATE_SCHEMA.items()).write_parquet(state_local)
    manifest = {
        "format": FOLD_FORMAT,
        "files": result.files,
        "stamps": stamps,
        "corpus_bytes": {
            t: os.path.getsize(os.path.join(staging, f"{t}.parquet")) for t in CORPUS_TABLES
        },
        "corpus_sha256": {t: _sha256(os.path.join(staging, f"{t}.parquet")) for t in CORPUS_TABLES},
        "rows": result.rows,
        "deleted": result.deleted,
        "deletions_listed": result.deletions_listed,
        "dangling_citations": result.dangling_citations,
        # how this corpus was made, for the operator (never read back by the fold)
        "mode": result.mode,
        "reason": result.reason,
        "new_files": result.new_files,
        "touched_pmids": result.touched_pmids,
        # the corpus this fold started from (only after an incremental fold)
        **({"base_inputs": change["base_inputs"]} if "base_inputs" in change else {}),
    }
    for table in CORPUS_TABLES:
        lake.copy_in(corpus_key(table), os.path.join(staging, f"{table}.parquet"))
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
    table: str,
    new: pa.Table,
    touched: np.ndarray,
    dropped: list[np.ndarray],
    replaced: list[pa.RecordBatch] | None = None,
) -> Iterator[pa.Table]:
    """The previous corpus table, row group by row group, without the touched PMIDs' rows,
    with the new rows merged in PMID order; the PMIDs dropped are appended to ``dropped``
    (and, given ``replaced``, their rows to it)."""
    pmid_col = CORPUS_TABLES[table]
    new_pmids = new.column(pmid_col).to_numpy()
    taken = 0
    with lake.open(corpus_key(table)) as f:
        source = pq.ParquetFile(f)
        new = new.cast(source.schema_arrow)
        for batch in source.iter_batches(batch_size=_group_rows(table)):
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
            # PMIDs of the two sides never meet, so a stable sort keeps each one's row order
            yield merged.take(np.argsort(merged.column(pmid_col).to_numpy(), kind="stable"))
    if taken < len(new_pmids):
        yield new.slice(taken)


def fold_new_files(
    lake: Lake, files: list[str], previous: dict, stamps: dict[str, str], reason: str
) -> FoldResult:
    """The corpus of ``files`` from the corpus of the prefix ``previous`` folded and the files
    after it: the touched PMIDs (a record or a DeleteCitation in a new file) take the new
    files' verdict, every other PMID keeps its rows. The previous tables are streamed one
    row group at a time; the work beyond that copy grows with the new files, not the release."""
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
    base_inputs = {t: lake.fingerprint(corpus_key(t)) for t in CORPUS_TABLES}
    staging = lake.staging_dir()
    try:

        def rewrite(table: str, survivors: PmidSet | None = None) -> _Rewritten:
            new = _new_rows(lake, files, first, table, update)
            with lake.open(corpus_key(table)) as f:
                schema = pq.ParquetFile(f).schema_arrow
            local = os.path.join(staging, f"{table}.parquet")
            writer = _GroupWriter(local, _group_rows(table), schema)
            done = _Rewritten()
            keep = done.replaced if table in REPLACED_TABLES else None
            try:
                for part in _merged(lake, table, new, update.touched, done.dropped, keep):
                    writer.add(part)
                    if table == "articles":
                        done.pmids.append(part.column("pmid").to_numpy())
                    elif survivors is not None:
                        done.dangling += survivors.missing(part.column("cited_pmid").to_numpy())
            finally:
                done.rows = writer.close()
            return done

        def articles_then_citations() -> tuple[_Rewritten, _Rewritten]:
            articles = rewrite("articles")
            survivors = PmidSet(np.concatenate([np.zeros(0, "<i8"), *articles.pmids]))
            return articles, rewrite("citations", survivors)

        # two threads (pyarrow decodes, encodes and compresses without the GIL): the articles
        # and then the citations, which count dangling rows against the new articles, beside
        # the four smaller tables
        others = [t for t in CORPUS_TABLES if t not in ("articles", "citations")]
        with ThreadPoolExecutor(max_workers=2) as pool:
            first_two = pool.submit(articles_then_citations)
            rest = pool.submit(lambda: [rewrite(t) for t in others])
            articles, citations = first_two.result()
            done = {
                "articles": articles,
                "citations": citations,
                **dict(zip(others, rest.result(), strict=True)),
            }
        rows = {t: done[t].rows for t in CORPUS_TABLES}
        dangling = citations.dangling
        present = articles.dropped  # previous corpus PMIDs the new files touch
        state = _next_state(lake, update, np.concatenate([np.zeros(0, "<i8"), *present]))
        result = FoldResult(
            rows=rows,
            deleted=int(state["removed"].sum()),
            deletions_listed=state.height,
            dangling_citations=dangling,
            files=list(files),
            mode="incremental",
            reason=reason,
            new_files=len(files) - first,
            touched_pmids=len(update.touched),
            sample_pmids=[int(update.touched[i]) for i in _sample_at(len(update.touched))],
        )
        _publish(lake, staging, result, stamps, state, _change(staging, update, done, base_inputs))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result


def _change(
    staging: str, update: _Update, done: dict[str, _Rewritten], base_inputs: dict
) -> dict[str, object]:
    """What an incremental fold changed, staged as local files: the touched PMIDs and the
    replaced rows of each of REPLACED_TABLES (in corpus order)."""
    files = {}
    touched = os.path.join(staging, "touched.parquet")
    pq.write_table(pa.table({"pmid": pa.array(update.touched, pa.int64())}), touched)
    files[FOLD_TOUCHED] = touched
    for table in REPLACED_TABLES:
        local = os.path.join(staging, f"replaced_{table}.parquet")
        batches = done[table].replaced
        rows = (
            pa.Table.from_batches(batches)
            if batches
            else pq.read_schema(os.path.join(staging, f"{table}.parquet")).empty_table()
        )
        pq.write_table(rows, local, compression="zstd")
        files[replaced_key(table)] = local
    return {"base_inputs": base_inputs, "files": files}


@dataclass
class _Rewritten:
    """One corpus table rewritten by fold_new_files."""

    rows: int = 0
    dropped: list[np.ndarray] = field(default_factory=list)  # previous PMIDs replaced
    pmids: list[np.ndarray] = field(default_factory=list)  # the articles written
    replaced: list[pa.RecordBatch] = field(default_factory=list)  # previous rows dropped
    dangling: int = 0  # citation rows whose cited PMID is no corpus article


def _sample_at(n: int) -> list[int]:
    """Positions of the first, middle and last of ``n`` sorted values."""
    return sorted({0, n // 2, n - 1}) if n else []


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
    return pl.from_arrow(lake.read_parquet(corpus_key(table), columns=columns))


def _written_digest(lake: Lake) -> str:
    """survivors_digest of corpus/articles.parquet as written, read one row group at a time."""
    names: dict[str, int] = {}
    pmid, version, file_code = [], [], []
    for batch in _batches(lake, corpus_key("articles"), ["pmid", "version", "file"]):
        frame = pl.from_arrow(batch)
        pmid.append(frame["pmid"].to_numpy())
        version.append(frame["version"].to_numpy())
        file_code.append(_file_codes(frame["file"], names))
    if not pmid:
        return survivors_digest(*(np.zeros(0, dtype=t) for t in ("<i8", "<i4", "<i4")), names)
    return survivors_digest(
        np.concatenate(pmid), np.concatenate(version), np.concatenate(file_code), names
    )


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
    """DuckDB's fold (as written) against the Polars recount."""
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
            for batch in _batches(lake, corpus_key(table), [col])
        )
    bad = {t: n for t, n in orphans.items() if n}
    return not bad, (f"rows without a corpus article: {bad}" if bad else "all edge sources found")


# PMID windows of the written corpus that an incremental fold's check refolds from every file
SAMPLE_WINDOWS = 4


def _windows(lake: Lake) -> list[tuple[int, int]]:
    """The written articles' row groups as PMID windows covering every PMID: each from its
    group's first PMID (the first from the lowest possible) to the next group's first less one."""
    with lake.open(corpus_key("articles")) as f:
        meta = pq.ParquetFile(f).metadata
    column = meta.schema.to_arrow_schema().get_field_index("pmid")
    starts = [meta.row_group(g).column(column).statistics.min for g in range(meta.num_row_groups)]
    bounds = [-(2**62), *starts[1:], 2**62 + 1]
    return [(int(lo), int(hi) - 1) for lo, hi in zip(bounds, bounds[1:], strict=False)]


def _written_rows(lake: Lake, table: str, lo: int, hi: int) -> pa.Table:
    """The corpus rows of ``table`` with PMIDs in [lo, hi], in file order."""
    col = CORPUS_TABLES[table]
    with lake.open(corpus_key(table)) as f:
        source = pq.ParquetFile(f)
        index = source.schema_arrow.get_field_index(col)
        groups = []
        for g in range(source.metadata.num_row_groups):
            stats = source.metadata.row_group(g).column(index).statistics
            if stats is None or not stats.has_min_max or (stats.min <= hi and stats.max >= lo):
                groups.append(g)
        rows = source.read_row_groups(groups) if groups else source.schema_arrow.empty_table()
    pmids = rows.column(col).to_numpy()
    return rows.filter(pa.array((pmids >= lo) & (pmids <= hi)))


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
    """An incremental fold's tables against a full fold of every file, row for row, on a few
    PMID windows: those of the first, middle and last touched PMIDs and one chosen by the
    file list. The windows are refolded in DuckDB from the per-file tables alone, with the
    full fold's own SQL restricted to their PMIDs and to the files that hold any of them
    (NLM's files hold consecutive PMID ranges, so a window reads about one baseline file
    and the updates, not the release; ``prune=False`` reads every file, the reference
    benchmarks/fold_sample_check.py times it against)."""
    windows = _windows(lake)
    starts = np.array([lo for lo, _ in windows])
    picked = {int(np.searchsorted(starts, p, side="right")) - 1 for p in result.sample_pmids}
    seed = int(hashlib.sha256("\n".join(files).encode()).hexdigest()[:8], 16)
    picked.add(seed % len(windows))
    picked = sorted(picked)[:SAMPLE_WINDOWS]
    staging = lake.staging_dir()
    con = None
    compared, diffs = 0, []
    bounds = [windows[w] for w in picked]
    try:
        con = _connect(lake, None, spill_dir=os.path.join(staging, "spill"))
        _run(con, "SET parquet_metadata_cache = true")
        # one refold for all the windows: their PMIDs only, from every file that holds any
        window = " OR ".join(f"pmid BETWEEN {lo} AND {hi}" for lo, hi in bounds)
        holding = files_holding(lake, files, bounds) if prune else list(files)
        per_file = _fold_tables(con, lake, files, window=f"({window})", only=set(holding))
        for table in CORPUS_TABLES:
            query = _rows_query(per_file, table).format(lo=bounds[0][0], hi=bounds[-1][1])
            refolded = con.sql(query).to_arrow_reader(1 << 16).read_all()
            pmids = refolded.column(CORPUS_TABLES[table]).to_numpy()
            for lo, hi in bounds:
                written = _written_rows(lake, table, lo, hi)
                expected = refolded.filter(pa.array((pmids >= lo) & (pmids <= hi)))
                expected = expected.cast(written.schema)
                compared += written.num_rows
                if not written.equals(expected):
                    same = written.num_rows == expected.num_rows
                    diffs.append(
                        f"{table} PMIDs {lo}..{hi}: {written.num_rows} rows written, "
                        f"a full fold gives {expected.num_rows}"
                        + (" (same count, other rows)" if same else "")
                    )
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if con is not None:
            con.close()
    what = (
        f"{len(picked)} of {len(windows)} PMID windows ({compared} rows, "
        f"refolded from the {len(holding)} of {len(files)} files holding their PMIDs)"
    )
    if diffs:
        return False, f"incremental fold differs from a full fold on {what}: " + "; ".join(diffs)
    return True, f"incremental fold equals a full fold on {what}"


def fold_checks(lake: Lake, files: list[str], result: FoldResult) -> list[CheckOutcome]:
    """The four blocking corpus checks (contracts.CORPUS_CHECKS), each with its wall seconds
    (metadata ``seconds``). After an incremental fold, polars_recount also refolds a sample of PMID
    windows from every file and requires the same rows (check_incremental_sample)."""

    def timed(name: str, check: Callable[[], tuple[bool, str]]) -> CheckOutcome:
        started = time.perf_counter()
        passed, details = check()
        return CheckOutcome(
            name, passed, details, {"seconds": round(time.perf_counter() - started, 3)}
        )

    def recount() -> tuple[bool, str]:
        passed, details = check_recount(lake, files, result)
        if result.mode == "incremental":
            sampled, sample_details = check_incremental_sample(lake, files, result)
            return passed and sampled, f"{details}; {sample_details}"
        return passed, details

    return [
        timed("one_row_per_pmid", lambda: check_one_row_per_pmid(lake)),
        timed("no_deleted_pmid", lambda: check_no_deleted_pmid(lake, files)),
        timed("polars_recount", recount),
        timed("edge_sources_in_articles", lambda: check_edge_sources_in_articles(lake)),
    ]
