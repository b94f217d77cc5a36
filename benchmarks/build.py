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
- ``graph``: ``kg_platform.graph.build.build_graph`` over the folded corpus;
- ``fold_update``: the last file as a daily update folded into the corpus of the others
  (``fold_new_files``), timed against the ``fold`` phase and compared with its tables byte
  for byte (``--no-update`` skips it).

Each phase's seconds (wall and CPU) and peak RSS are extrapolated linearly in records to the
40M-record baseline (RSS: the imports' part fixed, the rest scaled) and compared with one
24 GiB machine and one hour. A parent thread polls each child's RSS and kills it past
``--max-rss-gib``, so a run that would crowd the machine ends with a report instead of the
OOM killer. ``--lake DIR`` keeps the tables and reuses them for the same N. The last line
printed is one JSON object.

``--files N`` writes N synthetic NLM baseline files (``--records-per-file``, default 30,000;
cached under ``--work DIR`` and reused) and builds their pubmed_xml, pubmed_tables and the
corpus four ways, each timed from a fresh KG_HOME: ``serial`` (``dg.materialize`` per file in
this process, the old ``kg build``), ``multiprocess`` (the real ``kg build --jobs``: one
backfill the daemon loops run), ``celery`` (``kg workers start --workers --jobs``, the same
``kg build`` on the Celery executor, ``kg workers stop``) and ``celery_s3`` (the same into an
S3 lake: ``--s3-lake``, by default a local moto server). A way that cannot run reports
``<way>_s: null`` and ``<way>_skipped`` with the reason. ``per_file_step_s`` is the median
wall time of the per-file runs in the instance's run records (the serial instance's).
``<way>_cpu_s`` is the CPU seconds the way cost: the serial process's own, or for Celery
every process of the deployment (each worker with its children, Redis, Postgres) and ``kg
build`` with its children (daemon, code server, runs), itemised in the way's JSON line under
``cpu_s``, beside its ``timeline``: each run from the instance (queued, started, ended) and
each step's submission to Celery, its start and its end, in seconds after the build began. ``--reference DIR`` runs the Celery way from another checkout (its own
.venv) too, before the serial way and this checkout's after it, in the same run:
``celery_reference_s`` and ``speedup_celery_reference``.

    .venv/bin/python benchmarks/build.py --fold-records 1000000
    .venv/bin/python benchmarks/build.py --fold-records 5000000 --duckdb-memory-limit 1GB
    .venv/bin/python benchmarks/build.py --files 16 --work /tmp/kg-build-files
    .venv/bin/python benchmarks/build.py --files 64 --skip multiprocess --s3-lake '' \
        --reference /tmp/ref
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
            """Each fetch (fetchall, fetchnumpy, ...) is timed up to the rows it returns."""

            def __getattr__(self, name: str):
                fetch = getattr(result, name)
                if not name.startswith("fetch"):
                    return fetch

                def timed(*a, **k):
                    rows = fetch(*a, **k)
                    statements.append(
                        {
                            "statement": _statement_label(sql),
                            "s": round(time.perf_counter() - wall, 2),
                            "cpu_s": round(_cpu_s() - cpu, 2),
                            "hwm_gib": round(_status_bytes("self", "VmHWM") / GIB, 3),
                        }
                    )
                    return rows

                return timed

        return _Result()


def phase_fold(root: str, args: argparse.Namespace) -> dict:
    """fold_release as the corpus asset calls it (no connection given: the fold makes its
    own, with its own memory limit and spill folder); that connection is wrapped to time
    each statement."""
    from kg_platform.pubmed import fold
    from kg_platform.pubmed.fold import full
    from kg_platform.storage.lake import Lake

    made: dict = {}
    connect = full.connect

    def timed_connect(*a, **k):
        con = connect(*a, **k)
        made["settings"] = _configure(con, args)
        made["con"] = _TimedConnection(con)
        return made["con"]

    full.connect = timed_connect  # the benchmark's one hook into the fold
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
        outcome = check()
        if not outcome.passed:
            failed[name] = outcome.details
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
    from kg_platform.storage.corpus import read_corpus
    from kg_platform.storage.lake import Lake

    rows = decoded = 0
    t = time.perf_counter()
    for table, columns in GRAPH_COLUMNS.items():
        frame = read_corpus(Lake(root), table, columns=columns)
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


