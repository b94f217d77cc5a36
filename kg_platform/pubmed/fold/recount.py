"""The independent recount: the fold's rules again in Polars and numpy, never DuckDB, from the
per-file tables, for every file (recount_fold_polars) or for the PMIDs of some buckets from
the files that may hold them (recount_parts_polars). One per-file table at a time on each
thread, so the peak follows the articles (a few integers per record, and 8 bytes per possible
PMID for the surviving records' keys) and never the child tables' rows (~800M citations for
a 40M-record baseline)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kg_platform.pubmed.fold.base import (
    CHILD_TABLES,
    PmidMap,
    PmidSet,
    check_files,
    read_frame,
    table_key,
)
from kg_platform.settings import usable_cores
from kg_platform.storage.corpus import CORPUS_TABLES, PMID_BUCKET, bucket_bounds
from kg_platform.storage.lake import Lake

T = TypeVar("T")
R = TypeVar("R")


def file_codes(files: pl.Series, names: dict[str, int]) -> np.ndarray:
    """The file names as int32 codes, new names added to ``names`` (name -> code)."""
    for name in files.unique().to_list():
        names.setdefault(name, len(names))
    return files.replace_strict(names, return_dtype=pl.Int32).to_numpy()


def survivors_digest(
    pmid: np.ndarray, version: np.ndarray, file_code: np.ndarray, names: dict[str, int]
) -> str:
    """md5 over the sorted (pmid, version, file) of the surviving records: three numpy
    columns, the file as its rank among the distinct names in use, which the digest lists."""
    # the codes in use, by counting (a code is a small int, never negative), not by a sort
    used = np.flatnonzero(np.bincount(file_code, minlength=len(names)))
    by_code = {code: name for name, code in names.items()}
    in_use = sorted(by_code[int(c)] for c in used)
    rank = np.zeros(max(names.values(), default=0) + 1, dtype="<i4")
    rank[[names[n] for n in in_use]] = np.arange(len(in_use), dtype="<i4")
    file_rank = rank[file_code]
    if len(pmid) > 1 and not bool((pmid[1:] > pmid[:-1]).all()):
        order = np.lexsort((file_rank, version, pmid))
        pmid, version, file_rank = pmid[order], version[order], file_rank[order]
    # else each PMID once, ascending (a fold's survivors, a corpus as written): in order
    digest = hashlib.md5(usedforsecurity=False)
    digest.update(np.ascontiguousarray(pmid, dtype="<i8").data)
    digest.update(np.ascontiguousarray(version, dtype="<i8").data)
    digest.update(np.ascontiguousarray(file_rank, dtype="<i4").data)
    digest.update("\n".join(in_use).encode())
    return digest.hexdigest()


def read_columns(
    lake: Lake, key: str, columns: list[str], dictionary: tuple[str, ...] = ()
) -> pa.Table:
    """Columns of one Parquet table of the lake, decoded on the calling thread (the callers
    read many tables on a thread per core); ``dictionary`` columns as dictionary arrays.
    A local lake's file by its path, and a remote one's without Arrow's read-ahead: no Arrow
    thread holds a Python file object, whose release needs the GIL (at the interpreter's
    exit, a thread that cannot take it aborts the process)."""
    read_dictionary = list(dictionary) or None
    if lake.is_local:  # Arrow's own file: no dataset scan, no Python object
        with pq.ParquetFile(lake.path(key), read_dictionary=read_dictionary) as table:
            return table.read(columns=columns, use_threads=False)
    with (
        lake.open(key) as f,
        pq.ParquetFile(f, read_dictionary=read_dictionary, pre_buffer=False) as table,
    ):
        return table.read(columns=columns, use_threads=False)


def int_column(table: pa.Table, name: str, null: int = -1) -> np.ndarray:
    """An integer column as numpy, a null as ``null`` (-1: never a PMID)."""
    column = table.column(name)
    if column.null_count:
        column = pc.fill_null(column, null)
    return column.to_numpy()


def name_codes(table: pa.Table, name: str, key: str) -> tuple[list[str], np.ndarray]:
    """A dictionary-read string column (read_columns' ``dictionary``) as the names it holds
    and, per row, the index of its name among them."""
    column = table.column(name)
    if column.null_count:
        raise ValueError(f"{key}: {column.null_count} rows without a {name}")
    names: list[str] = []
    codes = []
    for chunk in column.chunks:
        codes.append(chunk.indices.to_numpy().astype(np.int32) + len(names))
        names.extend(chunk.dictionary.to_pylist())
    return names, np.concatenate(codes) if codes else np.zeros(0, dtype=np.int32)


def coded(file_names: list[str], local: np.ndarray, names: dict[str, int]) -> np.ndarray:
    """name_codes' per-table indices as codes of ``names`` (name -> code), new names added."""
    table = np.array([names.setdefault(n, len(names)) for n in file_names], dtype=np.int32)
    return table[local] if len(table) else np.zeros(0, dtype=np.int32)


def on_cores(task: Callable[[T], R], items: list[T]) -> list[R]:
    """``task`` of every item on a thread per core this process may use, results in order
    (Arrow's reads, Polars and numpy's array passes run without the GIL)."""
    workers = min(usable_cores(), len(items))
    if workers <= 1:
        return [task(i) for i in items]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(task, items))


