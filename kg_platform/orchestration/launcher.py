"""The instance's run launcher: Dagster's default one (each run in a process started by the
code server), made checkable by Dagster's run monitoring. With the default launcher the
monitoring daemon cannot tell a STARTED run whose process was killed from one that runs, so
such a run stays STARTED for ever; this one answers from the run worker's pid
(orchestration/recovery.py), and the daemon then fails the run. dagster.yaml names it."""

from __future__ import annotations

import dagster as dg
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus


class LocalRunLauncher(dg.DefaultRunLauncher):
    """DefaultRunLauncher whose run workers' health Dagster's run monitoring can check."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        from kg_platform.orchestration.recovery import worker_gone

        gone = worker_gone(self._instance, run)
        if gone is not None:
            return CheckRunHealthResult(WorkerStatus.FAILED, gone)
        return CheckRunHealthResult(WorkerStatus.RUNNING)
