"""The independent recount: the fold's rules again in Polars and numpy, never DuckDB, from the
per-file tables, for every file (recount_fold_polars) or for the PMIDs of some buckets from
the files that may hold them (recount_parts_polars). One per-file table at a time, so the
peak follows the articles (a few integers per record) and never the child tables' rows
(~800M citations for a 40M-record baseline)."""

from __future__ import annotations

import hashlib

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from kg_platform.pubmed.fold.base import CHILD_TABLES, PmidSet, check_files, read_frame, table_key
from kg_platform.storage.corpus import CORPUS_TABLES, PMID_BUCKET, bucket_bounds
from kg_platform.storage.lake import Lake


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
        frame = read_frame(lake, table_key("articles", file), ["pmid", "version", "file"])
        frames.append(
            pl.DataFrame(
                {
                    "pmid": frame["pmid"],
                    "version": frame["version"],
                    "file_code": file_codes(frame["file"], names),
                    "file_ord": np.full(frame.height, ord_, dtype=np.int32),
                }
            )
        )
    return pl.concat(frames, how="vertical")


def recount_fold_polars(lake: Lake, files: list[str]) -> dict[str, object]:
    """The fold again, in Polars, from the per-file tables: rows per table, deleted count,
    dangling citations and a digest of the surviving (pmid, version, file)."""
    check_files(lake, files)
    names: dict[str, int] = {}
    records = (
        _records(lake, files, names)
        # latest file first, then highest version: the first row per PMID wins
        .sort(["pmid", "file_ord", "version"], descending=[False, True, True])
        .unique(subset="pmid", keep="first", maintain_order=True)
    )
    deletions = pl.concat(
        [
            read_frame(lake, table_key("deletions", f), ["pmid"]).with_columns(
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
            kept = read_frame(lake, table_key(table, file), cols).join(
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
