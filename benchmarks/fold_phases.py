"""The corpus phases of a build replayed on a kept lake: wall, CPU and peak RSS of each, on
one core against every core, interleaved in the same run.

The phases, each as the corpus and corpus_profile steps run it:

- ``fold``: ``fold_release`` of every file, from the per-file tables into a fresh corpus
  (its own DuckDB connection, memory limit and spill folder);
- ``checks``: the corpus step's four blocking checks (``fold_checks``) on that corpus, each
  timed inside the child (``polars_recount`` is the one that reads every per-file table);
- ``profile``: the corpus profile's rows and figures (graph/profile ``article_rows`` and
  ``summarise`` over the catalog's views, as the corpus_profile step runs them).

Each run is a child process, started either pinned to CPU 0 (``taskset -c 0``) or on every
core of this process's affinity; the parent takes the child's wall time, its CPU seconds and
its peak RSS (``wait4``'s rusage: the child's own high-water mark). The pinned and unpinned
runs of a phase alternate (``--reps`` pairs, the first of each pair swapped every time), so
their ratio is paired under the same load. Every child also reports the thread pools its
engines sized (DuckDB's ``threads``, Polars' and Arrow's pools), so an engine that sizes its
pool past the cores it may use shows.

``--lake DIR`` is a kept lake (a rehearsal's ``built-*/lake``) with ``tables/``; only its
per-file tables are read (linked, never written). ``--scale K`` replays on K copies of that
release instead (``--files`` of them in all, default every copy's): copy k's per-file tables
with every PMID (records, citations both ways, deletions, corrections) moved up by k times
the release's PMID span and its files numbered on after copy k-1's, written under ``--work``
(the 10M point from a kept 2.5M lake, in minutes instead of an hour's generation). The fold writes each run's corpus under
``--work`` and deletes it but for the first, which the other phases read; ``--keep`` leaves
the work folder. The records are the corpus articles; ``cpu_s_per_m_records`` is a run's
CPU seconds per million. The last line printed is one JSON object.

``--corpus-of DIR`` reads an already folded corpus instead of folding one (the checks and
the profile at 10M without the fold's minutes): DIR is a kept lake's corpus folder (a
rehearsal's ``run-*/lake/corpus/pubmed26``), linked as the corpus, read and never written;
the fold's result the checks compare with is its manifest's. The phases then exclude
``fold``.

``--reference DIR`` measures a second checkout alike (its ``kg_platform`` first on the
child's path), alternating with this one; the summary then also says whether the two folds
wrote the same parts. A run also reports the share of samples with two or more of the
child's threads runnable (running or waiting for a core: the load does not hide them).

    nice -n 5 .venv/bin/python benchmarks/fold_phases.py \\
        --lake /work/reh/built-84x30000/lake --work /tmp/fold/r84 --reps 1 \\
        --reference /work/wt/fold-ref
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

PHASES = ("fold", "checks", "profile")
GIB = 1 << 30


def _release_files(tables: str) -> list[str]:
    """The files in fold order: NLM numbers the updates on from the baseline's last file."""
    return sorted(n.removesuffix(".parquet") for n in os.listdir(os.path.join(tables, "articles")))


POLL_S = 0.1
TICK = os.sysconf("SC_CLK_TCK")


def _poll_threads(
    pid: int, seen: dict[str, float], runnable: list[int], stop: threading.Event
) -> None:
    """Each thread's CPU seconds (utime + stime from /proc) as last seen, and at every
    sample how many of its threads were runnable (state R: running, or waiting for a core),
    until ``stop``."""
    while not stop.wait(POLL_S):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return
        ready = 0
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            seen[tid] = (int(fields[11]) + int(fields[12])) / TICK
            ready += fields[0] == "R"
        runnable.append(ready)


PMID_COLUMNS = ("pmid", "citing_pmid", "cited_pmid", "ref_pmid")