def phase_fold_update(root: str, _args: argparse.Namespace) -> dict:
    """The last file as a daily update: the corpus of every file but the last (a full fold,
    timed as ``prefix_s``), then the last folded into it (``fold_new_files``, timed as
    ``seconds``) and its sampled check; the six tables compared byte for byte with the full
    fold of every file the ``fold`` phase wrote."""
    import filecmp

    from kg_platform.pubmed import fold
    from kg_platform.storage.corpus import corpus_parts
    from kg_platform.storage.lake import Lake

    update = os.path.join(root, "update")
    shutil.rmtree(update, ignore_errors=True)
    os.makedirs(update)
    os.symlink(os.path.join(root, "tables"), os.path.join(update, "tables"))
    lake, files = Lake(update), _files(root)
    t = time.perf_counter()
    fold.fold_release(lake, files[:-1])
    prefix_s, cpu = time.perf_counter() - t, _cpu_s()
    t = time.perf_counter()
    result = fold.fold_release(lake, files)
    seconds, fold_cpu = time.perf_counter() - t, _cpu_s() - cpu
    t = time.perf_counter()
    sample = fold.check_incremental_sample(lake, files, result)
    check_s = time.perf_counter() - t
    full = Lake(root)
    identical = {
        table: corpus_parts(lake, table) == corpus_parts(full, table)
        and all(
            filecmp.cmp(lake.path(key), full.path(key), shallow=False)
            for key in corpus_parts(lake, table)
        )
        for table in fold.CORPUS_TABLES
    }
    shutil.rmtree(update, ignore_errors=True)
    return {
        "seconds": seconds,
        "cpu_s_fold": fold_cpu,
        "prefix_s": prefix_s,
        "mode": result.mode,
        "new_files": result.new_files,
        "touched_pmids": result.touched_pmids,
        "identical_to_full_fold": all(identical.values()),
        "identical_tables": identical,
        "sample_check_s": check_s,
        "sample_check": sample.details if sample.passed else f"FAILED: {sample.details}",
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
    "fold_update": phase_fold_update,
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
        if args.no_update:
            phases.remove("fold_update")
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
    if "fold_update" in ph and "fold" in ph and "aborted" not in ph["fold_update"]:
        # the update folded into the corpus against the full fold of the same files
        result["fold_update_over_fold_s"] = _ratio(
            ph["fold_update"]["seconds"], ph["fold"]["seconds"]
        )
        # CPU seconds: the wall time of a loaded machine says little
        result["fold_update_over_fold_cpu"] = _ratio(
            ph["fold_update"]["cpu_s_fold"], ph["fold"]["cpu_s"]
        )
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


# -- --files N: the per-file steps four ways -----------------------------------------------------
FILE_RECORDS = 30_000
FILE_SELECTION = "key:pubmed_xml or key:pubmed_tables or key:corpus"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _mesh_source() -> str:
    from kg_platform.settings import reference_data_dir

    return str(reference_data_dir() / "mesh")


def _synthetic_files(work: str, n_files: int, per_file: int) -> tuple[str, float | None]:
    """N baseline files of ``per_file`` records each in NLM's layout, cached under ``work``;
    the seconds writing them took (None when reused)."""
    from kg_platform.mesh.source import resolve_mesh_source
    from kg_platform.pubmed.synthetic import write_synthetic_release

    source = os.path.join(work, f"source-{n_files}x{per_file}")
    done = os.path.join(source, "done.json")
    if os.path.exists(done):
        return source, None
    shutil.rmtree(source, ignore_errors=True)
    t = time.perf_counter()
    write_synthetic_release(
        source,
        n_files * per_file,
        n_baseline_files=n_files,
        n_update_files=0,
        mesh_vocabulary=resolve_mesh_source(_mesh_source()).descriptor_vocabulary(),
    )
    seconds = time.perf_counter() - t
    with open(done, "w") as f:
        json.dump({"files": n_files, "records_per_file": per_file, "seconds": seconds}, f)
    return source, seconds


def _run_files(tags, names: list[str]) -> list[str]:
    """The files a run was for: its partition, or its partition range over ``names``."""
    if tags.get("dagster/partition") in names:
        return [tags["dagster/partition"]]
    start = tags.get("dagster/asset_partition_range_start")
    end = tags.get("dagster/asset_partition_range_end")
    if start in names and end in names:
        return names[names.index(start) : names.index(end) + 1]
    return []


def _file_runs(instance, names: list[str]) -> list:
    """The successful runs of the file steps (one file, or a range of files)."""
    import dagster as dg

    records = instance.get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.SUCCESS]))
    return [r for r in records if _run_files(r.dagster_run.tags, names)]


