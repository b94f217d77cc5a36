"""Recovery from a killed build: what a SIGKILL leaves in the instance and the lake, found
and cleared before the next build plans its backfill.

A run's worker process reports its pid when it starts (Dagster's "Started process for run"
engine event); a run still STARTED whose worker is gone (or whose pid now belongs to a later
process) will never end by itself. Such runs are reported failed through the instance, so
their partitions read `failed` and the next backfill redoes them; runs queued or not yet
started by a build whose CLI is gone are canceled, with that build's backfill, which
nobody drives any more; the lake's staging left by dead processes is removed.

The same check serves Dagster's own run monitoring (orchestration/launcher.py), so a
`dagster-daemon` (`make ui`) fails such runs too.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from kg_platform.settings.workers import process_alive
from kg_platform.storage.owner import host_name, host_of, owner_of, process_started_at

PROCESS_GONE = "process gone"
FAILURE_TAG = "kg/failure"
# on a build's backfill (and so on each of its runs): the CLI that drives it, "pid:started_at"
OWNER_TAG = "kg/build_owner"
WORKER_STARTED = "Started process for run"


def owner_tags() -> dict[str, str]:
    """The tags naming this process as the build that drives a backfill."""
    pid = os.getpid()
    return {OWNER_TAG: f"{pid}:{process_started_at(pid) or time.time():.2f}"}


def owner_gone(value: str | None) -> bool:
    """The build process an OWNER_TAG value names is no longer running (False when the
    value names none)."""
    try:
        pid, started_at = value.split(":")  # type: ignore[union-attr]
        return not process_alive(int(pid), float(started_at))
    except (AttributeError, ValueError):
        return False


def run_worker(instance, run_id: str) -> tuple[int, float] | None:
    """(pid, when it reported) of the run's latest worker process, None before one started."""
    import dagster as dg

    records = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ENGINE_EVENT, ascending=False
    ).records
    for record in records:
        entry = record.event_log_entry
        if not (entry.message or "").startswith(WORKER_STARTED):
            continue
        pid = entry.dagster_event.engine_event_data.metadata.get("pid")
        if pid is not None:
            return int(pid.value), entry.timestamp
    return None


def worker_gone(instance, run) -> str | None:
    """Why the run's process is gone ("run worker pid N ..."), or None while it may still
    run (its worker alive, or no worker or owner to check, e.g. a run inside a CLI)."""
    worker = run_worker(instance, run.run_id)
    if worker is not None:
        pid, reported = worker
        return None if process_alive(pid, reported) else f"its run worker (pid {pid}) is gone"
    owner = run.tags.get(OWNER_TAG)
    if owner_gone(owner):
        return f"the kg build that launched it (pid {owner.split(':')[0]}) is gone"
    return None


def orphaned(instance, run) -> tuple[int, float, str] | None:
    """(worker pid, when it reported, the gone build's pid) of a run whose worker still runs
    while the kg build that launched it is gone (its CLI killed alone): nobody will read its
    outcome, and the next build would plan the partitions it is still writing."""
    owner = run.tags.get(OWNER_TAG)
    if not owner_gone(owner):
        return None
    worker = run_worker(instance, run.run_id)
    if worker is None or not process_alive(*worker):
        return None
    return worker[0], worker[1], owner.split(":")[0]


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc), parents first: a run worker's parse pool
    is its children, which write the lake too."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[-1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop(0)
        found.append(current)
        todo += children.get(current, [])
    return found


def end_process_tree(pid: int, started_at: float, grace_s: float = 10.0) -> str:
    """SIGTERM ``pid`` and its descendants (Dagster's run worker then ends its step and
    discards its lake transaction), SIGKILL whatever still runs after ``grace_s``; returns
    how it ended."""
    import signal

    if not process_alive(pid, started_at):
        return "already gone"
    tree = process_tree(pid)
    for member in tree:
        with _gone_ok():
            os.kill(member, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_running(m) for m in tree):
        time.sleep(0.1)
    left = [m for m in tree if _running(m)]
    for member in left:
        with _gone_ok():
            os.kill(member, signal.SIGKILL)
    while any(_running(m) for m in left) and time.monotonic() < deadline + 30:
        time.sleep(0.1)
    return f"SIGKILL after {grace_s:.0f} s" if left else "SIGTERM"


