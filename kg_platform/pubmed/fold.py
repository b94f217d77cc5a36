"""The release fold: every file of a release, in order, into the current state of PubMed.

Rules (NLM's): files are applied in order, baseline before updates. Per PMID the record from
the latest file wins, and within that file the highest ``Version``. A ``DeleteCitation`` in
a file later than the PMID's last record removes the PMID (a record re-issued after its
deletion comes back). Child rows (MeSH edges, citations, ...) are kept only for the winning
(pmid, version, file), so a revised record never mixes with rows of its older version.

The fold runs in DuckDB over the per-file Parquet tables; :func:`recount_fold_polars` is a
separate Polars implementation of the same rules that the corpus check compares against.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

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


@dataclass(frozen=True)
class FoldCheck:
    name: str
    passed: bool
    details: str


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


def _connect(
    lake: Lake, con: duckdb.DuckDBPyConnection | None, spill_dir: str
) -> duckdb.DuckDBPyConnection:
    """The caller's connection as it is, or a new one bounded to the fold's memory limit."""
    if con is not None:
        return con
    limit = os.environ.get(FOLD_MEMORY_LIMIT_ENV) or DEFAULT_FOLD_MEMORY_LIMIT
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
    writer: pq.ParquetWriter | None = None
    pending: list[pa.RecordBatch] = []
    held = total = 0

    def flush(final: bool) -> None:
        nonlocal held, pending
        table = pa.Table.from_batches(pending, schema=schema)
        whole = table.num_rows if final else table.num_rows - table.num_rows % group_rows
        if whole:
            writer.write_table(table.slice(0, whole), row_group_size=group_rows)
        rest = table.slice(whole)
        pending = rest.to_batches()
        held = rest.num_rows

    try:
        for lo, hi in ranges:
            reader = con.sql(query.format(lo=lo, hi=hi)).to_arrow_reader(group_rows)
            if writer is None:
                schema = reader.schema
                writer = pq.ParquetWriter(local, schema, compression="zstd")
            for batch in reader:
                pending.append(batch)
                held += batch.num_rows
                total += batch.num_rows
                if held >= group_rows:
                    flush(final=False)
        flush(final=True)
    finally:
        if writer is not None:
            writer.close()
    return total


def fold_release(
    lake: Lake, files: list[str], con: duckdb.DuckDBPyConnection | None = None
) -> FoldResult:
    """Fold the per-file tables of ``files`` (in processing order) into corpus/<table>.parquet.

    All six tables are written to local staging first and only then copied into the lake
    (each copy atomic), so a failing fold leaves the previous corpus untouched.
    """
    _check_files(lake, files)
    own_connection = con is None
    staging = lake.staging_dir()
    try:
        con = _connect(lake, con, spill_dir=os.path.join(staging, "spill"))
        # every range's query opens every file: read each footer once
        _run(con, "SET parquet_metadata_cache = true")

        def per_file(table: str) -> str:
            # each file's rows with its place in the fold order as a constant (no join on
            # the file name per row); file_row_number keeps the row order within a file
            return " UNION ALL ".join(
                f"SELECT *, {n}::INTEGER AS file_ord FROM read_parquet("
                f"{_sql_string(lake.path(table_key(table, f)))}, file_row_number=true)"
                for n, f in enumerate(files)
            )

        # the winner per PMID from keys only: titles and abstracts are read once, at the output
        _run(
            con,
            "CREATE OR REPLACE TEMP TABLE fold_winners AS "
            f"SELECT pmid, version, file_ord FROM ({per_file('articles')}) "
            "QUALIFY row_number() OVER (PARTITION BY pmid ORDER BY file_ord DESC, version DESC) = 1",
        )
        _run(
            con,
            "CREATE OR REPLACE TEMP TABLE fold_deletions AS "
            f"SELECT pmid, max(file_ord) AS deleted_ord FROM ({per_file('deletions')}) GROUP BY pmid",
        )
        _run(
            con,
            "CREATE OR REPLACE TEMP TABLE fold_survivors AS "
            "SELECT w.* FROM fold_winners w LEFT JOIN fold_deletions d USING (pmid) "
            "WHERE d.deleted_ord IS NULL OR d.deleted_ord <= w.file_ord",
        )
        ranges = _pmid_ranges(con, FOLD_RANGE_RECORDS)
        rows: dict[str, int] = {}
        for table, pmid_col in CORPUS_TABLES.items():
            query = (
                f"SELECT t.* EXCLUDE (file_ord, file_row_number) FROM ({per_file(table)}) t "
                f"JOIN fold_survivors s ON t.{pmid_col} = s.pmid AND t.version = s.version "
                f"AND t.file_ord = s.file_ord WHERE t.{pmid_col} BETWEEN {{lo}} AND {{hi}} "
                f"ORDER BY t.{pmid_col}, t.file_row_number"
            )
            local = os.path.join(staging, f"{table}.parquet")
            group_rows = ARTICLE_ROW_GROUP_ROWS if table == "articles" else CHILD_ROW_GROUP_ROWS
            rows[table] = _write_in_pmid_order(con, query, ranges, local, group_rows)
        deleted = _scalar(
            con,
            "SELECT count(*) FROM fold_winners w JOIN fold_deletions d USING (pmid) "
            "WHERE d.deleted_ord > w.file_ord",
        )
        deletions_listed = _scalar(con, "SELECT count(*) FROM fold_deletions")
        dangling = _scalar(
            con,
            f"SELECT count(*) FROM read_parquet('{os.path.join(staging, 'citations.parquet')}') c "
            f"ANTI JOIN read_parquet('{os.path.join(staging, 'articles.parquet')}') a "
            "ON c.cited_pmid = a.pmid",
        )
        for table in CORPUS_TABLES:
            lake.copy_in(corpus_key(table), os.path.join(staging, f"{table}.parquet"))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if own_connection and con is not None:
            con.close()
    return FoldResult(
        rows=rows,
        deleted=int(deleted),
        deletions_listed=int(deletions_listed),
        dangling_citations=int(dangling),
        files=list(files),
    )


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


def fold_checks(lake: Lake, files: list[str], result: FoldResult) -> list[FoldCheck]:
    """The four blocking corpus checks, named as the corpus asset declares them."""
    return [
        FoldCheck("one_row_per_pmid", *check_one_row_per_pmid(lake)),
        FoldCheck("no_deleted_pmid", *check_no_deleted_pmid(lake, files)),
        FoldCheck("polars_recount", *check_recount(lake, files, result)),
        FoldCheck("edge_sources_in_articles", *check_edge_sources_in_articles(lake)),
    ]
