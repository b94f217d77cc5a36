"""Rehearsal: a synthetic release through the real `kg build`, then `kg ask`, `kg status`
and the Dagster UI over what it built; optionally a daily update made queryable.

Phases, each printed as one JSON line (the last line is one JSON object with all of them):

- ``generate``: ``--files`` baseline files of ``--records-per-file`` records in NLM's layout
  and naming (``benchmarks/build.py``'s generator, cached under ``--work``);
- ``build``: ``kg build`` of the question path (``--select``, default the graph, the
  grounding index and the corpus profile with everything upstream) into a fresh KG home,
  Dagster instance and lake: wall; CPU of the whole process tree; peak RSS of every process
  it started, grouped by role (the CLI, code servers, run workers, pool processes); the
  runs' wall per asset from the instance; disk per lake folder; runs and events in the
  instance;
- ``ask``: ``kg ask --json`` cold (a fresh process per question, ``--runs`` times) and warm
  (one opened ``KnowledgeGraph``), on questions the graph answers and one it refuses;
- ``status``: ``kg status``;
- ``ui``: ``dagster-webserver`` over the instance and headless Chromium (Playwright,
  ``/usr/bin/chromium``): seconds until pubmed_tables' partitions page counts every file
  materialised and the pubmed group's asset graph shows its node, and the webserver's and its code server's peak RSS;
- ``update`` (``--update``): one update file of ``--update-records`` records (new PMIDs,
  re-issued records, Version 2 of existing ones, a DeleteCitation of ``--update-deleted``
  baseline PMIDs) beside the baseline, then ``kg build`` again and one cold ``kg ask``:
  ``to_queryable_s`` is the build's wall plus the ask's, and the answer must come from a
  new graph build;
- ``full`` (``--update``): the same release refolded in full and its graph rebuilt
  (``KG_FOLD_FULL=1 kg build --select 'key:corpus or key:graph or key:corpus_profile'
  --force``) and one cold ``kg ask``: the reference for the update, in the same run.

    benchmarks/rehearsal.py --files 4 --records-per-file 2000 --work /tmp/kg-rehearsal --update
    benchmarks/rehearsal.py --files 84 --work /tmp/kg-rehearsal                # 2.5M records
    benchmarks/rehearsal.py --files 334 --work /tmp/kg-rehearsal --update      # 10M records

Each build also reports its ``phases``: per step of its runs (the file runs' parse
batches, mesh_tables, the corpus fold and its checks, the corpus profile, the graph's build
and its checks, the grounding index, ...; a corpus or graph step is cut in two at the
seconds its materialization reports) and ``outside_steps`` (start-up, planning, launches,
ticks: the wall when no step ran, the CPU not inside a step), the wall (``span_s``: while
one of its steps ran; ``wall_s``: their seconds summed), CPU seconds, CPU per million
records and peak RSS of the process running it. Steps run inside their run's worker
process, so a step's CPU and peak are that worker's and its children's (the parse pool)
inside the step's window (STEP_START to its end, from the instance), read off every
process's samples (0.2 s): ``benchmarks/_phases.py``. ``parse`` is the parse's own CPU per
record on the release's first file (``benchmarks/parse.py``'s child, same run), and
``cpu_s_per_million`` sets the build's beside it.

``--cores 1 2`` builds the release once per count, pinned to that many cores (the CLI's
CPU affinity, which every process of the build inherits; the build with most cores is the
one measured further, the others go to a home and lake of their own, removed once
measured): ``phases`` then holds each phase's figures per count and its ``speedup_2``
(span on 1 core over span on 2), ``build_speedup_2`` the build's. A pinned build keeps its
``--jobs`` runs and its parse workers (sized by ``os.cpu_count()``); DuckDB's threads follow
the affinity (``settings.usable_cores``).

``--project A B`` (no build) reads two results (the last JSON line of each run's output)
at two sizes and projects the build to ``--target-records`` (40M) on ``--target-cores``
(2 and 26): per phase, one-core seconds on a line through the two sizes, then Amdahl's
``T1 * (f + (1 - f) / cores)`` with ``f`` from its speedup on 2 cores against 1; a phase
stops scaling where its speedup is under half the cores (``benchmarks/_phases.py``).

    benchmarks/rehearsal.py --files 4 --records-per-file 2000 --work /tmp/kg-rehearsal --cores 1 2
    benchmarks/rehearsal.py --project /tmp/r84.log /tmp/r334.log

Each build also reports its ``timeline`` from the instance (backfill submitted; per run
created, started, ended, each step's seconds, the corpus checks' own seconds) and
``output_at_s`` (when each line of its output came). With ``--update`` the built home and
lake are kept (``built-<files>x<records>`` under ``--work``); ``--reuse-build`` starts from
that copy and measures the update and the refold again; ``--refold-kept`` first refolds the
kept state with this code and keeps that (a state of an earlier corpus layout is migrated).

The machine's load is printed with each phase: wall time on a shared machine is inflated
by the load, CPU seconds much less.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import random
import re
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _phases  # noqa: E402
from cold_ask import REFUSED, ask_cold  # noqa: E402

from kg_platform.pubmed.fold import FULL_FOLD_ENV  # noqa: E402

BIN = os.path.dirname(sys.executable)
SELECT = "+key:graph or +key:grounding_index or key:corpus_profile"
REFOLD = "key:corpus or key:graph or key:corpus_profile"
CHROMIUM = "/usr/bin/chromium"
UI_WAIT_MS = 300_000
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
GIB, MIB = 1 << 30, 1 << 20
TICK = os.sysconf("SC_CLK_TCK")


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# -- every process a command starts: peak RSS and CPU by role ---------------------------------
def _role(cmdline: str) -> str:
    """A process's part in a build, from its command line. Dagster starts run workers and
    step processes alike through multiprocessing (spawn, forkserver), as the parse pool does:
    one role for all three."""
    if "resource_tracker" in cmdline:
        return "resource_tracker"
    if "watch_orphans" in cmdline:
        return "orphan_watcher"
    if cmdline.startswith("tail "):
        return "log_tail"
    if "spawn_main" in cmdline or "forkserver" in cmdline or "execute_run" in cmdline:
        return "run_step_or_pool_process"
    if "api grpc" in cmdline or "code-server" in cmdline:
        return "code_server"
    if "dagster-webserver" in cmdline:
        return "webserver"
    if "chromium" in cmdline or "chrome" in cmdline:
        return "browser"
    if "/kg " in cmdline or "kg_platform.cli" in cmdline:
        return "cli"
    return os.path.basename(cmdline.split(" ")[0]) or "other"


def _boot_time() -> float:
    with open("/proc/stat") as f:
        return float(next(x.split()[1] for x in f if x.startswith("btime ")))


BOOT = _boot_time()


def _proc(pid: int) -> tuple[int, int, float, int, float] | None:
    """(parent pid, VmHWM bytes, CPU seconds, VmRSS bytes, start time) of a live process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        hwm = rss = 0
        with open(f"/proc/{pid}/status") as f:
            for x in f:
                if x.startswith("VmHWM:"):
                    hwm = int(x.split()[1]) * 1024
                elif x.startswith("VmRSS:"):
                    rss = int(x.split()[1]) * 1024
                    break
    except (OSError, IndexError, ValueError):
        return None
    cpu = (int(fields[11]) + int(fields[12])) / TICK
    return int(fields[1]), hwm, cpu, rss, BOOT + int(fields[19]) / TICK


