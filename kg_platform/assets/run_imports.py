"""What a file run's step loads on first use (assets/stages.py FILE_RUN_MODULES, a part of
STEP_MODULES), imported by `kg build`'s forkserver beside the definitions
(orchestration/backfill.py ``code_location``), so that each run, a fork of it,
starts with them loaded: the parser and its recount, the pandera models (pandera, polars,
pandas) and pyarrow's Parquet writer. Imported in every run they cost 1-1.5 CPU-s a run
(docs/BENCHMARKS.md, *File runs: what they cost beyond the parse*); here, once per build.

Only imports: no polars, Arrow or DuckDB computation runs here, so no library's thread pool
is started before the fork (the threads the imports start, jemalloc's and polars' spill
cleaner, handle a fork or are not needed in the child). The definitions do not import this
module: a process that only loads them (`kg status`, the UI's code server) does not pay."""

import importlib

from kg_platform.assets.stages import FILE_RUN_MODULES

for _name in FILE_RUN_MODULES:
    importlib.import_module(_name)
