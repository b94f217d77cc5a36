"""One PubMed file into seven checked Parquet tables in the lake.

The parse and the checks run before anything is written, so a bad file leaves no Parquet
behind and the tables of other files are untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kg_platform.checks import CheckOutcome
from kg_platform.pubmed.contracts import TABLE_CHECKS
from kg_platform.schemas import PUBMED_TABLES
from kg_platform.settings import PARSE_WORKERS_ENV, usable_cores, whole_number
from kg_platform.storage.lake import Lake
from kg_platform.storage.tables import table_key

if TYPE_CHECKING:
    import pyarrow as pa

    from kg_platform.pubmed.parse import ParseStats

# polars, pandera and the parser are imported by the functions that use them: this module is
# loaded with the Dagster definitions by every process that starts a run, which mostly
# never parses a file


@dataclass(frozen=True)
class TablesOutcome:
    file: str
    rows: dict[str, int]
    bytes: dict[str, int]
    seconds: float
    book_articles_skipped: int
    checks: list[CheckOutcome] = field(default_factory=list)

    def metadata(self) -> dict[str, object]:
        records = self.rows.get("articles", 0)
        return {
            "file": self.file,
            **{f"rows_{t}": n for t, n in self.rows.items()},
            "bytes_total": sum(self.bytes.values()),
            "seconds": round(self.seconds, 3),
            "records_per_s": round(records / self.seconds, 1) if self.seconds else 0.0,
            "book_articles_skipped": self.book_articles_skipped,
            "checks_passed": sum(c.passed for c in self.checks),
            "checks_failed": sum(not c.passed for c in self.checks),
        }


@contextmanager
def local_copy(lake: Lake, key: str) -> Iterator[str]:
    """A local path for a lake key (the file itself when the lake is local)."""
    if lake.is_local:
        yield lake.local_path(key)
        return
    folder = tempfile.mkdtemp(prefix="kg-raw-")
    path = os.path.join(folder, os.path.basename(key))
    try:
        with lake.open(key) as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def schema_problem(table: str, model, error: Exception) -> str:
    """One line for pandera's failure: each failed check with its first failing value (a
    duplicated key named by its values), not pandera's multi-line report."""
    import polars as pl

    cases = getattr(error, "failure_cases", None)
    if not isinstance(cases, pl.DataFrame) or cases.height == 0:
        lines = [x.strip() for x in str(error).splitlines() if x.strip().strip("{}[]")]
        return f"{table}: {lines[0] if lines else type(error).__name__}"
    parts = []
    for (column, check), group in cases.group_by(["column", "check"], maintain_order=True):
        first = group["failure_case"][0]
        if check == "multiple_fields_uniqueness":
            keys = list(model.to_schema().unique or [])
            try:
                row = json.loads(first)
                shown = ", ".join(f"{k} {row[k]}" for k in keys)
            except (ValueError, KeyError, TypeError):
                shown = str(first)
            parts.append(f"{table}: duplicated ({', '.join(keys)}) {shown} ({group.height} rows)")
        else:
            more = f" (and {group.height - 1} more)" if group.height > 1 else ""
            parts.append(f"{table}.{column}: {check} fails for {first}{more}")
    return "; ".join(parts)


def check_tables(tables: dict[str, pa.Table], recount: dict[str, int]) -> list[CheckOutcome]:
    """The four per-file checks (contracts.TABLE_CHECKS), each on the collected data."""
    import pandera.errors
    import polars as pl

    from kg_platform.schemas.one_pass import proved_valid

    frames = {name: pl.from_arrow(t) for name, t in tables.items()}
    checks: list[CheckOutcome] = []

    schema_errors = []
    for name, model in PUBMED_TABLES.items():
        if proved_valid(model, frames[name]):
            continue  # one query proved every condition pandera's validation checks
        try:
            model.validate(frames[name], lazy=True)
        except (pandera.errors.SchemaErrors, pandera.errors.SchemaError) as exc:
            schema_errors.append(schema_problem(name, model, exc))
    checks.append(
        CheckOutcome("schema", not schema_errors, "; ".join(schema_errors) or "7 tables valid")
    )

    articles = frames["articles"]
    written = {
        "articles": articles.height,
        "mesh_headings": distinct_headings(tables["mesh_edges"]),
        "pubmed_references": frames["citations"].height,
        "deletions": frames["deletions"].height,
    }
    mismatched = {k: (recount.get(k), v) for k, v in written.items() if recount.get(k) != v}
    checks.append(
        CheckOutcome(
            "recount_matches_xml",
            not mismatched,
            ", ".join(f"{k}: xml {x} vs written {w}" for k, (x, w) in mismatched.items())
            or ", ".join(f"{k}={v}" for k, v in written.items()),
        )
    )

    dup = articles.group_by(["pmid", "version"]).len().filter(pl.col("len") > 1).height
    checks.append(
        CheckOutcome("unique_pmid_version", dup == 0, f"{dup} duplicated (pmid, version)")
    )

    orphans = [f"{name}: {n}" for name, n in orphan_keys(frames).items() if n]
    checks.append(
        CheckOutcome(
            "pmids_in_articles",
            not orphans,
            "; ".join(orphans) or "every row belongs to an article record of this file",
        )
    )
    return checks