def _running(pid: int) -> bool:
    from kg_platform.settings.workers import pid_alive

    return pid_alive(pid)


class _gone_ok:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, *_) -> bool:
        return kind is not None and issubclass(kind, ProcessLookupError)


def end_orphan(instance, run, worker_pid: int, reported: float, owner_pid: str) -> str:
    """End a run a killed kg build left running (end_process_tree), report it failed as a
    run whose process is gone (its partitions are redone), and return the line naming it."""
    how = end_process_tree(worker_pid, reported)
    run = instance.get_run_by_id(run.run_id) or run
    instance.add_run_tags(run.run_id, {FAILURE_TAG: PROCESS_GONE})
    if not run.is_finished:
        instance.report_run_failed(
            run,
            f"{PROCESS_GONE}: the kg build that launched it (pid {owner_pid}) is gone; its "
            f"worker (pid {worker_pid}) was ended by the next kg build; `kg build` redoes its steps",
        )
    assets = "+".join(sorted(k.to_user_string() for k in run.asset_selection or ()))
    start, end = run.tags.get(_RANGE_START), run.tags.get(_RANGE_END)
    partition = run.tags.get("dagster/partition") or (
        start if start == end else f"{start}..{end}" if start else None
    )
    where = f" [{partition}]" if partition else ""
    return (
        f"ended run {run.run_id[:8]} ({assets}{where}), left running by the killed kg build "
        f"(pid {owner_pid}): its worker pid {worker_pid} ({how})"
    )


_RANGE_START = "dagster/asset_partition_range_start"
_RANGE_END = "dagster/asset_partition_range_end"


@dataclass
class Recovered:
    failed_runs: list[str] = field(default_factory=list)
    canceled_runs: list[str] = field(default_factory=list)
    canceled_backfills: list[str] = field(default_factory=list)
    staging_removed: list[str] = field(default_factory=list)
    ended_runs: list[str] = field(default_factory=list)  # a line each (end_orphan)

    def line(self) -> str:
        """The lines for the build's output (one per run ended, then one summary); "" when
        there was nothing to recover."""
        ended = "".join(f"{line}\n" for line in self.ended_runs)
        parts = []
        if self.failed_runs:
            parts.append(f"{len(self.failed_runs)} runs marked failed ({PROCESS_GONE})")
        if self.canceled_runs:
            parts.append(f"{len(self.canceled_runs)} queued runs canceled")
        if self.canceled_backfills:
            parts.append(f"backfill {', '.join(self.canceled_backfills)} canceled")
        if self.staging_removed:
            parts.append(f"{len(self.staging_removed)} staging folders removed")
        if self.ended_runs:
            parts.append(f"{len(self.ended_runs)} runs it left running ended")
        return f"{ended}recovered from a killed build: {'; '.join(parts)}" if parts else ""