def _records(lake: Lake, files: list[str], names: dict[str, int]) -> pl.DataFrame:
    """(pmid, version, file_code, file_ord) of every record of every file."""

    def read(file: str) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
        key = table_key("articles", file)
        table = read_columns(lake, key, ["pmid", "version", "file"], dictionary=("file",))
        return (
            int_column(table, "pmid"),
            int_column(table, "version"),
            *name_codes(table, "file", key),
        )

    frames = []
    for ord_, (pmid, version, file_names, local) in enumerate(on_cores(read, files)):
        frames.append(
            pl.DataFrame(
                {
                    "pmid": pmid,
                    "version": version,
                    "file_code": coded(file_names, local, names),
                    "file_ord": np.full(len(pmid), ord_, dtype=np.int32),
                }
            )
        )
    return pl.concat(frames, how="vertical")


def deleted_pmids(lake: Lake, files: list[str]) -> pl.DataFrame:
    """(pmid, file_ord) of every PMID the files' deletions tables delete, ``file_ord`` the
    file's place in ``files``; the files read on every usable core."""
    return pl.concat(
        [
            pl.DataFrame({"pmid": pmids}).with_columns(pl.lit(n, pl.Int32).alias("file_ord"))
            for n, pmids in enumerate(
                on_cores(
                    lambda f: int_column(
                        read_columns(lake, table_key("deletions", f), ["pmid"]), "pmid"
                    ),
                    files,
                )
            )
        ]
    )


def record_key(file_ord: int | np.ndarray, version: np.ndarray) -> np.ndarray:
    """A record's (file, version) as one nonzero int64: (its file's place in the fold's
    order + 1) * 2**32 + its version (32 bits, so each file's keys are apart)."""
    key = version.astype(np.int64)
    key += (np.asarray(file_ord, dtype=np.int64) + 1) << 32
    return key


def _file_children(
    lake: Lake, file: str, ord_: int, winners: PmidMap, survivors: PmidSet
) -> tuple[dict[str, int], int]:
    """One file's child rows kept by the fold (their PMID's surviving record is this
    file's, of their version) per table, and its kept citations whose cited PMID is no
    survivor's."""
    rows, dangling = {}, 0
    for table in CHILD_TABLES:
        pmid_col = CORPUS_TABLES[table]
        cols = [pmid_col, "version"] + (["cited_pmid"] if table == "citations" else [])
        frame = read_columns(lake, table_key(table, file), cols)
        # a row's PMID's surviving key less this file's part of it: the row's version
        # exactly when that record is this file's
        found = winners.get(int_column(frame, pmid_col))
        found -= (ord_ + 1) << 32
        kept = found == int_column(frame, "version", 0)
        if frame.column("version").null_count:  # a row without a version matches no record
            kept &= frame.column("version").is_valid().to_numpy(zero_copy_only=False)
        rows[table] = int(np.count_nonzero(kept))
        if table == "citations":
            dangling = survivors.missing(int_column(frame, "cited_pmid")[kept])
    return rows, dangling


