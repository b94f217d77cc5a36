"""Build benchmark: the steps that do not split by file, alone, on synthetic records.

``--fold-records N`` writes N synthetic records as per-file Parquet tables (files of 30,000
records, the parser's exact schemas, revisions and DeleteCitations in update files; see
``benchmarks/_synthetic_fold.py``), then runs each phase in its own child process, so that
its peak RSS (the child's VmHWM) is its alone:

- ``imports``: the libraries alone, the fixed part of every peak;
- ``read_tables``: every per-file table read once with pyarrow (the reference for the fold);
- ``fold``: ``kg_platform.pubmed.fold.fold_release`` as the corpus asset calls it (the fold's
  own DuckDB connection, memory limit and spill folder; ``--duckdb-*`` override them), each
  statement timed with the RSS high-water mark after it;
- ``fold_checks``: the corpus asset's four blocking checks, each timed;
- ``read_corpus``: the corpus columns the graph reads, read once with pyarrow (its reference);
- ``graph``: ``kg_platform.graph.build.build_graph`` over the folded corpus.

Each phase's seconds (wall and CPU) and peak RSS are extrapolated linearly in records to the
40M-record baseline (RSS: the imports' part fixed, the rest scaled) and compared with one
24 GiB machine and one hour. A parent thread polls each child's RSS and kills it past
``--max-rss-gib``, so a run that would crowd the machine ends with a report instead of the
OOM killer. ``--lake DIR`` keeps the tables and reuses them for the same N. The last line
printed is one JSON object.

    .venv/bin/python benchmarks/build.py --fold-records 1000000
    .venv/bin/python benchmarks/build.py --fold-records 5000000 --duckdb-memory-limit 1GB
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict

import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BASELINE_RECORDS = 40_000_000
MACHINE_GIB = 24
HOUR_S = 3600
GIB = 1 << 30
POLL_S = 0.2
# the graph's columns per corpus table (kg_platform.graph.build reads these and no others)
GRAPH_COLUMNS = {
    "articles": ["pmid", "year", "has_abstract"],
    "citations": ["citing_pmid", "cited_pmid"],
    "mesh_edges": ["pmid", "descriptor_ui", "descriptor_major", "qualifier_major"],
    "corrections": ["pmid", "ref_type"],
    "pubtypes": ["pmid", "name"],
}


# -- phases (each runs in its own child process) -----------------------------------------------
def _files(root: str) -> list[str]:
    with open(os.path.join(root, "files.json")) as f:
        return json.load(f)


def _dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def phase_read_tables(root: str, _args: argparse.Namespace) -> dict:
    from kg_platform.pubmed.fold import CORPUS_TABLES, table_key

    rows = decoded = 0
    t = time.perf_counter()
    for table in [*CORPUS_TABLES, "deletions"]:
        for file in _files(root):
            frame = pq.read_table(os.path.join(root, table_key(table, file)))
            rows += frame.num_rows
            decoded += frame.nbytes
            del frame
    return {"seconds": time.perf_counter() - t, "rows": rows, "arrow_bytes": decoded}


def _configure(con, args: argparse.Namespace) -> dict:
    """Turn the progress bar off, apply the --duckdb-* overrides; the settings in force."""
    settings = ["SET enable_progress_bar = false"]  # its bar would land in the JSON output
    if args.duckdb_memory_limit:
        settings.append(f"SET memory_limit = '{args.duckdb_memory_limit}'")
    if args.duckdb_temp_dir:
        settings.append(f"SET temp_directory = '{args.duckdb_temp_dir}'")
    if args.duckdb_threads:
        settings.append(f"SET threads = {int(args.duckdb_threads)}")
    for statement in settings:
        con.execute(statement).fetchall()  # DuckDB 2 refuses new work while a result is open
    values = con.execute(
        "SELECT current_setting('memory_limit'), current_setting('temp_directory'), "
        "current_setting('threads')"
    ).fetchall()[0]
    return dict(zip(["memory_limit", "temp_directory", "threads"], values, strict=True))


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _statement_label(sql: str) -> str:
    if sql.startswith("COPY"):
        return "copy " + os.path.basename(sql.rsplit(" TO '", 1)[1].split("'", 1)[0])
    if sql.startswith("CREATE"):
        return "create " + sql.split(" AS ", 1)[0].rsplit(" ", 1)[1]
    if "ANTI JOIN" in sql:
        return "count dangling citations"
    if sql.startswith("SELECT count(*) FROM read_parquet('"):
        return "count " + os.path.basename(sql.split("'", 2)[1])
    return sql[:40]


class _TimedConnection:
    """A DuckDB connection that records each statement's wall and CPU seconds and the
    process's RSS high-water mark after it, so the fold's peak can be pinned on one step."""

    def __init__(self, con) -> None:
        self._con = con
        self.statements: list[dict] = []

    def __getattr__(self, name: str):
        return getattr(self._con, name)

    def execute(self, sql: str, *params):
        wall, cpu = time.perf_counter(), _cpu_s()
        result = self._con.execute(sql, *params)
        statements = self.statements

        class _Result:
            def fetchall(self) -> list[tuple]:
                rows = result.fetchall()
                statements.append(
                    {
                        "statement": _statement_label(sql),
                        "s": round(time.perf_counter() - wall, 2),
                        "cpu_s": round(_cpu_s() - cpu, 2),
                        "hwm_gib": round(_status_bytes("self", "VmHWM") / GIB, 3),
                    }
                )
                return rows

        return _Result()


def phase_fold(root: str, args: argparse.Namespace) -> dict:
    """fold_release as the corpus asset calls it (no connection given: the fold makes its
    own, with its own memory limit and spill folder); that connection is wrapped to time
    each statement."""
    from kg_platform.pubmed import fold
    from kg_platform.storage.lake import Lake

    made: dict = {}
    connect = fold._connect

    def timed_connect(*a, **k):
        con = connect(*a, **k)
        made["settings"] = _configure(con, args)
        made["con"] = _TimedConnection(con)
        return made["con"]

    fold._connect = timed_connect  # the benchmark's one hook into the fold
    t = time.perf_counter()
    result = fold.fold_release(Lake(root), _files(root))
    seconds = time.perf_counter() - t
    with open(os.path.join(root, "fold_result.json"), "w") as f:
        json.dump(asdict(result), f)
    return {
        "seconds": seconds,
        "rows": result.rows,
        "deleted": result.deleted,
        "deletions_listed": result.deletions_listed,
        "dangling_citations": result.dangling_citations,
        "corpus_bytes": _dir_bytes(os.path.join(root, "corpus")),
        "duckdb": made["settings"],
        "statements": made["con"].statements,
    }


def phase_fold_checks(root: str, _args: argparse.Namespace) -> dict:
    """The corpus asset's four checks, as ``fold_checks`` runs them, each timed alone."""
    from kg_platform.pubmed import fold
    from kg_platform.storage.lake import Lake

    with open(os.path.join(root, "fold_result.json")) as f:
        result = fold.FoldResult(**json.load(f))
    lake, files = Lake(root), _files(root)
    checks = {  # the order and names of fold.fold_checks
        "one_row_per_pmid": lambda: fold.check_one_row_per_pmid(lake),
        "no_deleted_pmid": lambda: fold.check_no_deleted_pmid(lake, files),
        "polars_recount": lambda: fold.check_recount(lake, files, result),
        "edge_sources_in_articles": lambda: fold.check_edge_sources_in_articles(lake),
    }
    t = time.perf_counter()
    timings, failed = [], {}
    for name, check in checks.items():
        wall, cpu = time.perf_counter(), _cpu_s()
        passed, details = check()
        if not passed:
            failed[name] = details
        timings.append(
            {
                "check": name,
                "s": round(time.perf_counter() - wall, 2),
                "cpu_s": round(_cpu_s() - cpu, 2),
                "hwm_gib": round(_status_bytes("self", "VmHWM") / GIB, 3),
            }
        )
    return {"seconds": time.perf_counter() - t, "failed": failed, "checks": timings}