def _replicate(tables: str, out: str, copies: int, most: int) -> None:
    """``copies`` copies of the per-file tables under ``tables`` into ``out`` (see --scale),
    ``most`` files in all (0: every copy's)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    files = _release_files(tables)
    names = sorted(os.listdir(tables))
    span = [2**62, -1]
    for f in files:
        pmids = pq.read_table(os.path.join(tables, "articles", f + ".parquet"), columns=["pmid"])
        span = [
            min(span[0], pc.min(pmids["pmid"]).as_py()),
            max(span[1], pc.max(pmids["pmid"]).as_py()),
        ]
    step = span[1] - span[0] + 1
    prefix, width = (
        files[0].rstrip("0123456789"),
        len(files[0]) - len(files[0].rstrip("0123456789")),
    )
    first = int(files[0][len(prefix) :])
    for name in names:
        os.makedirs(os.path.join(out, name), exist_ok=True)
    made = 0
    for k in range(copies):
        for n, f in enumerate(files):
            if most and made == most:
                return
            new = f"{prefix}{first + k * len(files) + n:0{width}d}"
            for name in names:
                table = pq.read_table(os.path.join(tables, name, f + ".parquet"))
                for i, col in enumerate(table.column_names):
                    if col in PMID_COLUMNS and k:
                        table = table.set_column(
                            i,
                            col,
                            pc.add(table[col], pa.scalar(k * step, table.schema.field(col).type)),
                        )
                    elif col == "file":
                        table = table.set_column(
                            i, col, pa.array([new] * table.num_rows, table.schema.field(col).type)
                        )
                pq.write_table(table, os.path.join(out, name, new + ".parquet"), compression="zstd")
            made += 1


def _pools(con=None) -> dict:
    import polars as pl
    import pyarrow as pa

    pools = {
        "affinity": len(os.sched_getaffinity(0)),
        "polars": pl.thread_pool_size(),
        "arrow": pa.cpu_count(),
    }
    if con is not None:
        pools["duckdb"] = int(con.execute("SELECT current_setting('threads')").fetchone()[0])
    return pools


# -- the phases (each in its own child) ---------------------------------------------------------
def child_fold(corpus_root: str, files: list[str]) -> dict:
    from dataclasses import asdict

    from kg_platform.pubmed.fold import fold_release
    from kg_platform.pubmed.fold import full as full_fold
    from kg_platform.storage.lake import Lake

    seen: dict = {}
    connect = full_fold.connect

    def noting_connect(*a, **k):
        con = connect(*a, **k)
        seen.update(_pools(con))
        return con

    full_fold.connect = noting_connect  # only to read the pools the fold's connection sized
    result = fold_release(Lake(corpus_root), files)
    with open(os.path.join(corpus_root, "fold_result.json"), "w") as f:
        json.dump(asdict(result), f)
    return {"records": result.rows["articles"], "rows": result.rows, "pools": seen}


def child_checks(corpus_root: str, files: list[str]) -> dict:
    from kg_platform.pubmed.fold import FoldResult, fold_checks
    from kg_platform.storage.lake import Lake

    with open(os.path.join(corpus_root, "fold_result.json")) as f:
        result = FoldResult(**json.load(f))
    outcomes = fold_checks(Lake(corpus_root), files, result)
    failed = {o.name: o.details for o in outcomes if not o.passed}
    if failed:
        raise SystemExit(f"checks failed: {failed}")
    return {
        "records": result.rows["articles"],
        "checks_s": {o.name: o.metadata["seconds"] for o in outcomes},
        "pools": _pools(),
    }


def child_profile(corpus_root: str, _files: list[str]) -> dict:
    from kg_platform.graph import profile as p
    from kg_platform.storage.catalog import Catalog
    from kg_platform.storage.lake import Lake

    catalog = Catalog(Lake(corpus_root))
    spill = os.path.join(corpus_root, "profile-spill")
    # the profile step's own connection: the catalog's bounded one, or in an older reference
    # checkout graph/profile's, or the plain one before either
    if hasattr(catalog, "connect_bounded"):
        con = catalog.connect_bounded(spill)
    else:
        con = p.connect(catalog, spill) if hasattr(p, "connect") else catalog.connect()
    try:
        catalog.refresh_views(con)
        if hasattr(p, "article_rows_from_parts"):  # the step's rows from the parts
            p.article_rows_from_parts(con, catalog.lake)
        else:
            p.article_rows(con)
        profile = p.summarise(con)
        rows = con.sql(f"SELECT {p.ROW_COLUMNS} FROM {p.ROWS}").to_arrow_table()
        pools = _pools(con)
    finally:
        con.close()
    return {
        "records": profile.articles,
        "retention": profile.retention,
        "profile_rows": rows.num_rows,
        "pools": pools,
    }


CHILDREN = {"fold": child_fold, "checks": child_checks, "profile": child_profile}


# -- the parent ------------------------------------------------------------------------------
def _link_tables(lake: str, root: str) -> None:
    os.makedirs(root, exist_ok=True)
    os.symlink(os.path.join(os.path.abspath(lake), "tables"), os.path.join(root, "tables"))


def _run(phase: str, pinned: bool, corpus_root: str, files_json: str, checkout: str = REPO) -> dict:
    """One child (its ``kg_platform`` from ``checkout``): wall, CPU and peak RSS from wait4,
    and what the child reported."""
    report = os.path.join(corpus_root, f"{phase}-report.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", phase, "--checkout", checkout]
    cmd += ["--corpus", corpus_root, "--files-json", files_json, "--report", report]
    if pinned:
        cmd = ["taskset", "-c", "0", *cmd]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd)
    threads: dict[str, float] = {}
    runnable: list[int] = []
    stop = threading.Event()
    poller = threading.Thread(
        target=_poll_threads, args=(proc.pid, threads, runnable, stop), daemon=True
    )
    poller.start()
    _, status, usage = os.wait4(proc.pid, 0)
    stop.set()
    poller.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{phase} ({'pinned' if pinned else 'unpinned'}): exit {proc.returncode}")
    with open(report) as f:
        child = json.load(f)
    cpu = usage.ru_utime + usage.ru_stime
    records = child.get("records") or 0
    busiest = max(threads.values(), default=0.0)
    return {
        "phase": phase,
        "cores": "1 (taskset -c 0)" if pinned else str(len(os.sched_getaffinity(0))),
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "peak_rss_gib": round(usage.ru_maxrss * 1024 / GIB, 3),
        "cpu_s_per_m_records": round(cpu / records * 1e6, 2) if records else None,
        # the CPU of the thread that did most (sampled every POLL_S), and the 2-core bound
        # it sets whatever the load: the rest of the CPU overlapping it at best
        "busiest_thread_cpu_s": round(busiest, 2),
        "bound_2_cores": round(cpu / max(cpu / 2, busiest), 3) if cpu else None,
        "threads_seen": len(threads),
        # the share of samples with at least two threads runnable (running or waiting for
        # a core, so the load does not hide them): the time the phase could use a second
        # core; and the mean of runnable threads
        "two_runnable_share": (
            round(sum(r >= 2 for r in runnable) / len(runnable), 3) if runnable else None
        ),
        "mean_runnable": round(sum(runnable) / len(runnable), 2) if runnable else None,
        **child,
    }


def _link_corpus(corpus: str, root: str) -> None:
    """A kept corpus folder linked as ``root``'s corpus, and the fold's result the checks
    take (rows, deleted, deletions listed, dangling citations) from its manifest."""
    from kg_platform.storage.corpus import CORPUS_PREFIX, FOLD_MANIFEST

    os.symlink(os.path.abspath(corpus), os.path.join(root, CORPUS_PREFIX))
    with open(os.path.join(root, FOLD_MANIFEST)) as f:
        manifest = json.load(f)
    keys = ("rows", "deleted", "deletions_listed", "dangling_citations", "mode", "new_files")
    with open(os.path.join(root, "fold_result.json"), "w") as f:
        json.dump({k: manifest[k] for k in keys} | {"files": manifest["files"]}, f)


def _manifest_parts(root: str) -> dict:
    from kg_platform.storage.corpus import FOLD_MANIFEST

    with open(os.path.join(root, FOLD_MANIFEST)) as f:
        return json.load(f)["parts"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--lake", help="a kept lake holding tables/")
    parser.add_argument("--work", default="/tmp/fold-phases")
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument("--reps", type=int, default=1, help="pinned/unpinned pairs per phase")
    parser.add_argument("--files", type=int, default=0, help="the first N files only")
    parser.add_argument("--scale", type=int, default=0, help="replay on K copies of the release")
    parser.add_argument(
        "--cores",
        default="one,every",
        help="one (pinned to CPU 0), every (unpinned) or both: one,every (the default)",
    )
    parser.add_argument(
        "--reference",
        help="a second checkout (its kg_platform first on the child's path), measured alike, "
        "alternating with this one",
    )
    parser.add_argument(
        "--corpus-of", help="a kept corpus folder to read instead of folding (not with fold)"
    )
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--checkout", help=argparse.SUPPRESS)
    parser.add_argument("--child", choices=PHASES, help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--files-json", help=argparse.SUPPRESS)
    parser.add_argument("--report", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        if args.checkout:
            sys.path.insert(0, os.path.abspath(args.checkout))
            import kg_platform

            where = os.path.abspath(kg_platform.__file__)
            assert where.startswith(os.path.abspath(args.checkout) + os.sep), where
        with open(args.files_json) as f:
            files = json.load(f)
        out = CHILDREN[args.child](args.corpus, files)
        with open(args.report, "w") as f:
            json.dump(out, f)
        return

    phases = [p for p in args.phases.split(",") if p]
    if args.corpus_of and "fold" in phases:
        parser.error("--corpus-of replaces the fold: leave fold out of --phases")
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    lake = args.lake
    if args.scale:
        lake = os.path.join(args.work, "scaled")
        started = time.perf_counter()
        _replicate(
            os.path.join(args.lake, "tables"), os.path.join(lake, "tables"), args.scale, args.files
        )
        print(json.dumps({"scaled_s": round(time.perf_counter() - started, 1)}), file=sys.stderr)
    files = _release_files(os.path.join(lake, "tables"))
    if args.files:
        files = files[: args.files]
    files_json = os.path.join(args.work, "files.json")
    with open(files_json, "w") as f:
        json.dump(files, f)
    kept = os.path.join(args.work, "corpus")  # the first fold's corpus, read by later phases
    checkouts = {"this": REPO, **({"reference": args.reference} if args.reference else {})}
    parts: dict[str, dict] = {}  # each checkout's first fold's parts (manifest entries)
    if args.corpus_of:
        _link_tables(lake, kept)
        _link_corpus(args.corpus_of, kept)
    runs = []
    try:
        n = 0
        for phase in phases:
            for rep in range(args.reps):
                order = [True, False] if rep % 2 == 0 else [False, True]
                wanted = {"one": True, "every": False}
                modes = {wanted[c] for c in args.cores.split(",")}
                names = list(checkouts) if rep % 2 == 0 else list(checkouts)[::-1]
                for pinned in [p for p in order if p in modes]:
                    for name in names:
                        if phase == "fold":
                            root = kept if not os.path.exists(kept) else f"{kept}-{n}"
                            _link_tables(lake, root)
                        else:
                            root = kept
                        run = _run(phase, pinned, root, files_json, checkouts[name])
                        runs.append({"rep": rep, "checkout": name, **run})
                        print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
                        if phase == "fold" and name not in parts:
                            parts[name] = _manifest_parts(root)
                        if root != kept:
                            shutil.rmtree(root, ignore_errors=True)
                        n += 1
    finally:
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)
    summary = {}
    for phase in phases:
        for name in checkouts:
            mine = [r for r in runs if r["phase"] == phase and r["checkout"] == name]
            one = [r for r in mine if r["cores"].startswith("1 ")]
            every = [r for r in mine if not r["cores"].startswith("1 ")]
            speedups = [a["wall_s"] / b["wall_s"] for a, b in zip(one, every, strict=False)]
            summary[phase if name == "this" else f"{phase}/reference"] = {
                "speedup": round(min(speedups), 3) if speedups else None,
                "bound_2_cores": [r["bound_2_cores"] for r in every],
                "two_runnable_share": [r["two_runnable_share"] for r in every],
                "speedups": [round(s, 3) for s in speedups],
                "wall_s_1core": [r["wall_s"] for r in one],
                "wall_s_all": [r["wall_s"] for r in every],
                "cpu_s_1core": [r["cpu_s"] for r in one],
                "cpu_s_all": [r["cpu_s"] for r in every],
                "busiest_thread_cpu_s_all": [r["busiest_thread_cpu_s"] for r in every],
                "peak_rss_gib": max((r["peak_rss_gib"] for r in mine), default=None),
                "cpu_s_per_m_records": [r["cpu_s_per_m_records"] for r in mine],
            }
    if len(parts) == 2:
        # the corpus parts (sha256 of each, from the fold's manifest) of the two checkouts
        summary["fold"]["same_parts_as_reference"] = parts["this"] == parts["reference"]
    print(
        json.dumps(
            {
                "lake": args.lake,
                "files": len(files),
                "cores": len(os.sched_getaffinity(0)),
                "loadavg": os.getloadavg(),
                "summary": summary,
                "runs": runs,
            }
        )
    )


if __name__ == "__main__":
    main()
