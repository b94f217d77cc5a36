"""What a file run's step loads on first use, imported by `kg build`'s forkserver beside the
definitions (orchestration/backfill.py ``code_location``), so that each run, a fork of it,
starts with them loaded: the parser and its recount, the pandera models (pandera, polars,
pandas) and pyarrow's Parquet writer. Imported in every run they cost 1-1.5 CPU-s a run
(docs/BENCHMARKS.md, *File runs: what they cost beyond the parse*); here, once per build.

Only imports: no polars, Arrow or DuckDB computation runs here, so no library's thread pool
is started before the fork (the threads the imports start, jemalloc's and polars' spill
cleaner, handle a fork or are not needed in the child). The definitions do not import this
module: a process that only loads them (`kg status`, the UI's code server) does not pay."""

import fsspec  # noqa: F401
import pyarrow.parquet  # noqa: F401

import kg_platform.schemas.models  # noqa: F401
from kg_platform.pubmed import parse, recount  # noqa: F401