def _file_run_seconds(instance, names: list[str]) -> list[float]:
    """Wall seconds per file of each successful file run (a run over a range of files counts
    its wall time over its files), from the instance's run records."""
    return [
        (r.end_time - r.start_time) / len(_run_files(r.dagster_run.tags, names))
        for r in _file_runs(instance, names)
        if r.start_time and r.end_time
    ]


def _file_run_counts(instance, names: list[str]) -> dict:
    """How many runs the files took, and the events those runs wrote per file."""
    runs = _file_runs(instance, names)
    events = sum(len(instance.all_logs(r.dagster_run.run_id)) for r in runs)
    return {"file_runs": len(runs), "events_per_file": round(events / len(names), 1)}


def _settings(source: str, home: str):
    from pathlib import Path

    from kg_platform.settings import Settings

    return Settings(
        home=Path(home),
        lake=os.path.join(home, "lake"),
        catalog=os.path.join(home, "catalog.duckdb"),
        dagster_home=Path(home) / "dagster",
        pubmed_source=source,
        mesh_source=_mesh_source(),
    )


def files_serial(source: str, home: str, names: list[str]) -> dict:
    """The old ``kg build``: ``dg.materialize`` of pubmed_xml + pubmed_tables per file, one
    after another in this process, then the corpus; a temporary instance."""
    import dagster as dg

    from kg_platform.assets.partitions import pubmed_files, pubmed_releases, release_of
    from kg_platform.definitions import build_definitions

    defs = build_definitions(_settings(source, home))
    assets, resources = list(defs.assets or []), dict(defs.resources or {})
    release = release_of(names[0])
    # one file at a time, parsed in this process (no pool to start per file)
    os.environ["KG_PARSE_WORKERS"] = "1"
    t, cpu = time.perf_counter(), _cpu_s()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(pubmed_files.name, names)
        instance.add_dynamic_partitions(pubmed_releases.name, [release])
        for name in names:
            dg.materialize(
                assets,
                selection=["pubmed_xml", "pubmed_tables"],
                partition_key=name,
                instance=instance,
                resources=resources,
            )
        per_file = _file_run_seconds(instance, names)
        counts = _file_run_counts(instance, names)
        dg.materialize(
            assets,
            selection=["corpus"],
            partition_key=release,
            instance=instance,
            resources=resources,
        )
    os.environ.pop("KG_PARSE_WORKERS")
    return {
        "seconds": time.perf_counter() - t,
        "cpu_s": {"total": round(_cpu_s() - cpu, 1)},
        "per_file_run_s": per_file,
        **counts,
    }


def _kg(
    home: str, args: list[str], extra_env: dict[str, str] | None = None, checkout: str = REPO
) -> float:
    """``kg <args>`` of ``checkout`` (its .venv; this one's by default) with this KG_HOME;
    its wall seconds (a failure raises with its tail)."""
    env = {**os.environ, "KG_HOME": home, "DAGSTER_HOME": os.path.join(home, "dagster")}
    env.pop("KG_EXECUTOR", None)
    env.update(extra_env or {})
    kg = os.path.join(checkout, ".venv", "bin", "kg")
    if checkout == REPO:
        kg = os.path.join(os.path.dirname(sys.executable), "kg")
    t = time.perf_counter()
    done = subprocess.run(
        [kg, *args],
        env=env,
        cwd=checkout,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-4:]
        raise RuntimeError(f"kg {' '.join(args)}: exit {done.returncode}: {' | '.join(tail)}")
    return time.perf_counter() - t


