"""The corpus checks (contracts.CORPUS_CHECKS), each returning a CheckOutcome: on the written
corpus after a full fold, and on every touched part and a sample of untouched ones after an
incremental fold (the Polars recount of those parts, and a DuckDB refold of a few of them
compared row for row)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from kg_platform.checks import CheckOutcome
from kg_platform.pubmed.fold.base import CHILD_TABLES, FoldResult, PmidSet
from kg_platform.pubmed.fold.full import connect, fold_tables, rows_query, run_sql
from kg_platform.pubmed.fold.manifest import FOLD_DELETIONS
from kg_platform.pubmed.fold.recount import (
    coded,
    deleted_pmids,
    file_codes,
    files_holding,
    in_buckets,
    int_column,
    name_codes,
    on_cores,
    read_columns,
    recount_fold_polars,
    recount_parts_polars,
    survivors_digest,
)
from kg_platform.storage.corpus import (
    CORPUS_TABLES,
    PMID_BUCKET,
    bucket_bounds,
    corpus_parts,
    part_bucket,
    part_key,
    part_name,
    required_parts,
)
from kg_platform.storage.lake import Lake


def _batches(lake: Lake, key: str, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """A Parquet table of the lake (local, staged or S3) one row group at a time."""
    with lake.open(key) as f:
        yield from pq.ParquetFile(f).iter_batches(columns=columns)


# -- checks on the written corpus ------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CorpusArticles:
    """The written corpus articles' (pmid, version, file) as numpy columns, its parts in PMID
    order, read once (parts on a thread per core) for every check of the written corpus."""

    pmid: np.ndarray
    version: np.ndarray
    file_code: np.ndarray  # codes of ``names``
    names: dict[str, int]  # file name -> code

    @classmethod
    def read(cls, lake: Lake) -> CorpusArticles:
        def part(key: str) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
            table = read_columns(lake, key, ["pmid", "version", "file"], dictionary=("file",))
            return (
                int_column(table, "pmid"),
                int_column(table, "version"),
                *name_codes(table, "file", key),
            )

        names: dict[str, int] = {}
        parts = on_cores(part, required_parts(lake, "articles"))
        codes = [coded(file_names, local, names) for _, _, file_names, local in parts]
        return cls(
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
            np.concatenate(codes),
            names,
        )

    def digest(self) -> str:
        """survivors_digest of the written (pmid, version, file)."""
        return survivors_digest(self.pmid, self.version, self.file_code, self.names)


def _articles(lake: Lake, articles: CorpusArticles | None) -> CorpusArticles:
    return articles if articles is not None else CorpusArticles.read(lake)


def _digest_of(batches: Iterator[pa.RecordBatch]) -> str:
    """survivors_digest of articles' (pmid, version, file) batches."""
    names: dict[str, int] = {}
    pmid, version, file_code = [], [], []
    for batch in batches:
        frame = pl.from_arrow(batch)
        pmid.append(frame["pmid"].to_numpy())
        version.append(frame["version"].to_numpy())
        file_code.append(file_codes(frame["file"], names))
    if not pmid:
        return survivors_digest(*(np.zeros(0, dtype=t) for t in ("<i8", "<i4", "<i4")), names)
    return survivors_digest(
        np.concatenate(pmid), np.concatenate(version), np.concatenate(file_code), names
    )


def check_one_row_per_pmid(lake: Lake, articles: CorpusArticles | None = None) -> CheckOutcome:
    pmids = _articles(lake, articles).pmid
    if len(pmids) < 2 or bool((pmids[1:] > pmids[:-1]).all()):
        duplicated = 0  # ascending, each PMID once (as the fold writes them)
    else:
        duplicated = len(pmids) - pl.Series(pmids).n_unique()
    return CheckOutcome(
        "one_row_per_pmid", duplicated == 0, f"{len(pmids)} rows, {duplicated} duplicated PMIDs"
    )


def check_no_deleted_pmid(
    lake: Lake, files: list[str], articles: CorpusArticles | None = None
) -> CheckOutcome:
    """No corpus PMID has a DeleteCitation in a file later than its record's file."""
    articles = _articles(lake, articles)
    order = {f: n for n, f in enumerate(files)}
    by_code = np.full(len(articles.names), -1, dtype=np.int32)
    for name, code in articles.names.items():
        by_code[code] = order.get(name, -1)
    record_ord = by_code[articles.file_code] if len(by_code) else articles.file_code
    unknown = int(np.count_nonzero(record_ord < 0))
    deletions = deleted_pmids(lake, files)
    # only the articles whose PMID some file deletes (few), from a release's files
    named = PmidSet(deletions["pmid"].to_numpy()).contains(articles.pmid) & (record_ord >= 0)
    candidates = pl.DataFrame({"pmid": articles.pmid[named], "record_ord": record_ord[named]})
    present = candidates.join(deletions, on="pmid").filter(
        pl.col("file_ord") > pl.col("record_ord")
    )
    bad = present["pmid"].unique().sort().to_list()
    details = f"{len(bad)} deleted PMIDs present" + (f": {bad[:10]}" if bad else "")
    if unknown:
        details += f"; {unknown} articles from files outside the release"
    return CheckOutcome("no_deleted_pmid", not bad and unknown == 0, details)


