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


@dataclass
class Recovered:
    failed_runs: list[str] = field(default_factory=list)
    canceled_runs: list[str] = field(default_factory=list)
    canceled_backfills: list[str] = field(default_factory=list)
    staging_removed: list[str] = field(default_factory=list)

    def line(self) -> str:
        """One line for the build's output; "" when there was nothing to recover."""
        parts = []
        if self.failed_runs:
            parts.append(f"{len(self.failed_runs)} runs marked failed ({PROCESS_GONE})")
        if self.canceled_runs:
            parts.append(f"{len(self.canceled_runs)} queued runs canceled")
        if self.canceled_backfills:
            parts.append(f"backfill {', '.join(self.canceled_backfills)} canceled")
        if self.staging_removed:
            parts.append(f"{len(self.staging_removed)} staging folders removed")
        return f"recovered from a killed build: {'; '.join(parts)}" if parts else ""


def recover(instance, lake_root: str, daemon_serves: bool) -> Recovered:
    """Fail the runs whose process is gone, cancel what a dead build queued and its
    backfill (unless a daemon serves the instance: it drives backfills itself), and remove
    the local lake's staging of dead processes. Call while holding the build lock."""
    from dagster import DagsterRunStatus, RunsFilter

    from kg_platform.orchestration.dagster_internals import BulkActionsFilter, BulkActionStatus

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
