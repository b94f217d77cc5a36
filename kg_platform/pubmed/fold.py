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

import contextlib
import hashlib
import os
import shutil
from dataclasses import dataclass, field

import duckdb
import polars as pl
import pyarrow as pa

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


def _sql_list(paths: list[str]) -> str:
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


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
        tables = [*CORPUS_TABLES, "deletions"]
        order = pa.table(
            {
                "path": [lake.path(table_key(t, f)) for t in tables for f in files],
                "file_ord": pa.array([n for _ in tables for n in range(len(files))], pa.int32()),
            }
        )
        con.register("fold_order", order)

        def per_file(table: str) -> str:
            # file_ord from the path each row came from; file_row_number keeps row order stable
            paths = _sql_list([lake.path(table_key(table, f)) for f in files])
            return (
                f"SELECT t.* EXCLUDE (filename), o.file_ord FROM read_parquet({paths}, "
                f"filename=true, file_row_number=true) t JOIN fold_order o ON t.filename = o.path"
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
        rows: dict[str, int] = {}
        for table, pmid_col in CORPUS_TABLES.items():
            query = (
                f"SELECT t.* EXCLUDE (file_ord, file_row_number) FROM ({per_file(table)}) t "
                f"JOIN fold_survivors s ON t.{pmid_col} = s.pmid AND t.version = s.version "
                f"AND t.file_ord = s.file_ord ORDER BY t.{pmid_col}, t.file_row_number"
            )
            local = os.path.join(staging, f"{table}.parquet")
            groups = f", ROW_GROUP_SIZE {ARTICLE_ROW_GROUP_ROWS}" if table == "articles" else ""
            _run(con, f"COPY ({query}) TO '{local}' (FORMAT parquet, COMPRESSION zstd{groups})")
            rows[table] = _scalar(con, f"SELECT count(*) FROM read_parquet('{local}')")
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
        if not own_connection:
            # leave the caller's connection as it was (temp fold_* tables aside)
            with contextlib.suppress(duckdb.Error):
                con.unregister("fold_order")
        elif con is not None:
            con.close()
    return FoldResult(
        rows=rows,
        deleted=int(deleted),
        deletions_listed=int(deletions_listed),
        dangling_citations=int(dangling),
        files=list(files),
    )


# -- the independent recount ---------------------------------------------------------------
def _scan(lake: Lake, table: str, files: list[str], columns: list[str]) -> pl.LazyFrame:
    """One table of every file with its file_ord, read by Polars (not DuckDB)."""
    frames = []
    for ord_, file in enumerate(files):
        key = table_key(table, file)
        if lake.is_local:
            frame = pl.scan_parquet(lake.local_path(key)).select(columns)
        else:
            frame = pl.from_arrow(lake.read_parquet(key, columns=columns)).lazy()
        frames.append(frame.with_columns(pl.lit(ord_, pl.Int32).alias("file_ord")))
    return pl.concat(frames, how="vertical")


def survivors_digest(frame: pl.DataFrame) -> str:
    """md5 over the sorted (pmid, version, file) of the surviving records."""
    text = "\n".join(
        f"{p}:{v}:{f}"
        for p, v, f in frame.select("pmid", "version", "file").sort("pmid").iter_rows()
    )
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


def recount_fold_polars(lake: Lake, files: list[str]) -> dict[str, object]:
    """The fold again, in Polars, from the per-file tables: rows per table, deleted count,
    dangling citations and a digest of the surviving (pmid, version, file)."""
    _check_files(lake, files)
    records = (
        _scan(lake, "articles", files, ["pmid", "version", "file"])
        .collect()
        # latest file first, then highest version: the first row per PMID wins
        .sort(["pmid", "file_ord", "version"], descending=[False, True, True])
        .unique(subset="pmid", keep="first", maintain_order=True)
    )
    last_deletion = (
        _scan(lake, "deletions", files, ["pmid"])
        .group_by("pmid")
        .agg(pl.col("file_ord").max().alias("deleted_ord"))
        .collect()
    )
    joined = records.join(last_deletion, on="pmid", how="left")
    removed = joined.filter(pl.col("deleted_ord") > pl.col("file_ord"))
    survivors = joined.filter(
        pl.col("deleted_ord").is_null() | (pl.col("deleted_ord") <= pl.col("file_ord"))
    ).select("pmid", "version", "file", "file_ord")
    keys = survivors.select("pmid", "version", "file_ord")
    rows = {"articles": survivors.height}
    dangling = 0
    for table in CHILD_TABLES:
        pmid_col = CORPUS_TABLES[table]
        cols = [pmid_col, "version"] + (["cited_pmid"] if table == "citations" else [])
        kept = (
            _scan(lake, table, files, cols)
            .join(
                keys.lazy().rename({"pmid": pmid_col}),
                on=[pmid_col, "version", "file_ord"],
                how="inner",
            )
            .collect()
        )
        rows[table] = kept.height
        if table == "citations":
            dangling = kept.filter(~pl.col("cited_pmid").is_in(survivors["pmid"].implode())).height
    return {
        "rows": rows,
        "deleted": removed.height,
        "deletions_listed": last_deletion.height,
        "dangling_citations": dangling,
        "survivors_digest": survivors_digest(survivors),
    }


# -- checks on the written corpus ------------------------------------------------------------
def _corpus(lake: Lake, table: str, columns: list[str]) -> pl.DataFrame:
    return pl.from_arrow(lake.read_parquet(corpus_key(table), columns=columns))


def check_one_row_per_pmid(lake: Lake) -> tuple[bool, str]:
    pmids = _corpus(lake, "articles", ["pmid"])["pmid"]
    duplicated = pmids.len() - pmids.n_unique()
    return duplicated == 0, f"{pmids.len()} rows, {duplicated} duplicated PMIDs"


def check_no_deleted_pmid(lake: Lake, files: list[str]) -> tuple[bool, str]:
    """No corpus PMID has a DeleteCitation in a file later than its record's file."""
    order = pl.DataFrame({"file": files, "record_ord": list(range(len(files)))})
    articles = _corpus(lake, "articles", ["pmid", "file"]).join(order, on="file", how="left")
    unknown = articles.filter(pl.col("record_ord").is_null()).height
    deletions = _scan(lake, "deletions", files, ["pmid"]).collect()
    present = articles.join(deletions, on="pmid").filter(pl.col("file_ord") > pl.col("record_ord"))
    bad = present["pmid"].unique().sort().to_list()
    details = f"{len(bad)} deleted PMIDs present" + (f": {bad[:10]}" if bad else "")
    if unknown:
        details += f"; {unknown} articles from files outside the release"
    return not bad and unknown == 0, details


def check_recount(lake: Lake, files: list[str], result: FoldResult) -> tuple[bool, str]:
    """DuckDB's fold (as written) against the Polars recount."""
    recount = recount_fold_polars(lake, files)
    written = survivors_digest(_corpus(lake, "articles", ["pmid", "version", "file"]))
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
    pmids = _corpus(lake, "articles", ["pmid"])["pmid"].implode()
    orphans = {}
    for table in CHILD_TABLES:
        col = CORPUS_TABLES[table]
        frame = _corpus(lake, table, [col])
        orphans[table] = frame.filter(~pl.col(col).is_in(pmids)).height
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
