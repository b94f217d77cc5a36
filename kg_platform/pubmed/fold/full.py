"""The full fold: every file of a release, in DuckDB over the per-file Parquet tables, into
the corpus parts, one PMID range at a time; a fold whose prefix the lake already holds goes to
the incremental fold instead (kg_platform.pubmed.fold.incremental)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kg_platform.pubmed.fold.base import FoldResult, PmidSet, check_files, table_key
from kg_platform.pubmed.fold.incremental import fold_new_files
from kg_platform.pubmed.fold.manifest import (
    file_stamps,
    part_entry,
    previous_fold,
    publish,
    staged_parts,
)
from kg_platform.pubmed.fold.parts import PartWriter, write_parts
from kg_platform.pubmed.fold.recount import pmid_bounds
from kg_platform.settings import FOLD_MEMORY_LIMIT_ENV, fold_memory_limit, usable_cores
from kg_platform.storage.corpus import CORPUS_TABLES, PMID_BUCKET, bucket_bounds, part_name
from kg_platform.storage.lake import Lake

# DuckDB's memory for the fold; past it the sorts and joins spill to the fold's staging folder.
# The articles sort carries every abstract (~60 GB for a 40M-record baseline), so without a
# limit it grows to DuckDB's default of 80% of RAM; a limit holds the RSS for some more CPU
# (benchmarks/build.py --fold-records; docs/BENCHMARKS.md, *The fold*).
# The corpus tables are written sorted by PMID one PMID range at a time, each range holding
# at most this many surviving records: one range's articles (~1.5 KB of abstract each, ~1.5
# GB) sort within the memory limit, so no sort spills; the ranges are written in order, cut
# into one Parquet part per PMID bucket (kg_platform.storage.corpus). Sorting a whole release
# at once spills every abstract and costs about twice the CPU (benchmarks/build.py
# --fold-records; docs/BENCHMARKS.md, *The fold*). Each range re-reads the
# files whose PMIDs overlap it (with the footers cached), so fewer, larger ranges read less.
# The ranges are written side by side, one per usable core, each of this many records over
# the cores (whole buckets, at least one), so the sorts at work at once hold about one such
# range together, whatever the cores.
FOLD_RANGE_RECORDS = 1_000_000
# the corpus tables of a few short columns and under one row per article, whose (range,
# table) tasks take a fraction of the others' time (pubtypes, the longest of them, about a
# seventh of the articles'), largest first: the fold runs them after every other task
SHORT_TABLES = ("pubtypes", "chemicals", "corrections")


def connect(
    lake: Lake, con: duckdb.DuckDBPyConnection | None, spill_dir: str
) -> duckdb.DuckDBPyConnection:
    """The caller's connection as it is, or a new one bounded to the fold's memory limit,
    with a thread per core this process may use (settings.usable_cores)."""
    if con is not None:
        return con
    limit = fold_memory_limit()
    config = {"memory_limit": limit, "temp_directory": spill_dir, "threads": usable_cores()}
    try:
        con = duckdb.connect(config=config)
    except duckdb.Error as exc:
        raise ValueError(f"{FOLD_MEMORY_LIMIT_ENV}={limit!r}: not a DuckDB memory limit") from exc
    if not lake.is_local:
        con.register_filesystem(lake.fs)
    return con


def run_sql(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple]:
    # fetch every statement to the end: DuckDB 2 refuses new work while a result is open
    return con.execute(sql).fetchall()


def run_sql_numpy(con: duckdb.DuckDBPyConnection, sql: str) -> dict[str, np.ndarray]:
    """A statement's result as numpy columns, fetched whole."""
    return con.execute(sql).fetchnumpy()


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _bucket_ranges(con: duckdb.DuckDBPyConnection, records: int) -> list[list[int]]:
    """The PMID buckets holding a survivor, in order, grouped into consecutive ranges of at
    most ``records`` survivors (or one bucket, when a bucket alone holds more): each range
    owns whole parts, so the ranges are written side by side (fold_release)."""
    counts = run_sql(
        con,
        f"SELECT pmid // {PMID_BUCKET} AS bucket, count(*) FROM fold_survivors "
        "GROUP BY bucket ORDER BY bucket",
    )
    ranges: list[list[int]] = []
    held = 0
    for bucket, n in counts:
        if not ranges or held + n > records:
            ranges.append([])
            held = 0
        ranges[-1].append(int(bucket))
        held += n
    return ranges