def recount_fold_polars(lake: Lake, files: list[str]) -> dict[str, object]:
    """The fold again, in Polars and numpy, from the per-file tables: rows per table,
    deleted count, dangling citations and a digest of the surviving (pmid, version, file).
    The files are read on a thread per core; a child row is kept when its (PMID, version)
    and its file are its PMID's surviving record's (an array indexed by PMID: PmidMap)."""
    check_files(lake, files)
    names: dict[str, int] = {}
    records = (
        _records(lake, files, names)
        # latest file first, then highest version: the first row per PMID wins
        .sort(["pmid", "file_ord", "version"], descending=[False, True, True])
        .unique(subset="pmid", keep="first", maintain_order=True)
    )
    deletions = deleted_pmids(lake, files)
    last_deletion = deletions.group_by("pmid").agg(pl.col("file_ord").max().alias("deleted_ord"))
    joined = records.join(last_deletion, on="pmid", how="left", maintain_order="left")
    removed = joined.filter(pl.col("deleted_ord") > pl.col("file_ord")).height
    # the survivors in PMID order (each once)
    survivors = joined.filter(
        pl.col("deleted_ord").is_null() | (pl.col("deleted_ord") <= pl.col("file_ord"))
    )
    del records, joined
    pmid = survivors["pmid"].to_numpy()
    version = survivors["version"].to_numpy()
    winners = PmidMap(pmid, record_key(survivors["file_ord"].to_numpy(), version))
    survivor_pmids = PmidSet(pmid)
    rows = {"articles": survivors.height, **dict.fromkeys(CHILD_TABLES, 0)}
    dangling = 0
    with ThreadPoolExecutor(max_workers=1) as beside:
        # the survivors' digest (numpy and md5, without the GIL) beside the files' counts
        digest = beside.submit(
            survivors_digest, pmid, version, survivors["file_code"].to_numpy(), names
        )
        for kept, file_dangling in on_cores(
            lambda item: _file_children(lake, item[1], item[0], winners, survivor_pmids),
            list(enumerate(files)),
        ):
            for table, n in kept.items():
                rows[table] += n
            dangling += file_dangling
        return {
            "rows": rows,
            "deleted": removed,
            "deletions_listed": last_deletion.height,
            "dangling_citations": dangling,
            "survivors_digest": digest.result(),
        }


def in_buckets(column: str, buckets: list[int]) -> pl.Expr:
    return (pl.col(column) // PMID_BUCKET).is_in(buckets)


def recount_parts_polars(
    lake: Lake, files: list[str], buckets: list[int]
) -> tuple[dict[int, dict[str, object]], list[str]]:
    """The fold again, in Polars, for the PMIDs of ``buckets`` only, from the per-file tables
    of the files that may hold them (files_holding): per bucket, the rows of each table, the
    PMIDs removed by a DeleteCitation and the digest of the surviving (pmid, version, file);
    and the files read."""
    check_files(lake, files)
    holding = files_holding(lake, files, [bucket_bounds(b) for b in buckets])
    order = {f: n for n, f in enumerate(files)}
    names: dict[str, int] = {}
    frames = []
    for file in holding:
        frame = read_frame(lake, table_key("articles", file), ["pmid", "version", "file"])
        frame = frame.filter(in_buckets("pmid", buckets))
        frames.append(
            pl.DataFrame(
                {
                    "pmid": frame["pmid"],
                    "version": frame["version"],
                    "file_code": file_codes(frame["file"], names),
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
            read_frame(lake, table_key("deletions", f), ["pmid"])
            .filter(in_buckets("pmid", buckets))
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
                read_frame(lake, table_key(table, file), [pmid_col, "version"])
                .join(keys.rename({"pmid": pmid_col}), on=[pmid_col, "version"], how="inner")
                .group_by(pl.col(pmid_col) // PMID_BUCKET)
                .len()
            )
            for bucket, n in kept.iter_rows():
                out[int(bucket)]["rows"][table] += n  # type: ignore[index]
    return out, holding


def pmid_bounds(lake: Lake, table: str, file: str) -> tuple[int, int] | None:
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
            span = pmid_bounds(lake, table, f)
            if span is not None and any(lo <= span[1] and hi >= span[0] for lo, hi in bounds):
                held.append(f)
                break
    return held
