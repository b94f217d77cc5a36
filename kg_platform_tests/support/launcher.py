"""A test-only run launcher: each run of a `kg build` the test drives in the test's own
process, for the tests that check what a build makes, not how its processes live.

Dagster's default launcher asks the code server to start one interpreter per run, and each
pays its imports and the definitions' load (seconds of CPU) before its steps run; a test
build of a few tiny files spends most of its CPU there. This launcher executes the run where
`kg build`'s run queue launches it, synchronously, as Dagster's own SyncInMemoryRunLauncher
does, with the run's job taken from definitions built from the build's own settings:
`kg_platform.definitions.defs` is built at its import from that moment's settings, so the
module a test process imported earlier would run the job on another lake. The backfill, its
planning, the run queue, the code server and the instance are the real ones.

Tests about processes (killed workers, recovery, the daemon, Celery, pools across runs) keep
the real launcher: they never call `in_process_runs`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.execution.api import execute_run
from dagster._core.launcher import LaunchRunContext, RunLauncher
from dagster._serdes import ConfigurableClass
from dagster._serdes.config_class import ConfigurableClassData

from kg_platform.orchestration.instance import TEMPLATE

LAUNCHER = (
    "run_launcher:\n  module: kg_platform.orchestration.launcher\n  class: LocalRunLauncher\n"
)
IN_PROCESS = (
    "run_launcher:\n  module: kg_platform_tests.support.launcher\n  class: InProcessRunLauncher\n"
)


def in_process_runs(home: Path) -> Path:
    """Write the instance's dagster.yaml under KG home ``home``: the repository's template
    with this launcher instead of the process-per-run one. `kg build` keeps a dagster.yaml
    that is neither the template nor its own, so every build on ``home`` uses it."""
    text = TEMPLATE.read_text()
    assert LAUNCHER in text, f"{TEMPLATE}: no run_launcher block to replace"
    path = home / "dagster" / "dagster.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace(LAUNCHER, IN_PROCESS))
    return path


class InProcessRunLauncher(RunLauncher, ConfigurableClass):
    """Runs each launched run to its end in this process, on definitions built from
    ``Settings.load()`` (the build's choice of lake and sources, as its code server sees it)."""

    def __init__(self, inst_data: ConfigurableClassData | None = None) -> None:
        self._inst_data = inst_data
        self._defs: dict[Any, dg.Definitions] = {}
        super().__init__()

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @classmethod
    def config_type(cls) -> dict:
        return {}

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]
    ) -> InProcessRunLauncher:
        return cls(inst_data=inst_data)

    def definitions(self) -> dg.Definitions:
        from kg_platform.definitions import build_definitions
        from kg_platform.settings import Settings

        settings = Settings.load()
        key = repr(settings)
        if key not in self._defs:
            self._defs[key] = build_definitions(settings)
        return self._defs[key]

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        job = self.definitions().get_repository_def().get_job(run.job_name)
        execute_run(InMemoryJob(job), run, self._instance)

    def terminate(self, run_id: str) -> bool:
        return False  # each run has ended before launch_run returns