def fold_tables(
    con: duckdb.DuckDBPyConnection,
    lake: Lake,
    files: list[str],
    window: str = "",
    only: set[str] | None = None,
) -> Callable[..., str]:
    """The tables fold_winners, fold_deletions and fold_survivors (in the connection's
    in-memory database, so that its cursors see them too) of ``files`` (all PMIDs, or those
    matching the SQL condition ``window``); returns the per-file union for a table. With
    ``only``, the other files are left out (each file kept keeps its place in the order):
    for a window, the files that hold none of its PMIDs."""

    def per_file(table: str, among: set[str] | None = None) -> str:
        # each file's rows with its place in the fold order as a constant (no join on
        # the file name per row); file_row_number keeps the row order within a file.
        # ``among``: only these files as well (those that may hold a range's survivors)
        return " UNION ALL ".join(
            f"SELECT *, {n}::INTEGER AS file_ord FROM read_parquet("
            f"{_sql_string(lake.path(table_key(table, f)))}, file_row_number=true)"
            for n, f in enumerate(files)
            if (only is None or f in only) and (among is None or f in among)
        )

    where = f"WHERE {window} " if window else ""
    # the winner per PMID from keys only: titles and abstracts are read once, at the output.
    # The record of the last file holding the PMID, of that file's highest version (a null
    # version below any other, as a window ordered by file_ord DESC, version DESC ranks
    # it): one hash aggregate, where a window partitioned by PMID sorts every key (at 10M
    # records 2.8 CPU-s against 19, a third of it the kernel's page faults)
    run_sql(
        con,
        "CREATE OR REPLACE TABLE fold_winners AS "
        "SELECT pmid, arg_max_null(version, (file_ord, version IS NOT NULL, version)) AS version, "
        f"max(file_ord) AS file_ord FROM ({per_file('articles')}) {where}GROUP BY pmid",
    )
    run_sql(
        con,
        "CREATE OR REPLACE TABLE fold_deletions AS "
        f"SELECT pmid, max(file_ord) AS deleted_ord FROM ({per_file('deletions')}) {where}"
        "GROUP BY pmid",
    )
    run_sql(
        con,
        "CREATE OR REPLACE TABLE fold_survivors AS "
        "SELECT w.* FROM fold_winners w LEFT JOIN fold_deletions d USING (pmid) "
        "WHERE d.deleted_ord IS NULL OR d.deleted_ord <= w.file_ord",
    )
    return per_file


def rows_query(per_file: Callable[..., str], table: str) -> str:
    """The surviving rows of ``table`` with PMIDs in [{lo}, {hi}], in corpus order."""
    pmid_col = CORPUS_TABLES[table]
    return (
        f"SELECT t.* EXCLUDE (file_ord, file_row_number) FROM ({per_file(table)}) t "
        f"JOIN fold_survivors s ON t.{pmid_col} = s.pmid AND t.version = s.version "
        f"AND t.file_ord = s.file_ord WHERE t.{pmid_col} BETWEEN {{lo}} AND {{hi}} "
        f"ORDER BY t.{pmid_col}, t.file_row_number"
    )


class _Written:
    """What one (range, table) task wrote: its rows, the manifest entry of each part
    (manifest.part_entry) and, for the citations, the rows citing no corpus article."""

    def __init__(self) -> None:
        self.rows = 0
        self.entries: dict[str, dict] = {}
        self.dangling = 0


class _CitationWriter(PartWriter):
    """The citations' part writer, counting on the way the rows whose cited PMID is no
    survivor's (no corpus article's): the fold's dangling citations, range by range."""

    def __init__(self, folder: str, table: str, articles: PmidSet) -> None:
        super().__init__(folder, table)
        self.articles, self.dangling = articles, 0

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        cited = batch.column("cited_pmid")
        # a null cites no article (as the anti join counted it)
        self.dangling += cited.null_count + self.articles.missing(
            cited.drop_null().to_numpy() if cited.null_count else cited.to_numpy()
        )
        super().add(batch)


