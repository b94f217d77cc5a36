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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kg_platform.orchestration.code_server import code_server_script
from kg_platform.orchestration.runs import (
    NO_FILES,
    QUIET,
    TERMINAL,
    FileRuns,
    RunOutcome,
    run_label,
    run_outcome,
)

BUILD_TAG = "kg/build"


@dataclass
class BuildResult:
    backfill_id: str
    status: str
    runs: list[RunOutcome] = field(default_factory=list)
    backfill: object = None  # Dagster's PartitionBackfill, as it ended
    # what the wait cost: looks at the instance (ticks), the ticks that read the backfill and
    # its runs (reads), and Dagster's backfill and run-queue iterations run here (drives,
    # each followed by a read)
    ticks: int = 0
    reads: int = 0
    drives: int = 0

    @property
    def failed(self) -> bool:
        """A run failed or a check failed, or the backfill did not complete."""
        return (
            any(r.status != "SUCCESS" or r.checks_failed for r in self.runs)
            or self.status != "COMPLETED_SUCCESS"
        )

    def never_run(self, requested: set) -> list[str]:
        """asset [partition] of ``requested`` that the backfill neither materialised nor ran
        and saw fail: what a failure upstream blocked (from Dagster's own backfill record)."""
        if self.backfill is None:
            return []
        data = self.backfill.asset_backfill_data
        done = set(data.materialized_subset.iterate_asset_partitions()) if data else set()
        failed_runs = {
            (a, p)
            for r in self.runs
            if r.status != "SUCCESS"
            for a in r.assets
            for p in (r.files_failed or [r.partition])
        }
        return sorted(
            f"{ap.asset_key.to_user_string()} [{ap.partition_key}]"
            for ap in requested
            if ap not in done
            and (ap.asset_key.to_user_string(), ap.partition_key) not in failed_runs
        )


DEFINITIONS = "kg_platform.definitions"
LOCATION = "kg_platform"
# what the runs' steps import on first use, preloaded by the forkserver beside the definitions
RUN_IMPORTS = "kg_platform.assets.run_imports"
# seconds between the heartbeats this process sends its code server. Dagster's client sends
# one a second, each on a new gRPC channel (a few ms of CPU here and in the server, for the
# whole build); the server shuts itself down after 45 s without one
# (WEBSERVER_GRPC_SERVER_HEARTBEAT_TTL), so every 5 s still leaves eight to miss
CODE_SERVER_HEARTBEAT_S = 5


def heartbeat_every(seconds: float = CODE_SERVER_HEARTBEAT_S) -> None:
    """Dagster's gRPC clients in this process heartbeat every ``seconds`` (its client reads
    the interval before each wait)."""
    import dagster._grpc.client as grpc_client

    grpc_client.CLIENT_HEARTBEAT_INTERVAL = seconds


def code_location(
    instance,
    module: str = DEFINITIONS,
    attribute: str | None = None,
    working_directory: str | None = None,
    name: str = LOCATION,
    log: Path | None = None,
    env: dict[str, str] | None = None,
    preload: tuple[str, ...] = (RUN_IMPORTS,),
):
    """Dagster's workspace target for a code location (the definitions' module), served by
    orchestration/code_server.py: the script `code_server_script` writes in the instance's
    home, preloading ``module`` and ``preload`` for the runs, with ``env`` and its output
    to ``log``. From now on this process heartbeats its code servers every
    CODE_SERVER_HEARTBEAT_S."""
    from dagster._core.workspace.load import location_origin_from_module_name
    from dagster._core.workspace.load_target import WorkspaceLoadTarget

    home = Path(instance.root_directory)
    executable = str(code_server_script(home, (module, *preload), env, log))
    heartbeat_every(CODE_SERVER_HEARTBEAT_S)

    class CodeLocation(WorkspaceLoadTarget):
        def create_origins(self):
            return [
                location_origin_from_module_name(
                    module, attribute, working_directory, name, executable_path=executable
                )
            ]

    return CodeLocation()


def workspace(instance, log_path: Path, env: dict[str, str] | None = None):
    """Dagster's workspace for this code location: a code server the runs launch from
    (orchestration/code_server.py: Dagster's, starting each run as a fork of a process that
    has imported the definitions). The server and the run and step processes it starts
    write their output to ``log_path`` (the run's events are in the instance, as the UI
    shows them) and see ``env`` on top of this process's environment; this process's own
    descriptors and environment are left alone, so it can be started from a thread."""
    from dagster._core.workspace.context import WorkspaceProcessContext

    log_path.parent.mkdir(parents=True, exist_ok=True)
    target = code_location(instance, log=log_path, env=env)
    return WorkspaceProcessContext(instance, target, code_server_log_level="WARNING")