def _instance_file_runs(home: str, names: list[str]) -> dict:
    import dagster as dg

    with dg.DagsterInstance.from_config(os.path.join(home, "dagster")) as instance:
        return {
            "per_file_run_s": _file_run_seconds(instance, names),
            **_file_run_counts(instance, names),
        }


def files_kg_build(
    source: str, home: str, names: list[str], jobs: int, lake: str, checkout: str = REPO
) -> dict:
    """The real ``kg build`` of the per-file steps and the corpus: one backfill the daemon
    loops run with ``--jobs`` runs at once."""
    build = [
        "build",
        "--pubmed-source",
        source,
        "--mesh-source",
        _mesh_source(),
        "--lake",
        lake,
        "--select",
        FILE_SELECTION,
        "--jobs",
        str(jobs),
    ]
    seconds = _kg(home, build, checkout=checkout)
    return {"seconds": seconds, **_instance_file_runs(home, names)}


def _process_cpu() -> tuple[dict[int, int], dict[int, float]]:
    """Every process's parent and CPU seconds (its own, and its reaped children's), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    parents, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        cpu[int(entry)] = sum(int(x) for x in fields[11:15]) / tick
    return parents, cpu


def _tree_cpu_s(root: int, parents: dict[int, int], cpu: dict[int, float]) -> float:
    """The CPU seconds of ``root`` and every live descendant (reaped ones are in their
    parent's children's time)."""
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        total += cpu.get(pid, 0.0)
        stack.extend(p for p, parent in parents.items() if parent == pid)
    return total


def _deployment_cpu(home: str) -> dict[str, float]:
    """CPU seconds of each process of the running deployment (workers with their children)."""
    with open(os.path.join(home, "workers", "state.json")) as f:
        processes = json.load(f)["processes"]
    parents, cpu = _process_cpu()
    return {p["name"].split("@")[0]: _tree_cpu_s(p["pid"], parents, cpu) for p in processes}


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


TIMELINE_EVENTS = {
    "STEP_START": "start",
    "STEP_SUCCESS": "end",
    "STEP_FAILURE": "failed",
}


def _timeline(home: str, names: list[str], t0: float) -> list[dict]:
    """Each run of the build, from the instance: when it was queued, started and ended, and
    for each step when the run submitted it to Celery, when it started and ended (seconds
    after ``t0``, the build's start)."""
    import dagster as dg

    def at(ts: float | None) -> float | None:
        return None if ts is None else round(ts - t0, 1)

    rows = []
    with dg.DagsterInstance.from_config(os.path.join(home, "dagster")) as instance:
        for record in sorted(instance.get_run_records(), key=lambda r: r.create_timestamp):
            run = record.dagster_run
            files = _run_files(run.tags, names)
            steps: dict[str, dict] = {}
            for entry in instance.all_logs(run.run_id):
                event = entry.dagster_event
                key = entry.step_key
                if event is None or key is None:
                    continue
                mark = TIMELINE_EVENTS.get(event.event_type_value)
                message = entry.user_message or ""
                if mark is None and message.startswith("Submitting celery task"):
                    mark = "submit"
                worker = _event_metadata(event).get("Celery worker") if mark is None else None
                if worker:
                    # dagster-celery's task, its instance opened and its plan made
                    mark = "planned"
                    steps.setdefault(key, {})["worker"] = worker.split("@")[0]
                if mark:
                    steps.setdefault(key, {})[mark] = at(entry.timestamp)
            rows.append(
                {
                    "run": run.run_id[:8],
                    "files": f"{files[0]}..{files[-1]}" if len(files) > 1 else (files or [""])[0],
                    "queued": at(record.create_timestamp.timestamp()),
                    "start": at(record.start_time),
                    "end": at(record.end_time),
                    "steps": steps,
                }
            )
    return rows


def _event_metadata(event) -> dict[str, str]:
    """An engine event's metadata as plain text values."""
    data = getattr(event, "event_specific_data", None)
    metadata = getattr(data, "metadata", None) or {}
    return {k: str(getattr(v, "value", v)) for k, v in metadata.items()}


def idle_shares(timeline: list[dict], step: str = "pubmed_file_batch") -> dict:
    """How much of the file steps' span each worker spent without one running: over the span
    from the first ``step`` submitted to the last ended, 1 - (its steps' seconds from the
    task's plan made, ``planned``, to ``end``) / span; and the seconds from a step's
    submission (or, when it waited for a busy worker, from that worker's previous step's
    end) to its start, the task's set-up. A figure the load changes little: it counts gaps,
    not speed."""
    steps = [
        s for run in timeline for key, s in run["steps"].items() if key == step and "worker" in s
    ]
    steps = [s for s in steps if s.get("end") is not None and s.get("submit") is not None]
    if not steps:
        return {}
    first = min(s["submit"] for s in steps)
    last = max(s["end"] for s in steps)
    span = max(last - first, 1e-9)
    shares: dict = {"span_s": round(span, 1)}
    for worker in sorted({s["worker"] for s in steps}):
        own = sorted((s for s in steps if s["worker"] == worker), key=lambda s: s["start"])
        busy = sum(s["end"] - s.get("planned", s["start"]) for s in own)
        setups, free_at = [], first
        for s in own:
            setups.append(round(s["start"] - max(s["submit"], free_at), 1))
            free_at = s["end"]
        shares[worker] = {
            "steps": len(own),
            "idle_share": round(1 - busy / span, 3),
            "setup_s": setups,
        }
    return shares


def files_celery(
    source: str, home: str, names: list[str], workers: int, lake: str, checkout: str = REPO
) -> dict:
    """``kg workers start`` (Redis, Postgres, N workers), the same ``kg build`` on the Celery
    executor, ``kg workers stop``; with the CPU seconds of each process of the deployment and
    of ``kg build`` (its own and its children's: daemon, code server, runs), and the runs'
    timeline from the instance."""
    _kg(home, ["workers", "start", "--workers", str(workers)], checkout=checkout)
    try:
        before, children = _deployment_cpu(home), _children_cpu_s()
        t0 = time.time()
        result = files_kg_build(source, home, names, workers, lake, checkout)
        after = _deployment_cpu(home)
        cpu = {name: round(after[name] - before.get(name, 0.0), 1) for name in after}
        cpu["kg_build"] = round(_children_cpu_s() - children, 1)
        result["cpu_s"] = {**cpu, "total": round(sum(cpu.values()), 1)}
        result["timeline"] = _timeline(home, names, t0)
        result["idle"] = idle_shares(result["timeline"])
        return result
    finally:
        _kg(home, ["workers", "stop"], checkout=checkout)


def _moto_lake() -> tuple[str, object]:
    """A real S3 server (moto) on 127.0.0.1 with a fresh bucket, set in this environment (the
    kg subprocesses inherit it); the lake URL and the server."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per S3 request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    os.environ.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
        }
    )
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="kg-bench")
    return "s3://kg-bench/kg", server


def files_celery_s3(source: str, home: str, names: list[str], workers: int, lake: str) -> dict:
    """The Celery build into an S3 lake: ``lake`` or, for ``moto``, a local moto server."""
    server = None
    if lake == "moto":
        lake, server = _moto_lake()
    try:
        return {**files_celery(source, home, names, workers, lake), "lake": lake}
    finally:
        if server is not None:
            server.stop()


def _median(values: list[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def files_mode(args: argparse.Namespace) -> dict:
    from kg_platform.pubmed.source import PubmedSource, current_release

    work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="kg-build-files-"))
    os.makedirs(work, exist_ok=True)
    # mkdtemp makes it 0700: Postgres (the Celery way) runs as its own user when we are root
    # and must enter its data folder under it
    os.chmod(work, 0o755)
    source, generated_s = _synthetic_files(work, args.files, args.records_per_file)
    names = [f.name for f in current_release(PubmedSource(source).list_files())]
    result: dict = {
        "benchmark": "build",
        "mode": "files",
        "files": len(names),
        "records_per_file": args.records_per_file,
        "generated_s": None if generated_s is None else round(generated_s, 1),
        "cores": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "files_per_run": int(os.environ.get("KG_FILES_PER_RUN") or 16),
    }

    def fresh(way: str) -> str:
        home = os.path.join(work, way)
        shutil.rmtree(home, ignore_errors=True)
        os.makedirs(home)
        return home

    runs: dict[str, dict] = {}
    ways = {
        "serial": lambda h: files_serial(source, h, names),
        "multiprocess": lambda h: files_kg_build(source, h, names, args.jobs, f"{h}/lake"),
        "celery": lambda h: files_celery(source, h, names, args.jobs, f"{h}/lake"),
    }
    if args.s3_lake:
        ways["celery_s3"] = lambda h: files_celery_s3(source, h, names, args.jobs, args.s3_lake)
    order = ["serial", "multiprocess", "celery", "celery_s3"]
    if args.reference:
        reference = os.path.abspath(args.reference)
        ways["celery_reference"] = lambda h: files_celery(
            source, h, names, args.jobs, f"{h}/lake", reference
        )
        result["reference"] = reference
        order.insert(0, "celery_reference")  # before the serial way, this checkout's after it
    for way in order:
        if way in args.skip or way not in ways:
            reason = "--skip" if way in args.skip else "no --s3-lake given (s3://bucket/prefix)"
            result[f"{way}_s"], result[f"{way}_skipped"] = None, reason
            continue
        try:
            runs[way] = ways[way](fresh(way))
        except Exception as exc:  # noqa: BLE001 - a way that cannot run is reported, not faked
            result[f"{way}_s"], result[f"{way}_skipped"] = None, f"{type(exc).__name__}: {exc}"
            continue
        result[f"{way}_s"] = round(runs[way]["seconds"], 1)
        result[f"{way}_per_file_step_s"] = _median(runs[way]["per_file_run_s"])
        result[f"{way}_file_runs"] = runs[way].get("file_runs")
        result[f"{way}_events_per_file"] = runs[way].get("events_per_file")
        result[f"{way}_cpu_s"] = runs[way].get("cpu_s", {}).get("total")
        if runs[way].get("idle"):
            result[f"{way}_idle"] = runs[way]["idle"]
        print(json.dumps({"way": way, **runs[way]}), flush=True)
    serial = result.get("serial_s")
    for way in ("multiprocess", "celery", "celery_reference"):
        got = result.get(f"{way}_s")
        result[f"speedup_{way}"] = _ratio(serial, got) if serial and got else None
    steps = runs.get("serial", {}).get("per_file_run_s") or next(
        (r["per_file_run_s"] for r in runs.values() if r["per_file_run_s"]), []
    )
    result["per_file_step_s"] = None if not steps else round(_median(steps), 2)
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
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
    mode.add_argument(
        "--files",
        type=int,
        metavar="N",
        help="build the same N synthetic NLM files serially, with kg build --jobs, on Celery",
    )
    parser.add_argument(
        "--records-per-file", type=int, default=FILE_RECORDS, help="--files: records per file"
    )
    parser.add_argument("--work", help="--files: folder that caches the synthetic files")
    parser.add_argument("--jobs", type=int, default=2, help="--files: runs or workers at once")
    parser.add_argument(
        "--s3-lake",
        default="moto",
        help="--files: s3://bucket/prefix for the Celery S3 run (default: a local moto server; "
        "'' skips it)",
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=["serial", "multiprocess", "celery", "celery_s3"],
        help="--files: a way not to run",
    )
    parser.add_argument(
        "--reference",
        metavar="DIR",
        help="--files: also run the celery way from this other checkout (its .venv), before "
        "the serial way, in the same run (celery_reference_s, speedup_celery_reference)",
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
        "--no-update", action="store_true", help="skip the incremental fold of the last file"
    )
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
    if args.files is not None:
        if args.files < 1:
            parser.error("--files must be at least 1")
        result = files_mode(args)
        print(json.dumps(result))
        return 0
    if args.fold_records is None:
        parser.error("give a mode: --fold-records N or --files N")
    if args.fold_records < 1:
        parser.error("--fold-records must be at least 1")
    result = fold_records(args)
    print(json.dumps(result))
    return 1 if "aborted" in result else 0


if __name__ == "__main__":
    sys.exit(main())