class _Survivors:
    """The survivors' keys (pmid, version, file_ord), sorted by PMID: which rows of a file a
    range keeps, looked up in numpy (no join)."""

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        self.pmid, self.version, self.file_ord = (
            np.asarray(columns[c]) for c in ("pmid", "version", "file_ord")
        )
        # a masked array holds a null, which no row's key equals (the join drops it)
        self.usable = not any(np.ma.isMaskedArray(columns[c]) for c in columns)

    def within(self, lo: int, hi: int) -> _RangeSurvivors:
        """The survivors with PMIDs in [lo, hi], for the lookups of one range's task."""
        start = int(np.searchsorted(self.pmid, lo, side="left"))
        stop = int(np.searchsorted(self.pmid, hi, side="right"))
        return _RangeSurvivors(
            lo, hi, self.pmid[start:stop], self.version[start:stop], self.file_ord[start:stop]
        )


def _sorted_kept(
    pmid: np.ndarray,
    version: np.ndarray,
    file_ord: np.ndarray,
    pmids: np.ndarray,
    versions: np.ndarray,
    ord_: int,
) -> np.ndarray:
    """Which of the rows (``pmids``, ``versions``, of the file at ``ord_``) have a key among
    the sorted survivors' keys (``pmid``, ``version``, ``file_ord``)."""
    if not len(pmid):
        return np.zeros(len(pmids), dtype=bool)
    at = np.searchsorted(pmid, pmids).clip(max=len(pmid) - 1)
    return (pmid[at] == pmids) & (file_ord[at] == ord_) & (version[at] == versions)


# the widest PMID range whose survivors a task spreads into arrays indexed by PMID (5 bytes a
# PMID: 10 MB); a wider range (sparse PMIDs) looks its rows up by binary search instead
DENSE_RANGE_PMIDS = 2_000_000


class _RangeSurvivors:
    """The survivors of one range [lo, hi]: a row's key looked up by PMID in arrays indexed
    by PMID - lo (one gather from arrays of a few MB, where a binary search over every
    survivor of the release costs a cache miss a step), or by binary search over the
    range's own survivors when the range is too wide (DENSE_RANGE_PMIDS)."""

    def __init__(
        self, lo: int, hi: int, pmid: np.ndarray, version: np.ndarray, file_ord: np.ndarray
    ) -> None:
        self.lo, self.hi = lo, hi
        self.pmid, self.version, self.file_ord = pmid, version, file_ord
        self.dense = hi - lo + 1 <= DENSE_RANGE_PMIDS
        if self.dense:
            at = pmid - lo
            # -1: no survivor at this PMID (no file's place in the fold order is negative)
            self.ord_by_pmid = np.full(hi - lo + 1, -1, dtype=np.int32)
            self.ord_by_pmid[at] = file_ord
            self.version_by_pmid = np.zeros(hi - lo + 1, dtype=version.dtype)
            self.version_by_pmid[at] = version

    def kept(self, pmids: np.ndarray, versions: np.ndarray, file_ord: int) -> np.ndarray:
        """Which rows (their PMIDs and versions, from the file at ``file_ord``) are in [lo,
        hi] and a survivor's: the rows the range query's join and bounds keep."""
        inside = (pmids >= self.lo) & (pmids <= self.hi)
        if not self.dense:
            return inside & _sorted_kept(
                self.pmid, self.version, self.file_ord, pmids, versions, file_ord
            )
        if inside.all():  # the usual case: a file inside the range, no mask to apply
            at = pmids - self.lo
            return (self.ord_by_pmid[at] == file_ord) & (self.version_by_pmid[at] == versions)
        at = pmids[inside] - self.lo
        found = self.ord_by_pmid[at] == file_ord
        found &= self.version_by_pmid[at] == versions[inside]
        inside[inside] = found
        return inside


def _column(table: pa.Table, name: str) -> np.ndarray:
    """A non-null integer column as numpy; a null becomes -1, which no PMID or version is."""
    column = table.column(name)
    if column.null_count:
        column = column.fill_null(-1)
    return column.to_numpy()


def _parquet(lake: Lake, key: str) -> AbstractContextManager:
    """What pyarrow opens a lake's Parquet file from: its path on a local lake (read
    natively, the GIL released), else the lake's file object."""
    return nullcontext(lake.path(key)) if lake.is_local else lake.open(key)