def check_recount(
    lake: Lake, files: list[str], result: FoldResult, articles: CorpusArticles | None = None
) -> CheckOutcome:
    """DuckDB's fold (as written) against the Polars recount of every file."""
    with ThreadPoolExecutor(max_workers=1) as beside:
        # the written articles' digest beside the recount (numpy and md5 release the GIL)
        digest = beside.submit(lambda: _articles(lake, articles).digest())
        recount = recount_fold_polars(lake, files)
        written = digest.result()
    ours = {
        "rows": result.rows,
        "deleted": result.deleted,
        "deletions_listed": result.deletions_listed,
        "dangling_citations": result.dangling_citations,
        "survivors_digest": written,
    }
    diffs = [f"{k}: duckdb {ours[k]} != polars {recount[k]}" for k in ours if ours[k] != recount[k]]
    details = "; ".join(diffs) or f"equal: rows {result.rows}, digest {written}"
    return CheckOutcome("polars_recount", not diffs, details)


def check_edge_sources_in_articles(
    lake: Lake, articles: CorpusArticles | None = None
) -> CheckOutcome:
    """Every child row's PMID is a corpus article; the child tables' parts are read on a
    thread per core, each against the set of article PMIDs."""
    pmids = PmidSet(_articles(lake, articles).pmid)
    keys = [(table, key) for table in CHILD_TABLES for key in required_parts(lake, table)]

    def orphans_in(item: tuple[str, str]) -> int:
        table, key = item
        col = CORPUS_TABLES[table]
        return pmids.missing(int_column(read_columns(lake, key, [col]), col))

    orphans = dict.fromkeys(CHILD_TABLES, 0)
    for (table, _), n in zip(keys, on_cores(orphans_in, keys), strict=True):
        orphans[table] += n
    bad = {t: n for t, n in orphans.items() if n}
    details = f"rows without a corpus article: {bad}" if bad else "all edge sources found"
    return CheckOutcome("edge_sources_in_articles", not bad, details)


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


def check_recount_parts(lake: Lake, files: list[str], result: FoldResult) -> CheckOutcome:
    """An incremental fold's parts against the Polars recount, part by part, on every touched
    part and a sample of untouched ones (checked_parts), each recounted from the per-file
    tables that hold its PMIDs: the rows of every table, the surviving (pmid, version, file),
    and the PMIDs the fold's state says were removed."""
    touched, sampled = checked_parts(lake, files, result)
    buckets = sorted(touched + sampled)
    recount, holding = recount_parts_polars(lake, files, buckets)
    state = pl.from_arrow(lake.read_parquet(FOLD_DELETIONS, columns=["pmid", "removed"]))
    removed = state.filter(pl.col("removed") & in_buckets("pmid", buckets))
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
        return CheckOutcome(
            "polars_recount", False, f"recount differs on {what}: " + "; ".join(diffs)
        )
    return CheckOutcome("polars_recount", True, f"recount equal on {what}")


def check_incremental_sample(
    lake: Lake, files: list[str], result: FoldResult, prune: bool = True
) -> CheckOutcome:
    """An incremental fold's parts against a full fold, row for row (the second half of
    polars_recount), on the first, middle and last touched parts and the sample of untouched
    ones (checked_parts). Their PMIDs are refolded in DuckDB from the per-file tables alone,
    with the full fold's own SQL restricted to them and to the files that hold any of them
    (NLM's files hold consecutive PMID ranges, so a part reads a few baseline files and the
    updates, not the release; ``prune=False`` reads every file, the reference
    benchmarks/fold_sample_check.py times it against)."""
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
        con = connect(lake, None, spill_dir=os.path.join(staging, "spill"))
        run_sql(con, "SET parquet_metadata_cache = true")
        # one refold for all the parts: their PMIDs only, from every file that holds any
        window = f"pmid // {PMID_BUCKET} IN ({', '.join(map(str, buckets))})"
        holding = files_holding(lake, files, bounds) if prune else list(files)
        per_file = fold_tables(con, lake, files, window=f"({window})", only=set(holding))
        for table in CORPUS_TABLES:
            query = rows_query(per_file, table).format(lo=bounds[0][0], hi=bounds[-1][1])
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
        details = f"incremental fold differs from a full fold on {what}: " + "; ".join(diffs)
        return CheckOutcome("polars_recount", False, details)
    return CheckOutcome("polars_recount", True, f"incremental fold equals a full fold on {what}")


def fold_checks(lake: Lake, files: list[str], result: FoldResult) -> list[CheckOutcome]:
    """The four blocking corpus checks (contracts.CORPUS_CHECKS), each with its wall seconds
    (metadata ``seconds``). After an incremental fold, polars_recount recounts every touched
    part and a sample of untouched ones from the files holding their PMIDs
    (check_recount_parts) and refolds the sampled parts and three of the touched ones in
    DuckDB, requiring the same rows (check_incremental_sample); after a full fold it recounts
    every file (check_recount)."""

    def timed(check: Callable[[], CheckOutcome]) -> CheckOutcome:
        started = time.perf_counter()
        outcome = check()
        seconds = round(time.perf_counter() - started, 3)
        return dataclasses.replace(outcome, metadata={**outcome.metadata, "seconds": seconds})

    read: list[CorpusArticles] = []

    def articles() -> CorpusArticles:
        """The written articles, read by the first check that needs them (its seconds)."""
        if not read:
            read.append(CorpusArticles.read(lake))
        return read[0]

    def recount() -> CheckOutcome:
        if result.mode != "incremental":
            return check_recount(lake, files, result, articles())
        parts = check_recount_parts(lake, files, result)
        sample = check_incremental_sample(lake, files, result)
        details = f"{parts.details}; {sample.details}"
        return CheckOutcome("polars_recount", parts.passed and sample.passed, details)

    return [
        timed(lambda: check_one_row_per_pmid(lake, articles())),
        timed(lambda: check_no_deleted_pmid(lake, files, articles())),
        timed(recount),
        timed(lambda: check_edge_sources_in_articles(lake, articles())),
    ]
