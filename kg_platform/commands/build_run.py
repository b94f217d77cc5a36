"""`kg build`'s runs: one asset backfill submitted to the persistent instance, planned and run
by Dagster (the backfill daemon orders the partitions, the run queue holds the concurrency
limit, the run launcher starts each run in its own process with the definitions' executor,
pools hold across runs). The runs are the ones the UI shows.

When no daemon serves the instance (`make ui` is not up), the CLI hosts Dagster's own
backfill and run-queue iterations for as long as the build lasts, on a short tick; with a
daemon up it submits and waits, saying so, and takes the loops over when the daemon stops
beating (`make ui` stopped while the build waits)."""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}
BUILD_TAG = "kg/build"
# the progress lines are the user's view; Dagster's event log stays in the instance (and UI)
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass
class RunOutcome:
    run_id: str
    assets: list[str]
    partition: str | None
    status: str
    seconds: float
    checks_passed: int
    checks_failed: int
    failure: str | None = None  # the one-line cause
    traceback: str | None = None
    # a run over file partitions: the files it recorded, and each failed file's cause
    files_recorded: list[str] = field(default_factory=list)
    files_failed: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        where = f" [{self.partition}]" if self.partition else ""
        return "+".join(self.assets) + where

    def label_of(self, file: str) -> str:
        """The label of one file of the run, as if it had been a run of its own."""
        return "+".join(self.assets) + f" [{file}]"


@dataclass
class BuildResult:
    backfill_id: str
    status: str
    runs: list[RunOutcome] = field(default_factory=list)
    backfill: object = None  # Dagster's PartitionBackfill, as it ended


def workspace(instance, log_path: Path, env: dict[str, str] | None = None):
    """Dagster's workspace for this code location: a code server the runs launch from. The
    server and the run and step processes it starts write their output to ``log_path`` (the
    run's events are in the instance, as the UI shows them) and see ``env`` on top of this
    process's environment (which is left as it was)."""
    from kg_platform.orchestration.dagster_internals import ModuleTarget, WorkspaceProcessContext

    target = ModuleTarget(
        module_name="kg_platform.definitions",
        attribute=None,
        working_directory=None,
        location_name="kg_platform",
    )
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    before = {k: os.environ.get(k) for k in env or {}}
    with log_path.open("ab") as log:
        # the code server inherits these descriptors and variables when it starts, and its
        # children from it
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        os.environ.update(env or {})
        try:
            return WorkspaceProcessContext(instance, target, code_server_log_level="WARNING")
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            for key, value in before.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


# the daemons that run an asset backfill: the backfill planner and the run queue
DAEMON_TYPES = ("BACKFILL", "QUEUED_RUN_COORDINATOR")
# a live dagster-daemon writes each heartbeat every 30 s (Dagster's
# DEFAULT_HEARTBEAT_INTERVAL_SECONDS); one silent for three intervals is gone. Dagster's own
# health check tolerates 1,800 s more, so a stopped `make ui` would look alive for 30 minutes
HEARTBEAT_S = 30
LIVE_S = 3 * HEARTBEAT_S
DAGSTER_TOLERANCE_S = 1800 + HEARTBEAT_S


def heartbeat_age(instance, now: float | None = None) -> float | None:
    """Seconds since the daemon that runs backfills last beat (the older of its backfill and
    run-queue heartbeats), or None when either never beat on this instance."""
    beats = instance.get_daemon_heartbeats()
    if not all(t in beats for t in DAEMON_TYPES):
        return None
    now = time.time() if now is None else now
    return max(now - beats[t].timestamp for t in DAEMON_TYPES)


def daemon_serves(instance, now: float | None = None) -> bool:
    """True while a live dagster-daemon (e.g. `make ui`) runs backfills and the run queue:
    both beat within LIVE_S (errors or not: a daemon that reports errors still runs)."""
    age = heartbeat_age(instance, now)
    return age is not None and age <= LIVE_S


