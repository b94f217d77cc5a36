"""The DuckDB catalog: a database file holding views over the lake's Parquet.

For an S3 lake the lake's own fsspec filesystem is registered with DuckDB, so no DuckDB
extension (httpfs) has to be downloaded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kg_platform.schemas import CORPUS_MODELS, MESH_TABLES, PUBMED_TABLES
from kg_platform.storage.corpus import corpus_glob
from kg_platform.storage.lake import Lake

if TYPE_CHECKING:
    import duckdb

# view name -> lake glob (relative key); a view is created only when files exist
LAKE_VIEWS: dict[str, str] = {
    **{f"file_{t}": f"tables/{t}/*.parquet" for t in PUBMED_TABLES},
    **{t: corpus_glob(t) for t in CORPUS_MODELS},
    **{f"mesh_{t}": f"mesh/{t}.parquet" for t in MESH_TABLES},
}


@dataclass
class Catalog:
    lake: Lake
    database: str = ":memory:"

    def connect(
        self, read_only: bool = False, memory_limit: str | None = None, spill_dir: str | None = None
    ) -> duckdb.DuckDBPyConnection:
        """A connection with a DuckDB thread per core this process may use (DuckDB alone
        counts the machine's cores, not the affinity: settings.usable_cores); with
        ``memory_limit`` DuckDB holds to it and spills past it into ``spill_dir`` (a local
        folder) instead of growing to its default of 80% of RAM."""
        from kg_platform.settings import usable_cores

        if self.database != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(self.database)), exist_ok=True)
        import duckdb  # here: the Dagster definitions name this resource and seldom query

        config: dict = {"threads": usable_cores()}
        if memory_limit:
            config["memory_limit"] = memory_limit
        if spill_dir:
            config["temp_directory"] = spill_dir
        try:
            con = duckdb.connect(self.database, read_only=read_only, config=config)
        except duckdb.Error as exc:
            if not memory_limit:
                raise
            raise ValueError(f"{memory_limit!r}: not a DuckDB memory limit ({exc})") from exc
        if not self.lake.is_local:
            con.register_filesystem(self.lake.fs)
        return con

    def connect_bounded(self, spill_dir: str) -> duckdb.DuckDBPyConnection:
        """A connection under the fold's memory limit (KG_FOLD_MEMORY_LIMIT), spilling past
        it into the local folder ``spill_dir``: the recount's and the profile's aggregates
        grow with the corpus. A limit DuckDB cannot read is a ValueError naming the setting."""
        from kg_platform.settings import FOLD_MEMORY_LIMIT_ENV, fold_memory_limit

        try:
            return self.connect(memory_limit=fold_memory_limit(), spill_dir=spill_dir)
        except ValueError as exc:
            raise ValueError(f"{FOLD_MEMORY_LIMIT_ENV}: {exc}") from exc

    def parquet_glob(self, pattern: str) -> str:
        """A path DuckDB's read_parquet understands for a lake glob."""
        return self.lake.path(pattern)

    def has_files(self, pattern: str) -> bool:
        try:
            path = self.lake.path(pattern)
        except ValueError:
            return False  # the lake's scope has no partition for this table (e.g. mesh_*)
        return bool(self.lake.fs.glob(path))

    def refresh_views(self, con: duckdb.DuckDBPyConnection | None = None) -> list[str]:
        """(Re)create a view for each lake table that exists; returns the view names."""
        own = con is None
        con = con or self.connect()
        made = []
        try:
            for view, pattern in LAKE_VIEWS.items():
                if self.has_files(pattern):
                    con.execute(
                        f"CREATE OR REPLACE VIEW {view} AS "
                        f"SELECT * FROM read_parquet('{self.parquet_glob(pattern)}', union_by_name=true)"
                    )
                    made.append(view)
        finally:
            if own:
                con.close()
        return made