def _streamed_rows(
    lake: Lake,
    table: str,
    files: list[tuple[int, str]],
    bounds: tuple[int, int],
    survivors: _Survivors,
    schema: pa.Schema,
    writer: PartWriter,
) -> bool:
    """The rows the range query (rows_query) returns, without DuckDB, where that is only a
    concatenation: each of ``files`` (fold order, name) read in turn, its surviving rows in
    ``bounds`` (rows_query's join, in numpy) added to ``writer``. It holds when each file's
    kept rows are in PMID order and the files' kept PMIDs do not interleave (a PMID's rows
    all come from its winner's file), so that PMID order, then row order in the file, is
    the files' order: the order rows_query sorts into. That and each file's column types
    being ``schema``'s (what DuckDB returns) are checked first, from the PMID and version
    columns; False, with nothing written, when one does not hold (the caller runs the
    query). One file's rows are held at a time."""
    pmid_col = CORPUS_TABLES[table]
    ranged = survivors.within(*bounds)
    plan: list[tuple[str, np.ndarray, int, int]] = []
    for file_ord, name in files:
        with _parquet(lake, table_key(table, name)) as f:
            handle = pq.ParquetFile(f)
            if handle.schema_arrow.types != schema.types or (
                handle.schema_arrow.names != schema.names
            ):
                return False
            keys = handle.read(columns=[pmid_col, "version"], use_threads=False)
        pmids = _column(keys, pmid_col)
        keep = ranged.kept(pmids, _column(keys, "version"), file_ord)
        rows = pmids[keep]
        if not len(rows):
            continue
        if np.any(rows[1:] < rows[:-1]):
            return False
        plan.append((name, keep, int(rows[0]), int(rows[-1])))
    plan.sort(key=lambda p: p[2])
    if any(a[3] >= b[2] for a, b in zip(plan, plan[1:], strict=False)):
        return False
    for name, keep, _, _ in plan:
        with _parquet(lake, table_key(table, name)) as f:
            rows = pq.ParquetFile(f).read(use_threads=False)
        where = np.flatnonzero(keep)
        if where[-1] - where[0] + 1 == len(where):  # one run of rows: a slice, no copy
            rows = rows.slice(int(where[0]), len(where))
        else:
            rows = rows.filter(pa.array(keep))
        writer.add(rows.cast(schema))
    return True


