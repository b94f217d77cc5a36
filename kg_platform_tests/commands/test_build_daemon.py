"""`kg build` after the UI's daemon stopped: the daemon's last heartbeat is still recent
enough for Dagster's health check (1,800 s), so the build must judge it itself, say what it
waits for, and run the backfill when no heartbeat comes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import dagster as dg
from dagster._daemon import controller
from dagster._daemon.types import DaemonHeartbeat

from kg_platform.orchestration import backfill as driver
from kg_platform_tests.conftest import REPO_ROOT, require_reference

# a bound on a test that waits for a real build, not a figure the test asserts
BUILD_TIMEOUT_S = 300
WAITING = "waiting for the Dagster daemon (`make ui`; its last heartbeat "


def beat(instance, daemon_id: str, age_s: float) -> None:
    """The heartbeats of a daemon that last beat ``age_s`` ago, as its own loop writes them."""
    for daemon_type in driver.DAEMON_TYPES:
        instance.add_daemon_heartbeat(
            DaemonHeartbeat(time.time() - age_s, daemon_type, daemon_id, errors=[])
        )


def test_the_window_is_dagsters_heartbeat_interval() -> None:
    assert driver.HEARTBEAT_S == controller.DEFAULT_HEARTBEAT_INTERVAL_SECONDS
    assert driver.DAGSTER_TOLERANCE_S == (
        controller.DEFAULT_DAEMON_HEARTBEAT_TOLERANCE_SECONDS
        + controller.DEFAULT_HEARTBEAT_INTERVAL_SECONDS
    )


def test_a_build_takes_over_from_a_daemon_that_stopped_beating(tmp_path: Path) -> None:
    home = tmp_path / "kg"
    (home / "dagster").mkdir(parents=True)
    instance = dg.DagsterInstance.from_config(str(home / "dagster"))
    daemon_id = str(uuid.uuid4())
    # a daemon whose last heartbeat is 2 s short of the window: Dagster calls it healthy
    # (and would for 30 minutes), the build waits for it, saying so
    almost_gone = driver.LIVE_S - 2
    beat(instance, daemon_id, almost_gone)
    statuses = instance.get_daemon_statuses(list(driver.DAEMON_TYPES))
    assert all(s.healthy for s in statuses.values())

    env = {k: v for k, v in os.environ.items() if not k.startswith(("KG_", "DAGSTER_"))}
    env["KG_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    args = [sys.executable, "-m", "kg_platform.cli", "build", "--select", "key:pubmed_xml"]
    args += ["--pubmed-source", str(require_reference("pubmed", "mirror"))]
    args += ["--mesh-source", str(require_reference("mesh")), "--jobs", "2"]
    build = subprocess.Popen(
        args, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    # the daemon keeps beating (each heartbeat as old as the first) until the build says it
    # waits for it, then stops: its last heartbeat ages past the window within 2 s
    stopped = threading.Event()

    def daemon() -> None:
        while not stopped.wait(0.2):
            beat(instance, daemon_id, almost_gone)

    beating = threading.Thread(target=daemon)
    beating.start()
    watchdog = threading.Timer(BUILD_TIMEOUT_S, build.kill)
    watchdog.start()
    lines = []
    try:
        for line in build.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith(WAITING):
                stopped.set()
        build.wait()
    finally:
        stopped.set()
        watchdog.cancel()
        beating.join()
    out = "\n".join(lines)
    assert build.returncode == 0, out
    waiting = next(i for i, line in enumerate(lines) if line.startswith(WAITING))
    assert lines[waiting].endswith(
        f"to run backfill {lines[waiting - 1].split()[1]}: it looks at backfills every 30 s; "
        f"if it stops beating for {driver.LIVE_S}s, this build runs the backfill itself"
    ), out
    took_over = [line for line in lines if line.startswith("the Dagster daemon has not beaten")]
    assert len(took_over) == 1, out
    assert took_over[0].endswith("s (stopped): this build runs the backfill itself")
    assert lines.index(took_over[0]) > waiting
    # nothing ran while the build waited on the daemon: the build ran the backfill's one run
    assert "[1] pubmed_xml [pubmed26n1334..pubmed26n1335]: ok in " in out
    [backfill] = instance.get_backfills()
    assert backfill.status.value == "COMPLETED_SUCCESS"
    runs = instance.get_runs(dg.RunsFilter(tags={"dagster/backfill": backfill.backfill_id}))
    assert [r.status.value for r in runs] == ["SUCCESS"]