def distinct_headings(edges: pa.Table) -> int:
    """The distinct (pmid, version, descriptor_ui) of a mesh_edges table. A parsed table is
    sorted by (pmid, version), so each record's rows are one run: the count is that of
    distinct (run, descriptor) pairs, the descriptor as its index among the table's
    distinct values, each pair one integer, sorted. A table not so sorted, or with a null
    in those columns, is counted by polars' unique of the three columns."""
    import numpy as np
    import polars as pl
    import pyarrow.compute as pc

    keys = edges.select(["pmid", "version", "descriptor_ui"])
    if keys.num_rows == 0:
        return 0
    if any(c.null_count for c in keys.columns):
        return pl.from_arrow(keys).unique().height
    pmid = keys.column("pmid").to_numpy()
    version = keys.column("version").to_numpy()
    if not _sorted_by_record(pmid, version):
        return pl.from_arrow(keys).unique().height
    run = np.empty(len(pmid), dtype=np.int64)
    run[0] = 0
    np.not_equal(pmid[1:], pmid[:-1], out=run[1:])
    run[1:] |= version[1:] != version[:-1]
    np.cumsum(run, out=run)
    index = pc.dictionary_encode(keys.column("descriptor_ui").combine_chunks()).indices
    pairs = (run << 32) | index.to_numpy().astype(np.int64)
    pairs.sort()
    return 1 + int(np.count_nonzero(pairs[1:] != pairs[:-1]))


def _sorted_by_record(pmid, version) -> bool:
    """Whether the rows are in (pmid, version) order."""
    import numpy as np

    step = np.diff(pmid)
    return bool(np.all((step > 0) | ((step == 0) & (np.diff(version) >= 0))))


# a (pmid, version) key as one integer: pmid * 2**23 + version, one to one (and inside
# int64) while |pmid| < 2**39 and 0 <= version < 2**23
_VERSION_BITS = 23


def orphan_keys(frames: dict) -> dict[str, int]:
    """Per table with rows of records (all but articles and deletions), the distinct
    (pmid, version) of its rows that no article has. A parsed file's tables are in
    (pmid, version) order: each key is then one integer (:data:`_VERSION_BITS`), a
    table's distinct keys are where its sorted integers change, and each is looked up in
    the articles' sorted integers by binary search (:func:`_sorted_keys`). Else (a table
    out of order, a null, a key too large to pack) the anti-join on the articles' keys
    first, then the distinct keys of the (usually no) rows it leaves, each key one integer
    when every table's keys fit, else the two columns."""
    import numpy as np
    import polars as pl

    ordered = {
        name: _sorted_keys(frame, "citing_pmid" if name == "citations" else "pmid")
        for name, frame in frames.items()
        if name != "deletions"
    }
    if all(keys is not None for keys in ordered.values()):
        known = ordered.pop("articles")
        missing = {}
        for name, keys in ordered.items():
            distinct = keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if len(keys) else keys
            if len(known) == 0:
                missing[name] = len(distinct)
                continue
            at = np.minimum(np.searchsorted(known, distinct), len(known) - 1)
            missing[name] = int(len(distinct) - np.count_nonzero(known[at] == distinct))
        return missing

    tables = {
        name: frame.select(
            pl.col("citing_pmid" if name == "citations" else "pmid").alias("pmid"), "version"
        )
        for name, frame in frames.items()
        if name != "deletions"
    }
    packed = all(_packable(keys) for keys in tables.values())
    key = (pl.col("pmid") * (1 << _VERSION_BITS) + pl.col("version")).alias("key")
    on = ["key"] if packed else ["pmid", "version"]
    if packed:
        tables = {name: keys.select(key) for name, keys in tables.items()}
    known = tables.pop("articles")
    return {
        name: keys.join(known, on=on, how="anti").unique().height for name, keys in tables.items()
    }


