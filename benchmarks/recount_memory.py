"""Peak RSS of the graph step's recount of every row on a built lake, DuckDB unbounded or
held to a memory limit (spilling past it): one process a run, so run it once per limit.

    python benchmarks/recount_memory.py LAKE            # unbounded (DuckDB: 80% of RAM)
    python benchmarks/recount_memory.py LAKE 1GB        # as the graph step runs it

Prints one JSON line: the limit, whether the recount passed, wall and CPU seconds, the
process's peak RSS, the citation edges it counted, and the load."""

import json
import os
import resource
import sys
import tempfile
import time

from kg_platform.graph import checks, layout
from kg_platform.graph.store import KGStore
from kg_platform.storage.catalog import Catalog
from kg_platform.storage.lake import Lake


def main() -> None:
    if len(sys.argv) not in (2, 3, 4):
        raise SystemExit("usage: recount_memory.py LAKE [LIMIT] [RELEASE:MESH_YEAR]")
    limit = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else None
    release, year = (sys.argv[3] if len(sys.argv) > 3 else "pubmed26:2024").split(":")
    lake = Lake(sys.argv[1]).scoped(release=release, mesh_year=year)
    store = KGStore.open(lake, layout.current_build_id(lake))
    catalog = Catalog(lake)
    with tempfile.TemporaryDirectory(prefix="recount-spill-") as spill:
        con = catalog.connect(memory_limit=limit, spill_dir=spill if limit else None)
        catalog.refresh_views(con)
        t, c = time.perf_counter(), time.process_time()
        outcome = checks.recount(store, con)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        con.close()
    print(
        json.dumps(
            {
                "benchmark": "recount_memory",
                "limit": limit,
                "passed": outcome.passed,
                "wall_s": round(wall, 1),
                "cpu_s": round(cpu, 1),
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                "citation_edges": outcome.metadata.get("duckdb_citation_edges"),
                "load": [round(x, 2) for x in os.getloadavg()],
            }
        )
    )


if __name__ == "__main__":
    main()