def _write_tables(
    con: duckdb.DuckDBPyConnection,
    lake: Lake,
    files: list[str],
    per_file: Callable[..., str],
    ranges: list[list[int]],
    spans: dict[str, tuple[int, int] | None],
    staging: str,
    survivors: _Survivors,
    articles: PmidSet,
) -> list[tuple[str, _Written]]:
    """Every corpus table's parts, range by range (each range's buckets: _bucket_ranges),
    under ``staging``; what each (table, range) task wrote. A range of a table is one task,
    writing that range's own parts, so the tasks run side by side, on a thread per usable
    core, and their parts are those one writer would write (a part is one bucket's rows in
    corpus order, whoever writes it). A range reads the files whose records' PMIDs
    (``spans``, from the footers) reach into it. Where the files' surviving rows follow one
    another in PMID order (_streamed_rows: files of disjoint PMIDs, as in a baseline), the
    task reads them with pyarrow, file by file, keeping the survivors' rows (``survivors``),
    with no join or sort; elsewhere (a range where an update's records interleave with the
    baseline's) its rows are sorted by DuckDB, on a cursor of its own. pyarrow encodes the
    parts either way (releasing the GIL). Range by range, its articles first (the largest
    task), so the tasks at work at once write neighbouring ranges of different tables.
    Each task also hashes the parts it wrote and, for the citations, counts the rows citing
    none of ``articles`` (the survivors' PMIDs): work that would otherwise run on one
    thread after the last task, over every part again."""
    order = {f: n for n, f in enumerate(files)}
    schemas: dict[str, pa.Schema] = {}
    if survivors.usable:
        # the schema the range query returns (DuckDB's types for the per-file columns)
        for table in CORPUS_TABLES:
            empty = rows_query(lambda t: per_file(t, {files[0]}), table).format(lo=1, hi=0)
            schemas[table] = con.sql(empty).to_arrow_table().schema

    def write(table: str, buckets: list[int]) -> _Written:
        done = _Written()
        lo, hi = bucket_bounds(buckets[0])[0], bucket_bounds(buckets[-1])[1]
        # a child row survives only beside its file's winning record, so a range reads
        # the files whose records reach into it: the baseline files of its PMIDs and the
        # updates, not every file of the release for every range
        holding = {f for f, s in spans.items() if s is not None and s[0] <= hi and s[1] >= lo}
        folder = os.path.join(staging, table)

        def new_writer() -> PartWriter:
            if table == "citations":
                return _CitationWriter(folder, table, articles)
            return PartWriter(folder, table)

        writer = new_writer()
        streamed = False
        if table in schemas:
            writer.schema = schemas[table]
            held = sorted((order[f], f) for f in holding)
            try:
                streamed = _streamed_rows(
                    lake, table, held, (lo, hi), survivors, schemas[table], writer
                )
            except BaseException:
                writer.close()
                raise
        if streamed:
            written = writer.close(buckets)
        else:
            writer = new_writer()
            cursor = con.cursor()
            try:
                query = rows_query(lambda t: per_file(t, holding), table)
                written = write_parts(cursor, query, [(lo, hi)], writer, buckets)
            finally:
                cursor.close()
        done.rows = sum(written.values())
        done.entries = {
            str(b): part_entry(os.path.join(folder, part_name(b)), n) for b, n in written.items()
        }
        done.dangling = getattr(writer, "dangling", 0)
        return done

    # every range's long tasks first, range by range, then the short ones (SHORT_TABLES):
    # the threads end sharing out short tasks, not one thread finishing a range's citations
    # alone while the other waits
    tasks = [(t, buckets) for buckets in ranges for t in CORPUS_TABLES if t not in SHORT_TABLES]
    tasks += [(t, buckets) for t in SHORT_TABLES for buckets in ranges]
    with ThreadPoolExecutor(max_workers=min(usable_cores(), max(1, len(tasks)))) as pool:
        written = [pool.submit(write, table, buckets) for table, buckets in tasks]
        return [(table, f.result()) for (table, _), f in zip(tasks, written, strict=True)]


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
    check_files(lake, files)
    stamps = file_stamps(lake, files)
    previous, reason = previous_fold(lake, files, stamps)
    if previous is not None:
        return fold_new_files(lake, files, previous, stamps, reason)
    own_connection = con is None
    staging = lake.staging_dir()
    try:
        con = connect(lake, con, spill_dir=os.path.join(staging, "spill"))
        # every range's query opens every file: read each footer once
        run_sql(con, "SET parquet_metadata_cache = true")
        per_file = fold_tables(con, lake, files)
        ranges = _bucket_ranges(con, max(1, FOLD_RANGE_RECORDS // usable_cores()))
        # each file's PMID span from its footer, a footer read per file (a request each on
        # S3), on a thread per usable core
        with ThreadPoolExecutor(max_workers=usable_cores()) as pool:
            bounds = pool.map(lambda f: pmid_bounds(lake, "articles", f), files)
            spans = dict(zip(files, bounds, strict=True))
        keys = run_sql_numpy(
            con, "SELECT pmid, version, file_ord FROM fold_survivors ORDER BY pmid"
        )
        survivors, articles = _Survivors(keys), PmidSet(keys["pmid"])
        tasks = _write_tables(
            con, lake, files, per_file, ranges, spans, staging, survivors, articles
        )
        rows = dict.fromkeys(CORPUS_TABLES, 0)
        known: dict[str, dict[str, dict]] = {t: {} for t in CORPUS_TABLES}
        for table, done in tasks:
            rows[table] += done.rows
            known[table].update(done.entries)
        state = con.sql(
            "SELECT d.pmid, d.deleted_ord, coalesce(d.deleted_ord > w.file_ord, false) AS removed "
            "FROM fold_deletions d LEFT JOIN fold_winners w USING (pmid) ORDER BY d.pmid"
        ).pl()
        # the citations whose cited PMID is no corpus article (each task counted its own)
        dangling = sum(done.dangling for _, done in tasks)
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
        publish(lake, staging, result, stamps, state, staged_parts(staging, {}, known))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if own_connection and con is not None:
            con.close()
    return result