def _sorted_keys(frame, pmid: str):
    """The (``pmid``, version) keys of ``frame`` as integers (:data:`_VERSION_BITS`, in
    the order of the pairs), when none is null, every one fits and they are in order; else
    None."""
    import numpy as np

    if frame.height == 0:
        return np.empty(0, dtype=np.int64)
    pmids, versions = frame[pmid], frame["version"]
    if pmids.null_count() or versions.null_count():
        return None
    pmids, versions = pmids.to_numpy(), versions.to_numpy()
    if not (
        pmids.min() > -(1 << 39)
        and pmids.max() < 1 << 39
        and versions.min() >= 0
        and versions.max() < 1 << _VERSION_BITS
    ):
        return None
    keys = pmids.astype(np.int64) * (1 << _VERSION_BITS) + versions.astype(np.int64)
    return keys if bool(np.all(keys[1:] >= keys[:-1])) else None


def _packable(keys) -> bool:
    """Whether (pmid, version) keys have no null and fit one integer (:data:`_VERSION_BITS`)."""
    import polars as pl

    if keys.height == 0:
        return True
    bounds = keys.select(
        pl.col("pmid").min().alias("pmid_min"),
        pl.col("pmid").max().alias("pmid_max"),
        pl.col("version").min().alias("version_min"),
        pl.col("version").max().alias("version_max"),
        pl.sum_horizontal(pl.all().null_count()).alias("nulls"),
    ).row(0, named=True)
    return (
        bounds["nulls"] == 0
        and bounds["pmid_min"] > -(1 << 39)
        and bounds["pmid_max"] < 1 << 39
        and bounds["version_min"] >= 0
        and bounds["version_max"] < 1 << _VERSION_BITS
    )


def parse_check_write(lake: Lake, raw_key: str, file: str) -> TablesOutcome:
    """Parse the raw file, run the checks, then write the seven tables atomically."""
    started = time.perf_counter()
    with local_copy(lake, raw_key) as path:
        tables, stats, recount = parse_and_recount(path, file)
    checks = check_tables(tables, recount)
    sizes = {name: lake.write_parquet(table_key(name, file), t) for name, t in tables.items()}
    return TablesOutcome(
        file=file,
        rows={name: t.num_rows for name, t in tables.items()},
        bytes=sizes,
        seconds=time.perf_counter() - started,
        book_articles_skipped=stats.book_articles_skipped,
        checks=checks,
    )


def parse_and_recount(path: str, file: str) -> tuple[dict[str, pa.Table], ParseStats, dict]:
    """The file's tables and parse stats, and its recount (recount.py): the recount scans
    the bytes the parse's fast path inflates, as it reads them, so the file is inflated
    once; when the fast path gave up before the end of the file (lxml read it), the recount
    reads the file itself."""
    from kg_platform.pubmed.parse import parse_file_stats
    from kg_platform.pubmed.recount import Recount, recount_file

    recount = Recount()
    tables, stats = parse_file_stats(path, file=file, inflated=recount.feed)
    return tables, stats, recount.counts() if recount.complete else recount_file(path)


@dataclass(frozen=True)
class PublishedFile:
    """What became of one file: its outcome (checks included) and, when every blocking
    check passed and its seven tables were published, their content digest (None: nothing published)."""

    outcome: TablesOutcome
    digest: str | None


class _ChecksFailed(Exception):
    """Raised inside the transaction so that the staged tables are discarded."""


def publish_file(lake: Lake, raw_key: str, file: str) -> PublishedFile:
    """Parse, check and, only when every blocking check passed, publish one file's tables in its own
    lake transaction (a failed file leaves its last good tables as they were). Runs in a
    worker of :class:`TablesPool` or in the caller's process."""
    outcome = None
    try:
        with lake.transaction() as staged:
            outcome = parse_check_write(staged, raw_key, file)
            if any(TABLE_CHECKS[c.name][1] and not c.passed for c in outcome.checks):
                raise _ChecksFailed
            digest = staged.digest([table_key(t, file) for t in sorted(outcome.rows)])
    except _ChecksFailed:
        return PublishedFile(outcome, None)
    return PublishedFile(outcome, digest)