class ProcessTree:
    """Polls every descendant of ``root`` (every 0.2 s): each process's peak RSS (VmHWM) and
    CPU at its last poll, and its role from its command line; with ``samples``, every poll's
    (time, CPU, RSS, VmHWM) too, for the build's phases (``_phases.attribute``). A process
    that lives less than a poll is missed; one's figures are those of its last poll.
    Processes are told apart by (pid, start time), so a reused pid is a new process."""

    def __init__(self, root: int, samples: bool = False) -> None:
        self.root, self.seen, self._stop = root, {}, threading.Event()
        self.samples = samples
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            parents = {}
            for name in os.listdir("/proc"):
                if name.isdigit() and (got := _proc(int(name))) is not None:
                    parents[int(name)] = got
            inside = {self.root}
            changed = True
            while changed:  # descendants: processes whose parent is inside
                changed = False
                for pid, (ppid, *_) in parents.items():
                    if ppid in inside and pid not in inside:
                        inside.add(pid)
                        changed = True
            for pid in inside & parents.keys():
                ppid, hwm, cpu, rss, start = parents[pid]
                key = (pid, round(start, 2))
                entry = self.seen.get(key)
                if entry is None:
                    try:
                        with open(f"/proc/{pid}/cmdline", "rb") as f:
                            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                    except OSError:
                        continue
                    if not cmd:  # a zombie: nothing left to measure
                        continue
                    parent = parents.get(ppid)
                    entry = self.seen[key] = {
                        "role": _role(cmd),
                        "peak": 0,
                        "cpu": 0.0,
                        "cmd": cmd[:160],
                        "pid": pid,
                        "start": start,
                        "parent": None if parent is None else (ppid, round(parent[4], 2)),
                        "samples": [],
                    }
                entry["peak"] = max(entry["peak"], hwm)
                entry["cpu"] = max(entry["cpu"], cpu)
                if self.samples:
                    entry["samples"].append((now, cpu, rss, hwm))
            self._stop.wait(0.2)

    def processes(self) -> dict:
        """Every process seen: key -> pid, parent key, start time and samples."""
        return {
            key: {k: e[k] for k in ("pid", "parent", "start", "samples")}
            for key, e in self.seen.items()
        }

    def process_of(self, pid: int, at: float):
        """The key of the process ``pid`` that was alive at ``at`` (the latest started)."""
        keys = [k for k, e in self.seen.items() if e["pid"] == pid and e["start"] <= at + 1]
        return max(keys, key=lambda k: self.seen[k]["start"], default=None)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        roles: dict[str, dict] = {}
        for entry in self.seen.values():
            r = roles.setdefault(
                entry["role"],
                {"processes": 0, "peak_rss_mib": 0, "cpu_s": 0.0, "example": entry["cmd"]},
            )
            r["processes"] += 1
            r["peak_rss_mib"] = max(r["peak_rss_mib"], round(entry["peak"] / MIB))
            r["cpu_s"] = round(r["cpu_s"] + entry["cpu"], 1)
        return roles


