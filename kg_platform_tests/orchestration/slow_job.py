"""A job whose one step waits (up to 2 minutes) for a file to appear in the KG home, so a
test can kill the Celery worker that runs it mid-step. Loaded by file path, as the workers
load it, with the executor the kg settings pick (celery while `kg workers` runs)."""

import os
import time
from pathlib import Path

import dagster as dg

from kg_platform.orchestration.executor import executor_for
from kg_platform.settings import Settings


def marker(name: str) -> Path:
    return Path(os.environ["KG_HOME"]) / name


@dg.op
def slow_step() -> None:
    marker("slow_step.pid").write_text(str(os.getpid()))
    deadline = time.monotonic() + 120
    while not marker("slow_step.release").exists() and time.monotonic() < deadline:
        time.sleep(0.2)


@dg.job(executor_def=executor_for(Settings.load()))
def slow_job() -> None:
    slow_step()