def run_config_for(executor: str) -> dict:
    """The backfill's run config: quiet console logs, and each run's steps inside the run's
    process (one run per partition: the run queue gives the parallelism). Celery runs keep
    the Celery executor's own config."""
    if executor == "celery":
        return QUIET
    return {**QUIET, "execution": {"config": {"in_process": {}}}}


def submit_backfill(
    instance, asset_graph, partitions: set, title: str, tags: dict, run_config: dict | None = None
) -> str:
    from kg_platform.orchestration.dagster_internals import (
        AssetGraphSubset,
        PartitionBackfill,
        make_new_backfill_id,
    )

    subset = AssetGraphSubset.from_asset_partition_set(partitions, asset_graph)
    backfill = PartitionBackfill.from_asset_graph_subset(
        backfill_id=make_new_backfill_id(),
        backfill_timestamp=time.time(),
        tags=tags,
        dynamic_partitions_store=instance,
        asset_graph_subset=subset,
        title=title,
        description=None,
        run_config=run_config if run_config is not None else QUIET,
    )
    instance.add_backfill(backfill)
    return backfill.backfill_id


def run_outcome(instance, record) -> RunOutcome:
    import dagster as dg

    run = record.dagster_run
    evaluations = [
        r.event_log_entry.dagster_event.event_specific_data
        for r in instance.get_records_for_run(
            run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
        ).records
    ]
    passed = sum(e.passed for e in evaluations)
    start = record.start_time or record.create_timestamp.timestamp()
    end = record.end_time or start
    assets = sorted(k.to_user_string() for k in run.asset_selection or ())
    outcome = RunOutcome(
        run_id=run.run_id,
        assets=assets,
        partition=partition_label(run.tags),
        status=run.status.value,
        seconds=end - start,
        checks_passed=passed,
        checks_failed=len(evaluations) - passed,
    )
    if FILE_ASSETS & set(assets):
        outcome.files_recorded = files_recorded(instance, run.run_id, FILE_ASSETS & set(assets))
    if run.status.value != "SUCCESS":
        outcome.failure, outcome.traceback = run_failure(instance, run.run_id)
        if FILE_ASSETS & set(assets):
            outcome.files_failed = files_failed(instance, run, outcome)
    return outcome


# the assets partitioned by file that one step materialises for a range of files
FILE_ASSETS = {"pubmed_xml", "pubmed_tables"}
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


def partition_label(tags) -> str | None:
    """``pubmed26n0001``, or ``pubmed26n0001..pubmed26n0016`` for a run over a range."""
    if "dagster/partition" in tags:
        return tags["dagster/partition"]
    start, end = tags.get(RANGE_START), tags.get(RANGE_END)
    if start is None:
        return None
    return start if start == end else f"{start}..{end}"


def files_recorded(instance, run_id: str, assets: set[str]) -> list[str]:
    """The files a run recorded: partitions materialised for every file asset it ran."""
    import dagster as dg

    by_asset: dict[str, set[str]] = {a: set() for a in assets}
    for r in instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION, limit=100_000
    ).records:
        event = r.event_log_entry.dagster_event
        name = event.asset_key.to_user_string()
        if name in by_asset and event.partition:
            by_asset[name].add(event.partition)
    return sorted(set.intersection(*by_asset.values())) if by_asset else []


def files_failed(instance, run, outcome: RunOutcome) -> dict[str, str]:
    """Each file of a failed run that it did not record, with its cause: the step's own
    per-file causes when it named them, else the run's failure."""
    import dagster as dg

    named: dict[str, str] = {}
    for r in instance.get_records_for_run(
        run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE
    ).records:
        data = r.event_log_entry.dagster_event.event_specific_data
        failure = getattr(data, "user_failure_data", None)
        value = (failure.metadata or {}).get("failed_files") if failure else None
        if value is not None:
            named.update(value.value)
    recorded = set(outcome.files_recorded)
    return {
        f: named.get(f, outcome.failure or "failed")
        for f in files_in_range(instance, run.tags)
        if f not in recorded
    }