def recover(instance, lake_root: str, daemon_serves: bool) -> Recovered:
    """Fail the runs whose process is gone, cancel what a dead build queued and its
    backfill (unless a daemon serves the instance: it drives backfills itself), and remove
    the local lake's staging of dead processes. Call while holding the build lock."""
    from dagster import DagsterRunStatus, RunsFilter
    from dagster._core.execution.backfill import BulkActionsFilter, BulkActionStatus

    done = Recovered()
    active = [
        DagsterRunStatus.STARTING,
        DagsterRunStatus.STARTED,
        DagsterRunStatus.CANCELING,
        DagsterRunStatus.NOT_STARTED,
    ]
    for record in instance.get_run_records(RunsFilter(statuses=active)):
        run = record.dagster_run
        why = worker_gone(instance, run)
        if why is None:
            # a live worker of a build whose CLI was killed alone: ended before this build
            # plans (unless a daemon drives that build's backfill: then the run is its)
            left = None if daemon_serves else orphaned(instance, run)
            if left is not None:
                done.ended_runs.append(end_orphan(instance, run, *left))
            continue
        instance.add_run_tags(run.run_id, {FAILURE_TAG: PROCESS_GONE})
        instance.report_run_failed(run, f"{PROCESS_GONE}: {why}; `kg build` redoes its steps")
        done.failed_runs.append(run.run_id)
    if not daemon_serves:
        backfills = instance.get_backfills(
            filters=BulkActionsFilter(
                statuses=[BulkActionStatus.REQUESTED, BulkActionStatus.CANCELING]
            )
        )
        for backfill in backfills:
            if not owner_gone(backfill.tags.get(OWNER_TAG)):
                continue
            queued = instance.get_run_records(
                RunsFilter(
                    tags={"dagster/backfill": backfill.backfill_id},
                    statuses=[DagsterRunStatus.QUEUED],
                )
            )
            for record in queued:
                instance.report_run_canceled(
                    record.dagster_run, f"{PROCESS_GONE}: the kg build that queued it is gone"
                )
                done.canceled_runs.append(record.dagster_run.run_id)
            instance.update_backfill(
                backfill.with_status(BulkActionStatus.CANCELED).with_end_timestamp(time.time())
            )
            done.canceled_backfills.append(backfill.backfill_id)
    done.staging_removed = remove_dead_staging(lake_root)
    return done


def remove_dead_staging(lake_root: str) -> list[str]:
    """Remove what dead processes of this host left in the lake: `.staging/` entries
    (transactions, scratch) and, in a local lake, temporary files beside published objects,
    each named by its owner. On S3 the `.staging/txn-…` prefixes that name this host (a
    writer on another machine is not ours to judge) and the local scratch folders an S3
    build keeps in the temporary folder."""
    if "://" in lake_root and not lake_root.startswith("file://"):
        from kg_platform.storage.lake import Lake

        return _remove_dead_remote_staging(Lake(lake_root))
    root = Path(lake_root.removeprefix("file://"))
    if not root.is_dir():
        return []
    removed = []
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            if not _dead_here(name):
                continue
            path = Path(folder) / name
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
                dirs.remove(name)
            else:
                path.unlink(missing_ok=True)
            removed.append(str(path.relative_to(root)))
    return sorted(removed)


def _dead_here(name: str) -> bool:
    """The name carries an owner that ran on this host (or names no host) and is gone."""
    owner = owner_of(name)
    if owner is None or host_of(name) not in (None, host_name()):
        return False
    return not process_alive(*owner)


# the local scratch of a build whose lake is remote (Lake.staging_dir): "~pid.start~-<uuid>"
_REMOTE_SCRATCH = re.compile(r"^~\d+\.\d+~-[0-9a-f]{32}$")


def _remove_dead_remote_staging(lake) -> list[str]:
    from kg_platform.storage.lake import STAGING

    removed = []
    for key in lake.list(STAGING):
        name = key.rsplit("/", 1)[1]
        if host_of(name) is not None and _dead_here(name):
            lake.remove(key)
            removed.append(key)
    scratch = Path(tempfile.gettempdir())
    for path in scratch.iterdir():
        if _REMOTE_SCRATCH.match(path.name) and path.is_dir() and _dead_here(path.name):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return sorted(removed)


def prepare_and_recover(settings, jobs: int):
    """(the instance for ``jobs`` runs at once, rid of what a killed build left, the line
    saying what that was or "")."""
    from kg_platform.orchestration.backfill import daemon_serves
    from kg_platform.orchestration.instance import prepare_instance

    instance = prepare_instance(settings, jobs)
    return instance, recover(instance, settings.lake, daemon_serves(instance)).line()