def load_parse_imports() -> None:
    """What a file's parse, checks and write load on first use, loaded now: the parse
    workers' initialiser (and the caller's process before its first file when it parses
    alone), so that no file's clock pays ~0.5 s of imports. Besides the modules it runs
    the checks on the seven empty tables (proved valid in one query each: pandera's polars
    backends, and hypothesis with them, load only when a file's tables are not, to say
    what fails), writes one empty Parquet table to memory and makes the local fsspec
    filesystem."""
    import io

    import fsspec
    import pyarrow.parquet as pq

    from kg_platform.pubmed import parse, recount  # noqa: F401
    from kg_platform.schemas import ARROW_SCHEMAS

    empty = {name: ARROW_SCHEMAS[name].empty_table() for name in PUBMED_TABLES}
    check_tables(empty, {})
    pq.write_table(empty["articles"], io.BytesIO(), compression="zstd")
    fsspec.filesystem("file")  # a lake transaction's digest reads through fsspec


def parse_worker_start() -> None:
    """A parse worker's initialiser: it ends with the process that started its pool (a
    worker of a run or a Celery step killed outright would otherwise wait for files for
    ever), then loads what the parse needs (:func:`load_parse_imports`)."""
    import multiprocessing
    import threading

    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    load_parse_imports()


def _exit_with(parent) -> None:
    parent.join()  # returns when the parent's sentinel closes: it has exited
    os._exit(1)


def parse_workers() -> int:
    """How many files a run parses at once: ``KG_PARSE_WORKERS`` (`kg build` sets it to the
    cores over ``--jobs``; `kg workers start` to the cores over the steps its workers run at
    once), else the cores; 1 in a daemonic process (a Celery prefork child) unless
    KG_PARSE_WORKERS says otherwise (:class:`TablesPool` starts its processes there too)."""
    import multiprocessing

    chosen = whole_number(PARSE_WORKERS_ENV)
    if chosen is None:
        return 1 if multiprocessing.current_process().daemon else usable_cores()
    return chosen


def pool_start_method() -> str:
    """How a pool starts its processes: ``spawn`` (a fresh interpreter, ~0.9 CPU-s of imports
    each), or ``fork`` in a daemonic process. That is a Celery prefork child: itself a fork of
    the worker's parent, which preloaded every step's imports (kg_platform.assets.preload),
    running one step on its one thread; its forks start with the parser, pandera and the
    models loaded, for no CPU, so a step can take the worker's cores for its files."""
    import multiprocessing

    return "fork" if multiprocessing.current_process().daemon else "spawn"


class TablesPool:
    """Files parsed ``width`` at a time: a pool of processes (:func:`pool_start_method`), or
    the caller's own process when ``width`` is 1 (no start-up cost, and possible where
    processes are not). ``submit`` returns a future of :func:`publish_file`'s result."""

    def __init__(self, width: int) -> None:
        self.width = max(1, width)
        self._pool = None

    def __enter__(self) -> TablesPool:
        if self.width > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(
                self.width,
                mp_context=multiprocessing.get_context(pool_start_method()),
                initializer=parse_worker_start,
            )
        else:
            load_parse_imports()
        return self

    @contextmanager
    def _may_start_processes(self) -> Iterator[None]:
        """A daemonic process (a Celery prefork child) may start the pool's processes: the
        pool starts them as files are submitted, and multiprocessing refuses children to a
        process flagged daemonic, lest they outlive it. Here they cannot: the pool is shut
        down with the step, and each worker ends with its parent (parse_worker_start).
        Celery's child is billiard's process, whose authentication key refuses to be
        pickled into a spawned child's preparation data: the same key goes as the standard
        library's kind while the pool starts its processes."""
        import multiprocessing
        from multiprocessing.process import AuthenticationString

        process = multiprocessing.current_process()
        config = process._config
        daemonic, authkey = config.get("daemon"), config.get("authkey")
        if not daemonic:
            yield
            return
        config["daemon"] = False
        if authkey is not None:
            config["authkey"] = AuthenticationString(bytes(authkey))
        try:
            yield
        finally:
            config["daemon"] = daemonic
            if authkey is not None:
                config["authkey"] = authkey

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            # an interrupted run does not wait for the files still queued
            self._pool.shutdown(wait=exc[0] is None, cancel_futures=exc[0] is not None)

    def submit(self, lake: Lake, raw_key: str, file: str):
        from concurrent.futures import Future

        if self._pool is not None:
            with self._may_start_processes():
                return self._pool.submit(publish_file, lake, raw_key, file)
        future: Future = Future()
        try:
            future.set_result(publish_file(lake, raw_key, file))
        except Exception as error:  # the caller reports it against this file
            future.set_exception(error)
        return future
