"""The incremental fold: the files after those a previous fold read, folded into its corpus.
The PMIDs the new files touch take their verdict; only the parts of the buckets holding one
are rewritten (each previous part streamed one row group at a time), so the work grows with
the new files, not the release, and the parts are byte for byte those of a full fold."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from kg_platform.pubmed.fold.base import FoldResult, PmidSet, read_frame, table_key
from kg_platform.pubmed.fold.manifest import (
    ADDED_TABLES,
    FOLD_DELETIONS,
    FOLD_TOUCHED,
    REPLACED_TABLES,
    STATE_SCHEMA,
    added_key,
    publish,
    replaced_key,
    staged_parts,
)
from kg_platform.pubmed.fold.parts import PartWriter, group_rows
from kg_platform.settings import usable_cores
from kg_platform.storage.corpus import (
    CORPUS_TABLES,
    PMID_BUCKET,
    bucket_bounds,
    corpus_fingerprint,
    part_key,
    part_name,
)
from kg_platform.storage.lake import Lake


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
            read_frame(lake, table_key("articles", f), ["pmid", "version"]).with_columns(
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
                read_frame(lake, table_key("deletions", f), ["pmid"]).with_columns(
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
            for batch in pq.ParquetFile(f).iter_batches(batch_size=group_rows(table)):
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
            writer = PartWriter(os.path.join(staging, table), table, schema)
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

        # a table per task, on a thread per usable core (pyarrow decodes, encodes and
        # compresses without the GIL), the largest tables first
        order = ["articles", "citations", "mesh_edges"]
        order += [t for t in CORPUS_TABLES if t not in order]
        with ThreadPoolExecutor(max_workers=min(usable_cores(), len(order))) as pool:
            rewritten = [pool.submit(rewrite, t) for t in order]
            done = {t: f.result() for t, f in zip(order, rewritten, strict=True)}
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
        parts = staged_parts(staging, carried)
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
        publish(
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
    writer: PartWriter | None = None
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