class EarlyWorkspace:
    """A workspace (code server) started in a thread while the build still plans, for a
    build that will surely have runs: the code server's start (seconds: an interpreter
    importing dagster and loading the definitions) overlaps the planning. ``take`` hands it
    over when the environment the runs need is the one it was started with; otherwise (or
    with nothing to run) it is shut down and a fresh one is started when needed."""

    def __init__(self, instance, log_path: Path, env: dict[str, str]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.env = env
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="kg-code-server")
        self.started = self.pool.submit(workspace, instance, log_path, env)
        self.pool.shutdown(wait=False)

    def take(self, env: dict[str, str]):
        """The started workspace if it has ``env``, else None (it is closed)."""
        if env == self.env:
            return self.started.result()
        self.close()
        return None

    def close(self) -> None:
        try:
            context = self.started.result()
        except Exception:  # noqa: BLE001 - not used: its error is not this build's
            return
        context.__exit__(None, None, None)


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
    from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset
    from dagster._core.execution.backfill import PartitionBackfill
    from dagster._core.utils import make_new_backfill_id

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


def backfill_runs(instance, backfill_id: str) -> list:
    import dagster as dg

    records = instance.get_run_records(dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
    return sorted(records, key=lambda r: r.create_timestamp)


class Watched:
    """What a backfill waits on, read in a few queries: its status, its runs' statuses and the
    materialisations its unfinished runs have recorded (a run's step can finish what the next
    run needs before the run itself ends: the corpus step, before corpus_profile), with the
    file partitions each run has recorded so far (for the progress lines).

    ``changed`` says, in one small query, whether any of that may have changed since it last
    said so: the newest record id of the event log's index. Dagster mirrors every run status
    change, asset event (planned, materialised) and check evaluation there
    (SqliteEventLogStorage.store_event; one table on Postgres), so while the runs only work
    the wait reads nothing else."""

    def __init__(self, instance, backfill_id: str, files: FileRuns = NO_FILES) -> None:
        self.instance, self.backfill_id, self.files = instance, backfill_id, files
        self.materialised: dict[str, tuple[str | None, int]] = {}  # run -> (cursor, count)
        # run -> file asset -> the file partitions it recorded so far
        self.file_partitions: dict[str, dict[str, set[str]]] = {}
        self.mark: object = None  # the event log's newest record id when last looked at
        self.looked = False

    def changed(self) -> bool:
        """True the first time, then whenever the event log's index has a newer record than
        when last asked (always, on a storage that cannot say)."""
        try:
            mark = self.instance.event_log_storage.get_maximum_record_id()
        except NotImplementedError:
            return True
        if self.looked and mark == self.mark:
            return False
        self.mark, self.looked = mark, True
        return True

    def materialisations(self, run_id: str) -> int:
        import dagster as dg

        cursor, count = self.materialised.get(run_id, (None, 0))
        found = self.instance.get_records_for_run(
            run_id, cursor=cursor, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
        )
        if found.records:
            cursor = found.cursor
            recorded = self.file_partitions.setdefault(run_id, {})
            for r in found.records:
                event = r.event_log_entry.dagster_event
                name = event.asset_key.to_user_string()
                if name in self.files.assets:
                    if event.partition:
                        recorded.setdefault(name, set()).add(event.partition)
                else:
                    count += 1
        self.materialised[run_id] = (cursor, count)
        return count

    def files_recorded(self, run) -> set[str]:
        """The files an unfinished run has recorded so far: materialised for every file asset
        it runs."""
        assets = self.files.assets & {k.to_user_string() for k in run.asset_selection or ()}
        recorded = self.file_partitions.get(run.run_id, {})
        if not assets or not all(a in recorded for a in assets):
            return set()
        return set.intersection(*(recorded[a] for a in assets))

    def read(self) -> tuple:
        """(the backfill, its run records, a value that changes when the backfill may have
        more to launch: its status, a run created or ended, or an unfinished run's
        materialisation of an asset not over files). A run over files that records one more
        file, or a run that starts, unblocks nothing: the files' downstream waits for all of
        them, and each file run ends just after its last file."""
        backfill = self.instance.get_backfill(self.backfill_id)
        records = backfill_runs(self.instance, self.backfill_id)
        runs = tuple(
            (
                r.dagster_run.run_id,
                r.dagster_run.status.value in TERMINAL,
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


# how often the wait judges who drives from the daemon's heartbeats (a daemon is gone after
# LIVE_S without one)
HEARTBEAT_CHECK_S = 5.0
# while the event log is quiet (a long step), the backfill is still read this often: a cancel
# from the UI changes its status and writes no event
READ_IDLE_S = 30.0
# the tick lengthens while nothing changes: by tick_s for every QUIET_STEP_S of quiet, up to
# QUIET_TICK_MAX_S (what a run ending after a long quiet step may wait to be seen)
QUIET_STEP_S = 10.0
QUIET_TICK_MAX_S = 2.0


def wait_for_backfill(
    instance,
    process_context,
    backfill_id: str,
    on_run: Callable[[RunOutcome], None],
    tick_s: float = 0.5,
    idle_s: float = 120.0,
    reporter: Reporter | None = None,
    files: FileRuns = NO_FILES,
) -> BuildResult:
    """Drive (or, while a daemon serves the instance, watch) the backfill until it ends;
    ``on_run`` gets each run as it finishes, ``reporter`` what happens before. Who drives is
    judged again every HEARTBEAT_CHECK_S from the daemon's heartbeats: a daemon that stops
    beating (the UI stopped) is taken over, one that starts is left to drive.

    A tick (every ``tick_s``, up to QUIET_TICK_MAX_S after a quiet while) is one small query
    (Watched.changed); the backfill and its runs are read only when it says something
    changed, while the backfill has no unfinished run (its end comes with no event), and
    every READ_IDLE_S. Dagster's backfill and run-queue iterations (each reads and rewrites
    the backfill: ~0.15 s CPU at 10M records) run when the backfill may have more to launch
    (Watched.read: its status, a run created or ended, a materialisation not over files),
    while an iteration still changes that, and at least every ``idle_s``. So the wait costs
    CPU per run and per event, and next to nothing per second of a long step. A run over
    ``files`` is reported file by file."""
    reporter = reporter or Reporter(say=lambda line: None)
    with reporter:
        return drive(
            instance, process_context, backfill_id, on_run, tick_s, idle_s, reporter, files
        )


def drive(
    instance, process_context, backfill_id, on_run, tick_s, idle_s, reporter, files
) -> BuildResult:
    """wait_for_backfill's loop, with ``reporter``'s quiet-line thread running."""
    from dagster._core.execution.backfill import BulkActionStatus
    from dagster._daemon.backfill import execute_backfill_iteration
    from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import (
        QueuedRunCoordinatorDaemon,
    )

    logger = logging.getLogger("kg.build")
    logger.setLevel(logging.WARNING)
    queue = QueuedRunCoordinatorDaemon(interval_seconds=1)
    watched = Watched(instance, backfill_id, files)
    seen: dict[str, RunOutcome] = {}
    started: set[str] = set()
    files_said: set[str] = set()
    result = BuildResult(backfill_id, "REQUESTED")
    driven_at, driven_on = float("-inf"), None
    judged_at = float("-inf")
    read_at = changed_at = time.monotonic()
    host: bool | None = None
    records: list = []
    while True:
        result.ticks += 1
        if time.monotonic() - judged_at >= HEARTBEAT_CHECK_S:
            judged_at = time.monotonic()
            age = heartbeat_age(instance)
            serves = age is not None and age <= LIVE_S
            if host is None or host == serves:
                say_driver(reporter, backfill_id, age, serves, first=host is None)
                host, driven_on = not serves, None
        ended = all(r.dagster_run.status.value in TERMINAL for r in records)
        if watched.changed():
            changed_at = time.monotonic()
        if changed_at >= read_at or ended or time.monotonic() - read_at >= READ_IDLE_S:
            read_at = time.monotonic()
            backfill, records, state = watched.read()
            result.reads += 1
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
            result.drives += 1
            if watched.changed():  # what the iteration wrote is read now
                changed_at = time.monotonic()
            # compared with the state before the iteration: if it changed it, drive again
            backfill, records, state = watched.read()
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
                seen[run.run_id] = run_outcome(instance, record, files)
                result.runs.append(seen[run.run_id])
                on_run(seen[run.run_id])
        if backfill.status != BulkActionStatus.REQUESTED and all(
            r.dagster_run.status.value in TERMINAL for r in records
        ):
            result.status = backfill.status.value
            result.backfill = backfill
            break
        reporter.doing = waiting_on(
            records, "this build runs the backfill" if host else DAEMON_DRIVES
        )
        time.sleep(next_tick(tick_s, time.monotonic() - changed_at))
    return result


def next_tick(tick_s: float, quiet_s: float) -> float:
    """The wait's next tick after ``quiet_s`` without a new event: ``tick_s`` longer for
    every QUIET_STEP_S of quiet, at most QUIET_TICK_MAX_S."""
    return min(QUIET_TICK_MAX_S, tick_s * (1 + quiet_s // QUIET_STEP_S))


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


def run_backfill(
    instance,
    partitions: set,
    title: str,
    tags: dict,
    run_config: dict,
    log_path: Path,
    env: dict[str, str],
    on_run: Callable[[RunOutcome], None],
    reporter: Reporter,
    files: FileRuns = NO_FILES,
    early: EarlyWorkspace | None = None,
) -> BuildResult:
    """``partitions`` as one asset backfill of this code location (workspace, with ``env``
    and its output to ``log_path``; ``early``'s when it has that ``env``), submitted and
    driven to its end (wait_for_backfill)."""
    started = early.take(env) if early is not None else None
    with started or workspace(instance, log_path, env) as process_context:
        graph = process_context.create_request_context().asset_graph
        backfill_id = submit_backfill(instance, graph, partitions, title, tags, run_config)
        reporter.say(
            f"backfill {backfill_id} submitted (it shows in the UI under Runs > Backfills)"
        )
        return wait_for_backfill(
            instance, process_context, backfill_id, on_run, reporter=reporter, files=files
        )
