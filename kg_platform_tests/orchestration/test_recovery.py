"""A run whose worker process is gone, on a real instance with the repository's dagster.yaml:
the instance's run launcher tells Dagster's own run monitoring so (which then fails the run),
`recover` fails it before a build plans, and staging named by a dead process is removed while
a live one's stays. (The whole path, a SIGKILLed `kg build`, is in
kg_platform_tests/commands/test_build_recovery.py.)"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import dagster as dg
import pytest

from kg_platform.orchestration.launcher import LocalRunLauncher
from kg_platform.orchestration.recovery import (
    FAILURE_TAG,
    OWNER_TAG,
    PROCESS_GONE,
    owner_tags,
    recover,
    remove_dead_staging,
    worker_gone,
)
from kg_platform.storage.owner import owner_tag
from kg_platform_tests.conftest import REPO_ROOT


@pytest.fixture
def instance(tmp_path: Path):
    shutil.copy(REPO_ROOT / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        yield instance


def started_run(instance, pid: int | None, tags: dict | None = None) -> dg.DagsterRun:
    """A STARTED run whose worker reported ``pid``, as Dagster's run worker does (no pid:
    a run executed inside a CLI process, which reports none)."""
    from dagster._core.events import EngineEventData

    run = instance.add_run(
        dg.DagsterRun(
            job_name="pubmed_file_job",
            run_id=str(uuid.uuid4()),
            status=dg.DagsterRunStatus.STARTED,
            tags=tags or {},
        )
    )
    if pid is not None:
        instance.report_engine_event(
            f"Started process for run (pid: {pid}).", run, EngineEventData.in_process(pid)
        )
    assert run.status == dg.DagsterRunStatus.STARTED
    return run


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_launcher_answers_run_monitoring_from_the_worker_pid(instance) -> None:
    from dagster._core.launcher import WorkerStatus
    from dagster._daemon.monitoring.run_monitoring import monitor_started_run

    assert isinstance(instance.run_launcher, LocalRunLauncher)
    assert instance.run_monitoring_enabled
    alive = started_run(instance, os.getpid())
    pid = dead_pid()
    dead = started_run(instance, pid)
    assert instance.run_launcher.check_run_worker_health(alive).status == WorkerStatus.RUNNING
    health = instance.run_launcher.check_run_worker_health(dead)
    assert (health.status, health.msg) == (
        WorkerStatus.FAILED,
        f"its run worker (pid {pid}) is gone",
    )
    # Dagster's own monitoring (what dagster-daemon runs) now fails it
    record = instance.get_run_record_by_id(dead.run_id)
    monitor_started_run(instance, None, record, logging.getLogger("test"))
    assert instance.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.FAILURE
    assert instance.get_run_by_id(alive.run_id).status == dg.DagsterRunStatus.STARTED


def test_recover_fails_dead_runs_and_removes_dead_staging(instance, tmp_path: Path) -> None:
    pid = dead_pid()
    dead = started_run(instance, pid)
    alive = started_run(instance, os.getpid())
    # runs inside a CLI process: judged by the tag naming that process
    in_dead_cli = started_run(instance, None, {OWNER_TAG: f"{pid}:100.00"})
    in_live_cli = started_run(instance, None, owner_tags())
    lake = tmp_path / "lake"
    mine = lake / ".staging" / f"txn-{owner_tag()}-{uuid.uuid4().hex}"
    theirs = lake / ".staging" / f"txn-~{pid}.100~-{uuid.uuid4().hex}"
    temporary = lake / "raw" / f".pubmed26n0001.xml.gz.tmp-~{pid}.100~-abc"
    unnamed = lake / ".staging" / uuid.uuid4().hex
    for folder in (mine, theirs, unnamed):
        folder.mkdir(parents=True)
        (folder / "x.parquet").write_bytes(b"x")
    temporary.parent.mkdir(parents=True)
    temporary.write_bytes(b"half")

    done = recover(instance, str(lake), daemon_serves=False)
    assert sorted(done.failed_runs) == sorted([dead.run_id, in_dead_cli.run_id])
    assert done.staging_removed == sorted(
        [str(theirs.relative_to(lake)), str(temporary.relative_to(lake))]
    )
    assert done.line() == (
        "recovered from a killed build: 2 runs marked failed (process gone); "
        "2 staging folders removed"
    )
    failed = instance.get_run_by_id(dead.run_id)
    assert failed.status == dg.DagsterRunStatus.FAILURE
    assert failed.tags[FAILURE_TAG] == PROCESS_GONE
    assert worker_gone(instance, instance.get_run_by_id(alive.run_id)) is None
    assert instance.get_run_by_id(alive.run_id).status == dg.DagsterRunStatus.STARTED
    assert instance.get_run_by_id(in_live_cli.run_id).status == dg.DagsterRunStatus.STARTED
    # a live process's stage, and a name that carries no owner, stay
    assert mine.is_dir() and unnamed.is_dir()
    assert remove_dead_staging(str(lake)) == []
    assert recover(instance, str(lake), daemon_serves=False).line() == ""


KILLED_IN_A_TRANSACTION = """
import os, signal, sys
from kg_platform.storage.lake import Lake
with Lake(sys.argv[1]).transaction() as staged:
    staged.write_bytes("corpus/articles.parquet", b"half a build")
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_recover_removes_a_killed_writers_stage_from_an_s3_lake(
    instance, s3_lake, tmp_path: Path, monkeypatch
) -> None:
    """A process SIGKILLed inside a transaction on a real S3 server (moto) leaves its stage
    under .staging/; the next build's recovery removes it, with the local scratch folder
    such a build keeps, and leaves a live writer's stage, another host's and one that names
    no host."""
    import tempfile

    from kg_platform.storage.owner import host_name, host_tag

    killed = subprocess.Popen(
        [sys.executable, "-c", KILLED_IN_A_TRANSACTION, s3_lake.root],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert killed.wait() == -9
    [dead] = s3_lake.list(".staging")
    assert dead.startswith(f".staging/txn-~{killed.pid}.")
    assert dead.split("~", 2)[2].startswith(f"{host_tag()}-")
    assert s3_lake.list(dead) == [f"{dead}/corpus"]
    assert not s3_lake.exists("corpus/articles.parquet")

    pid = dead_pid()
    mine = f".staging/txn-{owner_tag()}{host_tag()}-{uuid.uuid4().hex}"
    elsewhere = f".staging/txn-~{pid}.100~@not-{host_name()}@-{uuid.uuid4().hex}"
    no_host = f".staging/txn-~{pid}.100~-{uuid.uuid4().hex}"
    for stage in (mine, elsewhere, no_host):
        s3_lake.write_bytes(f"{stage}/corpus/articles.parquet", b"x")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    scratch = tmp_path / f"~{pid}.100~-{uuid.uuid4().hex}"
    live_scratch = Path(s3_lake.staging_dir())
    (scratch / "part.parquet").parent.mkdir()
    (scratch / "part.parquet").write_bytes(b"x")

    done = recover(instance, s3_lake.root, daemon_serves=False)
    assert done.staging_removed == sorted([dead, str(scratch)])
    assert done.line() == "recovered from a killed build: 2 staging folders removed"
    assert s3_lake.list(".staging") == sorted([mine, elsewhere, no_host])
    assert not scratch.exists() and live_scratch.is_dir()
    assert remove_dead_staging(s3_lake.root) == []