def phase_read_corpus(root: str, _args: argparse.Namespace) -> dict:
    rows = decoded = 0
    t = time.perf_counter()
    for table, columns in GRAPH_COLUMNS.items():
        frame = pq.read_table(os.path.join(root, "corpus", f"{table}.parquet"), columns=columns)
        rows += frame.num_rows
        decoded += frame.nbytes
        del frame
    return {"seconds": time.perf_counter() - t, "rows": rows, "arrow_bytes": decoded}


def phase_graph(root: str, _args: argparse.Namespace) -> dict:
    from kg_platform.graph.build import build_graph
    from kg_platform.storage.lake import Lake

    t = time.perf_counter()
    build = build_graph(Lake(root))
    seconds = time.perf_counter() - t
    s = build.stats
    return {
        "seconds": seconds,
        "articles": s.n_articles,
        "citation_rows": s.citation_rows,
        "citation_edges": s.citation_edges,
        "mesh_rows": s.mesh_rows,
        "mesh_pairs": s.mesh_pairs,
        "array_bytes": s.array_bytes,
        "phase_seconds": build.phase_seconds,
    }


def phase_imports(_root: str, _args: argparse.Namespace) -> dict:
    """What the phases' libraries cost before any data: the fixed part of every peak RSS."""
    t = time.perf_counter()
    import duckdb  # noqa: F401
    import polars  # noqa: F401

    import kg_platform.graph.build  # noqa: F401
    import kg_platform.pubmed.fold  # noqa: F401

    return {"seconds": time.perf_counter() - t}