def measured(
    command: list[str],
    env: dict,
    log: Path,
    cores: int | None = None,
    tree: list | None = None,
    cwd: str = REPO,
) -> dict:
    """``command`` run to its end with its output in ``log``: wall, CPU of the whole tree
    (the children's rusage), the process tree's figures by role, and when each line of its
    output came (seconds after the start: where a command's own phases end). With ``cores``
    the command runs pinned to the first ``cores`` CPUs (its affinity, which every process
    it starts inherits); with ``tree`` (a list) every process's samples are kept and the
    ``ProcessTree`` appended to it. It runs in ``cwd``: `python -m` (the code server) puts
    that folder first on its path, so it is the checkout whose code runs. (``wait4``'s
    ru_maxrss is not used: a forked child starts with its parent's high-water mark, which
    survives its exec, so it reports at least this script's own RSS.)"""
    cpu = _children_cpu()
    started = time.perf_counter()
    lines: list[list] = []
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(command)}\n".encode())
        out.flush()
        cpus = None if cores is None else set(sorted(os.sched_getaffinity(0))[:cores])
        child = subprocess.Popen(
            command,
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
        )
        processes = ProcessTree(child.pid, samples=tree is not None)
        for line in child.stdout:
            at = round(time.perf_counter() - started, 2)
            out.write(f"[{at:7.2f}] ".encode() + line)
            out.flush()
            if text := line.decode(errors="replace").strip():
                lines.append([at, text[:120]])
        _, status, _ = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    roles = processes.stop()
    if tree is not None:
        tree.append(processes)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-6:]
        raise RuntimeError(f"{' '.join(command[:3])}: exit {code}: {' | '.join(tail)}")
    return {
        "wall_s": round(wall, 1),
        # the CPU of the descendants reaped through this child, and the sum over every
        # process seen (a lower bound: each one's CPU at its last poll); Dagster's run
        # workers are not all reaped by the CLI, so the second is the larger
        "cpu_s_reaped": round(_children_cpu() - cpu, 1),
        "cpu_s_tree": round(sum(r["cpu_s"] for r in roles.values()), 1),
        "processes": roles,
        "output_at_s": lines[:40],
        "load_after": _load(),
    }


# -- the release ------------------------------------------------------------------------------
def baseline(work: str, files: int, per_file: int) -> tuple[str, float | None]:
    from build import _synthetic_files  # benchmarks/build.py: NLM naming, sizes, cache

    return _synthetic_files(work, files, per_file)


def _records(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line for line in f.read().split("\n") if line.startswith("<PubmedArticle>")]


def _pmid(record: str) -> int:
    return int(re.search(r'<PMID Version="\d+">(\d+)</PMID>', record).group(1))