def files_in_range(instance, tags) -> list[str]:
    """The file partitions a run was asked for, in partition order."""
    if "dagster/partition" in tags:
        return [tags["dagster/partition"]]
    start, end = tags.get(RANGE_START), tags.get(RANGE_END)
    if start is None:
        return []
    from kg_platform.assets.partitions import pubmed_files

    keys = instance.get_dynamic_partitions(pubmed_files.name)
    if start not in keys or end not in keys:
        return [start] if start == end else [start, end]
    return keys[keys.index(start) : keys.index(end) + 1]


def innermost(error):
    """The first error under Dagster's wrappers: the domain error, which names the input."""
    while error.cause is not None and (error.cls_name or "").startswith("Dagster"):
        error = error.cause
    return error


# "package.module.SomeError: " or a builtin's "ValueError: " before a recorded message
CLASS_PREFIX = re.compile(r"^(?:(?:[A-Za-z_]\w*\.)+[A-Z]\w*|[A-Z]\w*(?:Error|Exception)): ")
STEP_PREFIX = re.compile(r"^\[([^\]]+)\]: ")


def one_line(error) -> str:
    lines = [x.strip() for x in (error.message or "").strip().splitlines() if x.strip()]
    if not lines:
        return "failed"
    # drop the 'package.module.ErrorClass: ' that Dagster puts before the message
    prefix, _, rest = lines[0].partition(": ")
    line = rest if rest and prefix.endswith(error.cls_name or "\0") else lines[0]
    step = STEP_PREFIX.match(lines[1]) if len(lines) > 1 and line.endswith(":") else None
    if step:
        # a header over per-step errors (dagster-celery's "errors occurred in workers:\n
        # [step]: package.Error: cause"): the first step's own cause is the line to show
        cause = CLASS_PREFIX.sub("", lines[1][step.end() :], count=1)
        return cause if cause.startswith(f"step {step.group(1)}") else f"{step.group(1)}: {cause}"
    return line


def run_failure(instance, run_id: str) -> tuple[str, str]:
    """(one line: the step and the cause, the full error chain) of a failed run."""
    import dagster as dg

    for kind in (dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE):
        for record in instance.get_records_for_run(run_id, of_type=kind).records:
            event = record.event_log_entry.dagster_event
            data = event.event_specific_data
            error = getattr(data, "error", None)
            if error is None:
                continue
            return one_line(innermost(error)), error.to_string()
    cause = worker_death(instance, run_id)
    return cause or "run failed (see the run in the UI)", cause or ""


# the code server's engine event when a run's process ends before the run does (Dagster's
# get_run_crash_explanation: "... was terminated by signal 9 (SIGKILL)." or "...
# unexpectedly exited with code 3.")
CRASH_PREFIX = "Run execution process for "


def worker_death(instance, run_id: str) -> str | None:
    """Why a run failed with no error of its own: its process died. The signal or exit code
    (the code server's crash event, else the run's failure message, e.g. recovery's
    "process gone"), its worker's pid and the last event the run logged; None when neither
    event says more."""
    from kg_platform.orchestration.recovery import run_worker

    records = instance.get_records_for_run(run_id, ascending=False, limit=500).records
    crash = failure = last = None
    for record in records:
        entry = record.event_log_entry
        event = entry.dagster_event
        message = " ".join((entry.message or "").split())
        kind = event.event_type_value if event is not None else "LOG"
        at = message.find(f"{CRASH_PREFIX}{run_id} ")  # after the server's "[name] "
        if crash is None and at >= 0:
            crash = message[at + len(f"{CRASH_PREFIX}{run_id} ") :].split(". ")[0].rstrip(".")
        elif failure is None and kind == "PIPELINE_FAILURE" and message:
            failure = message
        elif last is None and message and kind not in IGNORED_EVENTS:
            last = message
    if crash is None and (failure is None or failure.startswith("This run has been marked")):
        return None
    worker = run_worker(instance, run_id)
    who = f"run worker (pid {worker[0]})" if worker else "run worker"
    cause = f"{who} {crash}" if crash is not None else failure
    return f"{cause}; its last event: {last}" if last else cause