def phase_generate(root: str, args: argparse.Namespace) -> dict:
    import _synthetic_fold

    t = time.perf_counter()
    release = _synthetic_fold.write_release(root, args.records)
    with open(os.path.join(root, "files.json"), "w") as f:
        json.dump(release.files, f)
    return {"seconds": time.perf_counter() - t, **asdict(release), "files": len(release.files)}


PHASES = {
    "imports": phase_imports,
    "generate": phase_generate,
    "read_tables": phase_read_tables,
    "fold": phase_fold,
    "fold_checks": phase_fold_checks,
    "read_corpus": phase_read_corpus,
    "graph": phase_graph,
}


# -- the parent: one child per phase, its peak RSS alone ---------------------------------------
def _status_bytes(pid: int | str, field: str) -> int:
    """A memory line of /proc/<pid>/status (VmRSS now, VmHWM the peak), in bytes."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_phase(phase: str, root: str, args: argparse.Namespace, forward: list[str]) -> dict:
    """Run one phase in a child; its JSON plus wall and CPU seconds (``wait4``) and its peak
    RSS: the child's own VmHWM, the high-water mark of the memory it exec'd into (``wait4``'s
    ru_maxrss also counts the parent's pages the fork copied). Killed, and reported as
    aborted, when its RSS passes ``--max-rss-gib``."""
    out_path = os.path.join(root, f"{phase}.out")
    limit = int(args.max_rss_gib * GIB)
    killed: dict[str, int] = {}
    polled = [0]
    with open(out_path, "w") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, __file__, "--phase", phase, "--root", root, *forward],
            stdout=out,
            stderr=subprocess.STDOUT,
        )

        def guard() -> None:
            while proc.returncode is None:
                rss = _status_bytes(proc.pid, "VmRSS")
                polled[0] = max(polled[0], rss)
                if rss > limit:
                    killed["rss_bytes"] = rss
                    proc.kill()
                    return
                time.sleep(POLL_S)

        watcher = threading.Thread(target=guard, daemon=True)
        watcher.start()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        wall = time.perf_counter() - started
        watcher.join()
    with open(out_path) as f:
        lines = f.read().strip().splitlines()
    measured = {
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "polled_peak_rss_gib": round(polled[0] / GIB, 3),
    }
    if killed:
        over = f"RSS {killed['rss_bytes'] / GIB:.1f} GiB over --max-rss-gib {args.max_rss_gib}"
        return {**measured, "peak_rss_bytes": polled[0], "aborted": over}
    if proc.returncode != 0:
        errors = [line for line in lines if "Error" in line or "Exception" in line]
        cause = errors[-1] if errors else " | ".join(lines[-5:])
        return {**measured, "aborted": f"exit {proc.returncode}: {cause} (see {out_path})"}
    got = json.loads(lines[-1])
    got["seconds"] = round(got["seconds"], 2)
    return {**got, **measured, "peak_rss_gib": round(got["peak_rss_bytes"] / GIB, 3)}


_UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def _limit_bytes(setting: str) -> int:
    """DuckDB's memory_limit as it reports it ('3.7 GiB') in bytes."""
    number, unit = setting.split()
    return int(float(number) * _UNITS[unit])


def _extrapolate(result: dict, phase: str, factor: float) -> None:
    """Seconds times ``factor``; peak RSS as the libraries' fixed part plus the rest times
    ``factor``, except a fold whose peak reached DuckDB's memory_limit: past the limit DuckDB
    spills, so its peak stays where it is (1M and 5M records at a 1 GB limit: 1.18 and
    1.24 GiB); the linear figure is kept beside it."""
    got = result["phases"].get(phase)
    if not got or "aborted" in got:
        return
    fixed = min(result["phases"]["imports"]["peak_rss_bytes"], got["peak_rss_bytes"])
    seconds = got["seconds"] * factor
    rss = (fixed + (got["peak_rss_bytes"] - fixed) * factor) / GIB
    limit = _limit_bytes(got["duckdb"]["memory_limit"]) if "duckdb" in got else None
    if limit and got["peak_rss_bytes"] >= 0.9 * limit:
        result[f"extrapolated_40m_{phase}_rss_linear_gib"] = round(rss, 1)
        result[f"{phase}_rss_model"] = (
            f"bounded: the peak reached DuckDB's memory_limit ({got['duckdb']['memory_limit']})"
        )
        rss = got["peak_rss_bytes"] / GIB
    result[f"extrapolated_40m_{phase}_s"] = round(seconds)
    result[f"extrapolated_40m_{phase}_cpu_s"] = round(got["cpu_s"] * factor)
    result[f"extrapolated_40m_{phase}_rss_gib"] = round(rss, 1)
    result[f"{phase}_fits_24gib"] = rss <= MACHINE_GIB
    result[f"{phase}_under_1h"] = seconds <= HOUR_S


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None


def fold_records(args: argparse.Namespace) -> dict:
    forward = ["--records", str(args.fold_records)]
    for flag in ("duckdb_memory_limit", "duckdb_temp_dir", "duckdb_threads"):
        if getattr(args, flag):
            forward += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    if args.lake:
        root = os.path.abspath(args.lake)
        os.makedirs(root, exist_ok=True)
    else:
        root = tempfile.mkdtemp(prefix="kg-build-bench-", dir=args.workdir)
    result: dict = {"benchmark": "build", "mode": "fold_records", "records": args.fold_records}
    try:
        phases = [p for p in PHASES if p not in ("imports", "generate")]
        for output in ("corpus", "graph"):  # outputs of an earlier run in --lake
            shutil.rmtree(os.path.join(root, output), ignore_errors=True)
        made = os.path.join(root, "generated.json")
        if os.path.exists(made):
            with open(made) as f:
                if json.load(f).get("records") == args.fold_records:
                    phases.insert(0, "reuse")
        if args.no_reference:
            phases = [p for p in phases if not p.startswith("read_")]
        if args.no_checks:
            phases.remove("fold_checks")
        result["phases"] = {}
        # generating in a child keeps this process small: a fork copies its pages
        first = [] if phases[:1] == ["reuse"] else ["generate"]
        for phase in ["imports", *first, *phases]:
            if phase == "reuse":
                with open(made) as f:
                    result["phases"]["generate"] = {"reused": root, **json.load(f)}
                continue
            got = run_phase(phase, root, args, forward)
            if phase == "generate" and "aborted" not in got:
                with open(made, "w") as f:
                    json.dump(got, f)
            result["phases"][phase] = got
            print(json.dumps({"phase": phase, **got}), flush=True)
            if "aborted" in got and phase != "fold_checks":
                result["aborted"] = f"{phase}: {got['aborted']}"
                break
    finally:
        if not args.keep and not args.lake:
            shutil.rmtree(root, ignore_errors=True)

    factor = BASELINE_RECORDS / args.fold_records
    for phase in ("fold", "fold_checks", "graph"):
        _extrapolate(result, phase, factor)
    # the corpus asset runs the fold and its checks in one step: both count
    done = [p for p in ("fold", "fold_checks", "graph") if f"{p}_fits_24gib" in result]
    if {"fold", "graph"} <= set(done):
        result["fits_24gib"] = all(result[f"{p}_fits_24gib"] for p in done)
        result["under_1h"] = all(result[f"{p}_under_1h"] for p in done)
    ph = result.get("phases", {})
    for phase, reference in (("fold", "read_tables"), ("graph", "read_corpus")):
        if phase in ph and reference in ph and "aborted" not in ph[phase]:
            if "aborted" in ph[reference]:
                continue
            result[f"{phase}_over_{reference}_s"] = _ratio(
                ph[phase]["seconds"], ph[reference]["seconds"]
            )
            result[f"{phase}_over_{reference}_rss"] = _ratio(
                ph[phase]["peak_rss_bytes"], ph[reference]["peak_rss_bytes"]
            )
    result["extrapolation"] = (
        f"linear in records from {args.fold_records:,} to {BASELINE_RECORDS:,} (x{factor:g}): "
        "seconds x factor; peak RSS = the imports' RSS + (peak - imports) x factor. DuckDB "
        "past its memory_limit spills to temp_directory instead of growing"
    )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--fold-records",
        type=int,
        metavar="N",
        help="run the fold and the graph build alone on N synthetic records",
    )
    parser.add_argument("--workdir", default=None, help="scratch folder (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch lake")
    parser.add_argument(
        "--lake",
        help="use and keep this folder; its tables are reused when made for the same N",
    )
    parser.add_argument(
        "--max-rss-gib", type=float, default=12.0, help="kill a phase past this RSS (GiB)"
    )
    parser.add_argument("--no-reference", action="store_true", help="skip the pyarrow reads")
    parser.add_argument("--no-checks", action="store_true", help="skip the corpus checks")
    parser.add_argument(
        "--duckdb-memory-limit",
        help="override the fold's DuckDB memory_limit, e.g. 1GB (default: the fold's own)",
    )
    parser.add_argument(
        "--duckdb-temp-dir", help="override the fold's DuckDB temp_directory (its spill folder)"
    )
    parser.add_argument("--duckdb-threads", type=int, help="the fold's DuckDB threads")
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--records", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        got = PHASES[args.phase](args.root, args)
        got["peak_rss_bytes"] = _status_bytes("self", "VmHWM")
        print(json.dumps(got), flush=True)
        # skip interpreter teardown: after fold_checks it can abort in a native library's
        # thread shutdown ("terminate called without an active exception") once the JSON is out
        os._exit(0)
    if args.fold_records is None:
        parser.error("give a mode: --fold-records N")
    if args.fold_records < 1:
        parser.error("--fold-records must be at least 1")
    result = fold_records(args)
    print(json.dumps(result))
    return 1 if "aborted" in result else 0


if __name__ == "__main__":
    sys.exit(main())