def write_update(source: str, out: str, records: int, deleted: int, seed: int = 1) -> Path:
    """A source folder ``out`` holding ``source``'s baseline (linked) and one update file
    after it: a fifth of ``records`` re-issued baseline records, a fifth given Version 2,
    the rest new PMIDs citing baseline ones, and a DeleteCitation of ``deleted`` other
    baseline PMIDs; the existing PMIDs are drawn from files spread over the release."""
    from kg_platform.mesh.source import resolve_mesh_source
    from kg_platform.pubmed.synthetic import _ReleaseWriter

    from build import _mesh_source

    base = sorted(Path(source, "baseline").glob("*.xml.gz"))
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "baseline"))
    for path in Path(source, "baseline").iterdir():
        os.symlink(path, os.path.join(out, "baseline", path.name))
    rng = random.Random(seed)
    drawn_from = base[:: max(1, len(base) // 8)]
    n_old = records // 5
    per_file = -(-(2 * n_old + deleted) // len(drawn_from))
    old: list[str] = []
    for path in drawn_from:
        old += rng.sample(_records(path), per_file)
    rng.shuffle(old)
    reissued, versioned = old[:n_old], old[n_old : 2 * n_old]
    gone = sorted(_pmid(r) for r in old[2 * n_old : 2 * n_old + deleted])
    versioned = [r.replace('<PMID Version="1">', '<PMID Version="2">', 1) for r in versioned]
    last = _records(base[-1])
    vocabulary = resolve_mesh_source(_mesh_source()).descriptor_vocabulary()
    number = int(base[-1].name[len("pubmedYYn") : -len(".xml.gz")]) + 1
    writer = _ReleaseWriter(Path(out), 26, vocabulary, seed, len(base) * len(last) + records)
    writer.next_pmid = _pmid(last[-1]) + 1
    # new records cite the baseline PMIDs drawn, by preferential attachment from there on
    writer.pmids = [_pmid(r) for r in old]
    writer.attachment = list(writer.pmids)
    n_new = records - 2 * n_old
    start = writer.n_records - n_new
    new = [writer.render(writer.new_article(start + i)) for i in range(n_new)]
    return writer._write("updatefiles", number, [*new, *reissued, *versioned], gone)


# -- the instance and the lake ----------------------------------------------------------------
def _dir_bytes(path: str) -> int:
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def disk(lake: str, dagster_home: str) -> dict:
    """Bytes per lake folder (and per table under tables/), and the instance's."""
    out = {}
    for name in sorted(os.listdir(lake)) if os.path.isdir(lake) else []:
        path = os.path.join(lake, name)
        if name == "tables":
            for table in sorted(os.listdir(path)):
                out[f"tables/{table}"] = _dir_bytes(os.path.join(path, table))
        out[name] = _dir_bytes(path) if os.path.isdir(path) else os.path.getsize(path)
    out["dagster_home"] = _dir_bytes(dagster_home)
    return {k: round(v / MIB, 1) for k, v in out.items()} | {"unit": "MiB"}


def instance_counts(dagster_home: str) -> dict:
    """Runs and event rows in the instance's SQLite storage (every .db holding event_logs:
    the per-run logs and the index shard, apart)."""
    counts = {"runs": 0, "run_events": 0, "index_events": 0, "asset_check_executions": 0}
    for folder, _, names in os.walk(dagster_home):
        for name in names:
            if not name.endswith(".db"):
                continue
            with sqlite3.connect(f"file:{os.path.join(folder, name)}?mode=ro", uri=True) as con:
                tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
                if "runs" in tables:
                    counts["runs"] += con.execute("SELECT count(*) FROM runs").fetchone()[0]
                if "event_logs" in tables:
                    n = con.execute("SELECT count(*) FROM event_logs").fetchone()[0]
                    counts["index_events" if name == "index.db" else "run_events"] += n
                if "asset_check_executions" in tables:
                    counts["asset_check_executions"] += con.execute(
                        "SELECT count(*) FROM asset_check_executions"
                    ).fetchone()[0]
    return counts


def runs_by_asset(dagster_home: str, since: float) -> dict:
    """The instance's runs started after ``since``: per asset selection, how many, their
    summed and longest wall seconds."""
    import dagster as dg

    out: dict[str, dict] = {}
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        for record in instance.get_run_records():
            if not record.start_time or record.start_time < since or not record.end_time:
                continue
            run = record.dagster_run
            keys = sorted(k.to_user_string() for k in run.asset_selection or [])
            label = "+".join(keys) or run.job_name
            entry = out.setdefault(label, {"runs": 0, "wall_s": 0.0, "longest_s": 0.0})
            wall = record.end_time - record.start_time
            entry["runs"] += 1
            entry["wall_s"] = round(entry["wall_s"] + wall, 1)
            entry["longest_s"] = round(max(entry["longest_s"], wall), 1)
            if run.status != dg.DagsterRunStatus.SUCCESS:
                entry.setdefault("not_succeeded", []).append(str(run.status.value))
    return out


def timeline(dagster_home: str, since: float) -> dict:
    """Where a build's wall went, from the instance, in seconds after ``since`` (the command's
    start): when the backfill was submitted, and per run (in creation order) when it was
    created, started and ended, each step's own seconds (STEP_START to its end) and the
    seconds each check recorded (the corpus checks time themselves)."""
    import dagster as dg

    step_events = {
        dg.DagsterEventType.STEP_START,
        dg.DagsterEventType.STEP_SUCCESS,
        dg.DagsterEventType.STEP_FAILURE,
    }
    out: dict = {"backfills_submitted_s": [], "runs": []}
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        for backfill in instance.get_backfills():
            if backfill.backfill_timestamp >= since:
                out["backfills_submitted_s"].append(round(backfill.backfill_timestamp - since, 2))
        records = [
            r
            for r in instance.get_run_records()
            if r.create_timestamp.timestamp() >= since and r.end_time
        ]
        for record in sorted(records, key=lambda r: r.create_timestamp):
            run = record.dagster_run
            keys = sorted(k.to_user_string() for k in run.asset_selection or [])
            entry = {
                "run": "+".join(keys) or run.job_name,
                "created_s": round(record.create_timestamp.timestamp() - since, 2),
                "started_s": round((record.start_time or since) - since, 2),
                "ended_s": round(record.end_time - since, 2),
            }
            steps: dict[str, list[float]] = {}
            for e in instance.all_logs(run.run_id, of_type=step_events):
                steps.setdefault(e.step_key, []).append(e.timestamp)
            if steps:  # each step's seconds from its start to its end
                entry["steps_s"] = {k: round(max(t) - min(t), 2) for k, t in steps.items()}
            checks = {}
            for e in instance.all_logs(
                run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
            ):
                data = e.dagster_event.event_specific_data
                seconds = data.metadata.get("seconds")
                if seconds is not None:
                    checks[data.check_name] = seconds.value
            if checks:
                entry["checks_s"] = checks
            out["runs"].append(entry)
    return out


# steps split in two at a time their materialization reports: (metadata, first part, second
# part); corpus: the fold, then its four checks (each timed, ``checks_s``), then a cheap
# digest, commit and view refresh; graph: the arrays' build, then its two checks
SPLITS = {
    "corpus": ("seconds", "corpus_fold", "corpus_checks"),
    "graph": ("build_seconds", "graph_build", "graph_checks"),
}


def _split(step: str, start: float, end: float, metadata: dict, checks_s: float) -> list:
    """``(phase, start, end)`` of a step, in two where ``SPLITS`` names it: the corpus fold
    ends its checks' seconds before the step's own ``seconds`` (from its start) do, the
    graph's build ``build_seconds`` after the step's start (both to within the step's
    sub-second set-up)."""
    if step not in SPLITS or SPLITS[step][0] not in metadata:
        return [(step, start, end)]
    key, first, second = SPLITS[step]
    seconds = metadata[key] - (checks_s if step == "corpus" else 0.0)
    at = min(end, max(start, start + seconds))
    return [(first, start, at), (second, at, end)]


def step_windows(dagster_home: str, since: float, tree: ProcessTree) -> list[dict]:
    """Each step of the runs created after ``since``: its phase (the step key, or a part of
    it: ``SPLITS``), its window (STEP_START to its end, epoch seconds) and its run's worker
    process (the key in ``tree``; the worker's pid from the instance's "Started process for
    run" event)."""
    import dagster as dg

    from kg_platform.orchestration.recovery import run_worker

    step_events = {
        dg.DagsterEventType.STEP_START,
        dg.DagsterEventType.STEP_SUCCESS,
        dg.DagsterEventType.STEP_FAILURE,
    }
    windows = []
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        for record in instance.get_run_records():
            if record.create_timestamp.timestamp() < since or not record.end_time:
                continue
            run_id = record.dagster_run.run_id
            worker = run_worker(instance, run_id)
            key = None if worker is None else tree.process_of(*worker)
            steps: dict[str, list[float]] = {}
            for e in instance.all_logs(run_id, of_type=step_events):
                steps.setdefault(e.step_key, []).append(e.timestamp)
            metadata: dict[str, dict] = {}
            checks_s: dict[str, float] = {}
            for e in instance.all_logs(
                run_id,
                of_type={
                    dg.DagsterEventType.ASSET_MATERIALIZATION,
                    dg.DagsterEventType.ASSET_CHECK_EVALUATION,
                },
            ):
                data = e.dagster_event.event_specific_data
                if e.dagster_event.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION:
                    values = data.materialization.metadata
                    metadata[e.step_key] = {k: getattr(v, "value", v) for k, v in values.items()}
                elif (seconds := data.metadata.get("seconds")) is not None:
                    checks_s[e.step_key] = checks_s.get(e.step_key, 0.0) + seconds.value
            for step, times in steps.items():
                for phase, start, end in _split(
                    step, min(times), max(times), metadata.get(step, {}), checks_s.get(step, 0.0)
                ):
                    windows.append({"phase": phase, "worker": key, "start": start, "end": end})
    return windows


# -- the commands -----------------------------------------------------------------------------
def kg(*args: str) -> list[str]:
    return [os.path.join(BIN, "kg"), *args]


def build(
    env: dict,
    log: Path,
    source: str,
    lake: str,
    select: str,
    jobs: int,
    *extra,
    cores: int | None = None,
    records: int | None = None,
    cwd: str = REPO,
) -> dict:
    """``kg build`` measured (in ``cwd``: see :func:`measured`); with ``cores``, pinned to that many. ``phases``: per step key
    (and ``outside_steps``) its steps, seconds, CPU and peak RSS (``_phases.attribute``),
    and with ``records`` its CPU seconds per million records."""
    from build import _mesh_source

    since = time.time()
    command = kg(
        "build",
        "--pubmed-source",
        source,
        "--mesh-source",
        _mesh_source(),
        "--lake",
        lake,
        "--select",
        select,
        "--jobs",
        str(jobs),
        *extra,
    )
    trees: list[ProcessTree] = []
    got = measured(command, env, log, cores=cores, tree=trees, cwd=cwd)
    home = env["DAGSTER_HOME"]
    windows = step_windows(home, since, trees[0])
    steps = _phases.attribute(windows, trees[0].processes())
    phases = _phases.with_outside(steps, windows, got["wall_s"], got["cpu_s_tree"])
    if records:
        for name, per in _phases.per_million(phases, records).items():
            phases[name]["cpu_s_per_million"] = per
        got["cpu_s_per_million"] = round(got["cpu_s_tree"] * 1e6 / records, 2)
    return {
        **got,
        "cores_pinned": cores,
        "phases": phases,
        "runs_by_asset": runs_by_asset(home, since),
        "timeline": timeline(home, since),
        "disk": disk(lake, home),
        "instance": instance_counts(home),
    }


def ask(env: dict, lake: str, runs: int, n_questions: int) -> dict:
    from kg_platform.answer.api import KnowledgeGraph
    from kg_platform.answer.examples import graph_questions
    from kg_platform.commands.partition_args import scoped_lake

    os.environ.update({k: env[k] for k in ("KG_HOME", "DAGSTER_HOME")})
    scoped, partition = scoped_lake(
        argparse.Namespace(lake=lake, release=None, mesh_year=None), quiet=True
    )
    t = time.perf_counter()
    graph = KnowledgeGraph.open(scoped)
    open_s = time.perf_counter() - t
    questions = [q.text for q in graph_questions(graph, n_questions).questions] + [REFUSED]
    cold = [ask_cold(lake, q) for _ in range(runs) for q in questions]
    for q in questions:  # one untimed round
        graph.ask(q)
    warm = []
    for q in questions:
        t = time.perf_counter()
        graph.ask(q)
        warm.append((time.perf_counter() - t) * 1000)
    return {
        "partition": partition,
        "graph_build": graph.store.build_id,
        "articles": graph.store.n_articles,
        "questions": len(questions),
        "answered": sum(bool(r["doc"]["verdict"]["answerable"]) for r in cold[: len(questions)]),
        "cold_wall_s_median": round(statistics.median(r["wall_s"] for r in cold), 3),
        "cold_cpu_s_median": round(statistics.median(r["cpu_s"] for r in cold), 3),
        "cold_peak_rss_mib_median": round(statistics.median(r["peak_rss_mb"] for r in cold), 1),
        "cold_peak_rss_mib_max": round(max(r["peak_rss_mb"] for r in cold), 1),
        "warm_open_s": round(open_s, 3),
        "warm_ask_ms_median": round(statistics.median(warm), 2),
        "question": questions[0],
        "load_after": _load(),
    }


def status(env: dict, lake: str, log: Path) -> dict:
    return measured(kg("status", "--lake", lake), env, log)


# -- the UI -----------------------------------------------------------------------------------
def ui(env: dict, work: Path, files: list[str]) -> dict:
    """The webserver over the instance, then Chromium on two pages: seconds from the
    navigation's start until each is rendered (the partitions page shows the release's last
    file, the asset graph shows pubmed_tables' node)."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    from kg_platform_tests.support.platform import Platform, free_port, wait_for_code_location

    if not os.path.exists(CHROMIUM):
        return {"skipped": f"{CHROMIUM} is missing"}
    port = free_port()
    logs = work / "ui-logs"
    logs.mkdir(exist_ok=True)
    log = open(logs / "webserver.log", "wb")  # noqa: SIM115 - closed with the process
    server = subprocess.Popen(
        [os.path.join(BIN, "dagster-webserver"), "-h", "127.0.0.1", "-p", str(port)]
        + ["-w", "workspace.yaml"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    tree = ProcessTree(server.pid)
    platform = Platform(f"http://127.0.0.1:{port}", env, work, work, logs)
    result: dict = {}
    try:
        t = time.perf_counter()
        wait_for_code_location(platform, [server])
        result["code_location_loaded_s"] = round(time.perf_counter() - t, 1)
        # the browser and Playwright's driver are this process's children, not the server's
        own = ProcessTree(os.getpid())
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            pages = {
                "partitions_page_s": (
                    f"{platform.url}/assets/pubmed_tables?view=partitions",
                    page.get_by_text(f"Materialized ({len(files)})", exact=True).first,
                ),
                "asset_graph_s": (
                    f"{platform.url}/locations/kg_platform/asset-groups/pubmed",
                    page.get_by_text("pubmed_tables", exact=True).first,
                ),
            }
            for name, (url, rendered) in pages.items():
                t = time.perf_counter()
                try:
                    page.goto(url)
                    rendered.wait_for(timeout=UI_WAIT_MS)
                    result[name] = round(time.perf_counter() - t, 2)
                except PlaywrightError as exc:
                    result[name] = None
                    result[f"{name.removesuffix('_s')}_failed"] = str(exc).splitlines()[0]
                page.screenshot(path=str(work / f"{name.removesuffix('_s')}.png"))
            browser.close()
        result["browser_processes"] = {
            role: got for role, got in own.stop().items() if role in ("browser", "node")
        }
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
        log.close()
        result["processes"] = tree.stop()
    return {**result, "load_after": _load()}


# -- the run ----------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, help="baseline files")
    parser.add_argument("--records-per-file", type=int, default=30_000)
    parser.add_argument("--work", help="cache of the files, and the homes")
    parser.add_argument(
        "--cores",
        type=int,
        nargs="+",
        help="build once per count, pinned to that many cores (e.g. 1 2): each phase's "
        "speedup on 2 against 1; the build with the most is the one measured further",
    )
    parser.add_argument(
        "--project",
        nargs="+",
        metavar="JSON",
        help="no build: project two earlier runs' results (files whose last line is this "
        "script's JSON) to --target-records on --target-cores",
    )
    parser.add_argument(
        "--basis",
        choices=["span", "cpu"],
        default="span",
        help="--project's one-core seconds: the phases' spans on one core (where every "
        "result has them) or their CPU seconds (on a loaded machine, the steadier)",
    )
    parser.add_argument("--target-records", type=int, default=40_000_000)
    parser.add_argument("--target-cores", type=int, nargs="+", default=[2, 26])
    parser.add_argument("--jobs", type=int, default=2, help="kg build --jobs")
    parser.add_argument("--select", default=SELECT, help="kg build --select")
    parser.add_argument("--runs", type=int, default=3, help="cold kg ask runs per question")
    parser.add_argument("--questions", type=int, default=2, help="answered questions asked")
    parser.add_argument("--no-ui", action="store_true", help="skip the browser phase")
    parser.add_argument("--update", action="store_true", help="the update and full phases")
    parser.add_argument("--update-records", type=int, default=30_000)
    parser.add_argument("--update-deleted", type=int, default=500)
    parser.add_argument(
        "--reuse-build",
        action="store_true",
        help="start from the copy of the built home and lake an earlier run kept (its build "
        "phase is not measured again; status and the UI are skipped): for measuring the "
        "update again",
    )
    parser.add_argument(
        "--refold-kept",
        action="store_true",
        help="with --reuse-build: first refold the kept state's release with this code (kg "
        "build --select of the full phase, --force, on the baseline) and keep that as the "
        "built state: a state built by code of an earlier corpus layout becomes one of this",
    )
    args = parser.parse_args()
    if args.project:
        results = [_last_json(path) for path in args.project]
        points, basis = _phases.points_from(results, cpu=args.basis == "cpu")
        got = _phases.project(points, args.target_records, args.target_cores)
        print(json.dumps({"benchmark": "rehearsal_projection", "basis": basis, **got}))
        return 0
    if args.files is None or args.work is None:
        parser.error("--files and --work are needed (or --project)")
    available = len(os.sched_getaffinity(0))
    if args.cores and max(args.cores) > available:
        parser.error(f"--cores {max(args.cores)}: this process may run on {available} only")

    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    result: dict = {
        "benchmark": "rehearsal",
        "files": args.files,
        "records_per_file": args.records_per_file,
        "records": args.files * args.records_per_file,
        "select": args.select,
        "jobs": args.jobs,
        "cores": os.cpu_count(),
        "load_before": _load(),
    }

    def phase(name: str, got: dict) -> None:
        result[name] = got
        print(json.dumps({"phase": name, **got}), flush=True)

    t = time.perf_counter()
    source, generated_s = baseline(str(work), args.files, args.records_per_file)
    phase("generate", {"source": source, "seconds": generated_s, "reused": generated_s is None})
    names = sorted(p.name.removesuffix(".xml.gz") for p in Path(source, "baseline").glob("*.gz"))

    run = work / f"run-{args.files}x{args.records_per_file}"
    kept = work / f"built-{args.files}x{args.records_per_file}"
    if args.reuse_build and not kept.is_dir():
        raise SystemExit(f"--reuse-build: {kept} is missing; run once without it")
    shutil.rmtree(run, ignore_errors=True)
    if args.reuse_build:
        shutil.copytree(kept, run, symlinks=True)
    else:
        run.mkdir()
    lake = str(run / "lake")
    env = {
        **os.environ,
        "KG_HOME": str(run / "kg"),
        "DAGSTER_HOME": str(run / "kg" / "dagster"),
        "PYTHONPATH": REPO,
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("KG_EXECUTOR", None)
    env.pop(FULL_FOLD_ENV, None)
    log = run / "commands.log"
    if args.reuse_build and args.refold_kept:
        phase("refold_kept", build(env, log, source, lake, REFOLD, args.jobs, "--force"))
        shutil.rmtree(kept)
        shutil.copytree(run, kept, symlinks=True)
    if args.reuse_build:
        phase("build", {"reused": str(kept)})
    else:
        records = args.files * args.records_per_file
        phase("parse", parse_reference(source))
        builds: dict[str, dict] = {}
        counts = args.cores or [None]
        main_count = max(counts, key=lambda n: available if n is None else n)
        for n in counts:
            label = str(available if n is None else n)
            if n == main_count:
                got = build(
                    env, log, source, lake, args.select, args.jobs, cores=n, **{"records": records}
                )
                phase("build", got)
            else:  # a side build, in its own home and lake, removed once measured
                side = work / f"run-{args.files}x{args.records_per_file}-cores{n}"
                shutil.rmtree(side, ignore_errors=True)
                side.mkdir()
                side_env = {
                    **env,
                    "KG_HOME": str(side / "kg"),
                    "DAGSTER_HOME": str(side / "kg" / "dagster"),
                }
                got = build(
                    side_env,
                    side / "commands.log",
                    source,
                    str(side / "lake"),
                    args.select,
                    args.jobs,
                    cores=n,
                    records=records,
                )
                shutil.rmtree(side)
            builds[label] = got
            print(json.dumps({"phase": f"build_on_{label}_cores", **_compact(got)}), flush=True)
        result["builds_by_cores"] = {k: _compact(v) for k, v in builds.items()}
        result["phases"] = _phases.table({k: v["phases"] for k, v in builds.items()}, records)
        walls = {k: v["wall_s"] for k, v in builds.items()}
        if "1" in walls and "2" in walls:
            result["build_speedup_2"] = round(walls["1"] / walls["2"], 3)
        largest = builds[str(available if main_count is None else main_count)]
        parse_per = result["parse"]["cpu_s_per_million"]
        result["cpu_s_per_million"] = {
            "build": largest["cpu_s_per_million"],
            "parse": parse_per,
            "build_over_parse": round(largest["cpu_s_per_million"] / parse_per, 2),
            "phases": {name: p["cpu_s_per_million"] for name, p in largest["phases"].items()},
        }
        if args.update:  # the built state, for measuring the update again (--reuse-build)
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(run, kept, symlinks=True)
    phase("ask", ask(env, lake, args.runs, args.questions))
    if not args.reuse_build:
        phase("status", status(env, lake, log))
    if not args.no_ui and not args.reuse_build:
        try:
            phase("ui", ui(env, run, names))
        except Exception as exc:  # noqa: BLE001 - a phase that cannot run is reported
            phase("ui", {"failed": f"{type(exc).__name__}: {str(exc)[:400]}"})
    if args.update:
        updated = str(work / f"source-update-{args.files}x{args.records_per_file}")
        path = write_update(source, updated, args.update_records, args.update_deleted)
        before = result["ask"]["graph_build"]
        question = result["ask"]["question"]
        got = build(env, log, updated, lake, args.select, args.jobs)
        asked = ask_cold(lake, question)
        got.update(_queryable(got, asked, before, lake, path.name))
        phase("update", got)
        full_env = {**env, FULL_FOLD_ENV: "1"}
        got = build(full_env, log, updated, lake, REFOLD, args.jobs, "--force")
        asked = ask_cold(lake, question)
        got.update(_queryable(got, asked, result["update"]["graph_build"], lake, path.name))
        phase("full", got)
        result["update_over_full"] = round(
            result["update"]["to_queryable_s"] / result["full"]["to_queryable_s"], 3
        )
    result["seconds"] = round(time.perf_counter() - t, 1)
    result["load_after"] = _load()
    print(json.dumps(result))
    return 0


def _compact(got: dict) -> dict:
    """A build's figures without its timeline and output (the phase table's inputs)."""
    keys = ("cores_pinned", "wall_s", "cpu_s_tree", "cpu_s_per_million", "phases", "load_after")
    roles = {r: v["peak_rss_mib"] for r, v in got["processes"].items()}
    return {**{k: got.get(k) for k in keys}, "peak_rss_mib_by_role": roles}


def parse_reference(source: str, rounds: int = 2) -> dict:
    """The parse's own CPU per record: benchmarks/parse.py's child (the installed parser,
    its imports loaded outside the clock) on the release's first baseline file, the best
    CPU of ``rounds``."""
    from parse import OURS, run_child

    path = sorted(Path(source, "baseline").glob("*.xml.gz"))[0]
    runs = [run_child(OURS, path, "compiled") for _ in range(rounds)]
    best = min(runs, key=lambda r: r["cpu_s"])
    return {
        "file": path.name,
        "records": best["records"],
        "cpu_s": round(best["cpu_s"], 3),
        "wall_s": round(best["wall_s"], 3),
        "cpu_s_per_million": round(best["cpu_s"] * 1e6 / best["records"], 2),
        "records_per_s_per_core": round(best["records"] / best["cpu_s"]),
        "peak_rss_mib": round(max(r["peak_rss_mb"] for r in runs), 1),
        "load_after": _load(),
    }


def _last_json(path: str) -> dict:
    """The last line of ``path`` that is one JSON object with a phase table."""
    for line in reversed(Path(path).read_text().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            got = json.loads(line)
            if "phases" in got:
                return got
    raise SystemExit(f"{path}: no rehearsal result with phases (a JSON line) in it")


def _queryable(build_got: dict, asked: dict, before: str, lake: str, update_file: str) -> dict:
    """The update's figures: seconds from build start to an answer, and that the answer came
    from a new graph build, and how the corpus was folded (corpus/fold/manifest.json)."""
    manifests = list(Path(lake, "corpus").glob("*/fold/manifest.json"))
    manifest = json.loads(manifests[0].read_text()) if manifests else {}
    build_id = asked["doc"]["graph_build"]
    return {
        "update_file": update_file,
        "ask_wall_s": round(asked["wall_s"], 2),
        "ask_peak_rss_mib": round(asked["peak_rss_mb"], 1),
        "to_queryable_s": round(build_got["wall_s"] + asked["wall_s"], 1),
        "graph_build": build_id,
        "new_graph_build": build_id != before,
        "fold": {k: manifest.get(k) for k in ("mode", "reason", "new_files", "touched_pmids")},
        "corpus_rows": manifest.get("rows"),
    }


if __name__ == "__main__":
    sys.exit(main())