# what says nothing of where a run was: the run's own bookkeeping
IGNORED_EVENTS = {
    "ENGINE_EVENT",
    "LOGS_CAPTURED",
    "PIPELINE_FAILURE",
    "PIPELINE_START",
    "PIPELINE_STARTING",
    "PIPELINE_ENQUEUED",
    "PIPELINE_DEQUEUED",
    "PIPELINE_CANCELED",
    "PIPELINE_CANCELING",
    "RUN_FAILURE",
}


def backfill_runs(instance, backfill_id: str) -> list:
    import dagster as dg

    records = instance.get_run_records(dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
    return sorted(records, key=lambda r: r.create_timestamp)


class Watched:
    """What a backfill waits on, read in a few queries: its status, its runs' statuses and the
    materialisations its unfinished runs have recorded (a run's step can finish what the next
    run needs before the run itself ends: the corpus step, before corpus_profile), with the
    file partitions each run has recorded so far (for the progress lines)."""

    def __init__(self, instance, backfill_id: str) -> None:
        self.instance, self.backfill_id = instance, backfill_id
        self.materialised: dict[str, tuple[str | None, int]] = {}  # run -> (cursor, count)
        # run -> file asset -> the file partitions it recorded so far
        self.file_partitions: dict[str, dict[str, set[str]]] = {}

    def materialisations(self, run_id: str) -> int:
        import dagster as dg

        cursor, count = self.materialised.get(run_id, (None, 0))
        found = self.instance.get_records_for_run(
            run_id, cursor=cursor, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
        )
        if found.records:
            cursor, count = found.cursor, count + len(found.records)
            recorded = self.file_partitions.setdefault(run_id, {})
            for r in found.records:
                event = r.event_log_entry.dagster_event
                name = event.asset_key.to_user_string()
                if name in FILE_ASSETS and event.partition:
                    recorded.setdefault(name, set()).add(event.partition)
        self.materialised[run_id] = (cursor, count)
        return count

    def files_recorded(self, run) -> set[str]:
        """The files an unfinished run has recorded so far: materialised for every file asset
        it runs."""
        assets = FILE_ASSETS & {k.to_user_string() for k in run.asset_selection or ()}
        recorded = self.file_partitions.get(run.run_id, {})
        if not assets or not all(a in recorded for a in assets):
            return set()
        return set.intersection(*(recorded[a] for a in assets))

    def read(self) -> tuple:
        """(the backfill, its run records, a value that changes whenever any of the three does)."""
        backfill = self.instance.get_backfill(self.backfill_id)
        records = backfill_runs(self.instance, self.backfill_id)
        runs = tuple(
            (
                r.dagster_run.run_id,
                r.dagster_run.status.value,
                0
                if r.dagster_run.status.value in TERMINAL
                else self.materialisations(r.dagster_run.run_id),
            )
            for r in records
        )
        return backfill, records, (backfill.status, runs)


class Reporter:
    """What a build prints while it waits, beside each finished run (``on_run``): each run as
    it starts, each file as a run records it, who drives the backfill (this process or a
    daemon) and, after ``quiet_s`` without a line, what it still waits for: a thread says
    it, so a long Dagster iteration (the first one starts the code server) is not silent."""

    def __init__(self, say: Callable[[str], None] = print, quiet_s: float = 10.0) -> None:
        self.say_line, self.quiet_s = say, quiet_s
        self.last = time.monotonic()
        self.doing = ""  # what the build waits on now, for the quiet line
        self.stopped = threading.Event()
        self.ticker: threading.Thread | None = None

    def say(self, line: str) -> None:
        self.say_line(line)
        self.last = time.monotonic()

    def on_started(self, label: str) -> None:
        self.say(f"  started: {label}")

    def on_files(self, files: list[str]) -> None:
        self.say(f"  recorded: {', '.join(files)}")

    def __enter__(self) -> Reporter:
        started = time.monotonic()

        def tick() -> None:
            while not self.stopped.wait(1.0):
                if self.doing and time.monotonic() - self.last >= self.quiet_s:
                    self.say(f"  waiting ({time.monotonic() - started:.0f}s): {self.doing}")

        self.ticker = threading.Thread(target=tick, name="kg-build-progress", daemon=True)
        self.ticker.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        if self.ticker is not None:
            self.ticker.join()


def waiting_on(records, driver: str) -> str:
    """The runs running and queued, and who drives the backfill."""
    running = [r.dagster_run for r in records if r.dagster_run.status.value in ACTIVE]
    queued = sum(r.dagster_run.status.value in QUEUED for r in records)
    if running:
        what = f"running {', '.join(run_label(r) for r in running[:3])}"
        what += f" (+{len(running) - 3})" if len(running) > 3 else ""
    elif queued:
        what = "runs queued"
    elif driver == DAEMON_DRIVES:
        what = "the daemon's next look at the backfill (every 30 s): it launches the runs the "
        what += "finished ones unblocked, or ends the backfill"
    else:
        what = "the backfill to launch its next runs"
    return f"{what}; {queued} queued; {driver}"


ACTIVE = {"STARTING", "STARTED"}
QUEUED = {"QUEUED", "NOT_STARTED"}


def run_label(run) -> str:
    assets = sorted(k.to_user_string() for k in run.asset_selection or ())
    where = partition_label(run.tags)
    return "+".join(assets) + (f" [{where}]" if where else "")


def wait_for_backfill(
    instance,
    process_context,
    backfill_id: str,
    on_run: Callable[[RunOutcome], None],
    tick_s: float = 0.5,
    idle_s: float = 10.0,
    reporter: Reporter | None = None,
) -> BuildResult:
    """Drive (or, while a daemon serves the instance, watch) the backfill until it ends;
    ``on_run`` gets each run as it finishes, ``reporter`` what happens before. Who drives is
    judged again every tick from the daemon's heartbeats: a daemon that stops beating (the
    UI stopped) is taken over, one that starts is left to drive. Watching is a few queries a
    tick; Dagster's backfill and run-queue iterations (each reads and rewrites the backfill:
    ~0.15 s CPU at 10M records, most of what this process spent while the runs ran) are
    driven when what the backfill waits on changed (Watched), while an iteration still
    changes it, and at least every ``idle_s``."""
    reporter = reporter or Reporter(say=lambda line: None)
    with reporter:
        return drive(instance, process_context, backfill_id, on_run, tick_s, idle_s, reporter)


def drive(instance, process_context, backfill_id, on_run, tick_s, idle_s, reporter) -> BuildResult:
    """wait_for_backfill's loop, with ``reporter``'s quiet-line thread running."""
    from kg_platform.orchestration.dagster_internals import (
        BulkActionStatus,
        QueuedRunCoordinatorDaemon,
        execute_backfill_iteration,
    )

    logger = logging.getLogger("kg.build")
    logger.setLevel(logging.WARNING)
    queue = QueuedRunCoordinatorDaemon(interval_seconds=1)
    watched = Watched(instance, backfill_id)
    seen: dict[str, RunOutcome] = {}
    started: set[str] = set()
    files_said: set[str] = set()
    result = BuildResult(backfill_id, "REQUESTED")
    driven_at, driven_on = float("-inf"), None
    host: bool | None = None
    while True:
        age = heartbeat_age(instance)
        serves = age is not None and age <= LIVE_S
        if host is None or host == serves:
            say_driver(reporter, backfill_id, age, serves, first=host is None)
            host, driven_on = not serves, None
        backfill, records, state = watched.read()
        if host and (state != driven_on or time.monotonic() - driven_at >= idle_s):
            # the state before this iteration: if the iteration changes it, drive again
            driven_at, driven_on = time.monotonic(), state
            if not records:
                reporter.doing = (
                    "Dagster plans the backfill and launches its first runs (the code server "
                    "loads the definitions first)"
                )
            for _ in execute_backfill_iteration(process_context, logger):
                pass
            for _ in queue.run_iteration(process_context):
                pass
            backfill, records, _ = watched.read()
        for record in records:
            run = record.dagster_run
            status = run.status.value
            if run.run_id not in started and (status in ACTIVE or status in TERMINAL):
                started.add(run.run_id)
                reporter.on_started(run_label(run))
            if status not in TERMINAL:
                new = sorted(watched.files_recorded(run) - files_said)
                if new:
                    files_said.update(new)
                    reporter.on_files(new)
            if run.run_id not in seen and status in TERMINAL:
                seen[run.run_id] = run_outcome(instance, record)
                result.runs.append(seen[run.run_id])
                on_run(seen[run.run_id])
        done = all(r.dagster_run.status.value in TERMINAL for r in records)
        if backfill.status != BulkActionStatus.REQUESTED and done:
            result.status = backfill.status.value
            result.backfill = backfill
            break
        reporter.doing = waiting_on(
            records, "this build runs the backfill" if host else DAEMON_DRIVES
        )
        time.sleep(tick_s)
    return result


DAEMON_DRIVES = "the Dagster daemon (`make ui`) runs the backfill"


def say_driver(reporter: Reporter, backfill_id: str, age, serves: bool, first: bool) -> None:
    """One line when the driver of the backfill is chosen or changes."""
    if serves:
        reporter.say(
            f"waiting for the Dagster daemon (`make ui`; its last heartbeat {age:.0f}s ago) "
            f"to run backfill {backfill_id}: it looks at backfills every 30 s; if it stops "
            f"beating for {LIVE_S}s, this build runs the backfill itself"
        )
    elif not first:
        reporter.say(
            f"the Dagster daemon has not beaten for {age:.0f}s (stopped): "
            "this build runs the backfill itself"
            if age is not None
            else "the Dagster daemon's heartbeats are gone: this build runs the backfill itself"
        )
    elif age is not None and age <= DAGSTER_TOLERANCE_S:
        # what Dagster's own health check would still call a healthy daemon
        reporter.say(
            f"the Dagster daemon last beat {age:.0f}s ago (stopped): this build runs the "
            "backfill itself"
        )


def failure_message(result) -> str:
    """The user-facing error of a failed in-process run (``dg.materialize``)."""
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data is not None:
            return one_line(innermost(event.step_failure_data.error))
    return "run failed"


def materialise_in_order(
    assets: list,
    steps: list[tuple[str, object]],
    instance,
    lake_root: str,
    command: str,
    configs: dict[str, dict] | None = None,
    resources: dict | None = None,
) -> str:
    """Each ``(asset, partition)`` of ``steps`` materialised in turn, in this process, on the
    persistent ``instance`` (so its runs and checks show in the UI, tagged ``kg/command``),
    with its run config from ``configs`` (asset name -> config) and ``resources`` beside the
    lake; stops at the first failure and returns its one line, else ""."""
    import dagster as dg

    from kg_platform.orchestration.recovery import owner_tags
    from kg_platform.resources.lake import LakeResource

    configs = configs or {}
    for n, (asset, partition) in enumerate(steps, 1):
        # progress on stderr: stdout keeps the command's figures (a --json line last)
        print(f"[{n}/{len(steps)}] {asset} [{partition}] ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        result = dg.materialize(
            assets,
            selection=[asset],
            partition_key=partition,
            instance=instance,
            resources={"lake": LakeResource(root=lake_root), **(resources or {})},
            # Dagster's console log stays in the instance (and the UI): the command prints
            run_config={**QUIET, "ops": {asset: {"config": configs[asset]}}}
            if asset in configs
            else QUIET,
            tags={"kg/command": command, **owner_tags()},  # see orchestration/recovery.py
            raise_on_error=False,
        )
        if not result.success:
            return f"{asset}[{partition}] failed: {failure_message(result)}"
        checks = result.get_asset_check_evaluations()
        passed = sum(c.passed for c in checks)
        print(
            f"[{n}/{len(steps)}] {asset}: ok in {time.perf_counter() - started:.1f}s"
            + (f", checks {passed}/{len(checks)} passed" if checks else ""),
            file=sys.stderr,
            flush=True,
        )
    return ""
