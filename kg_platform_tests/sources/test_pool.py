"""At most four connections across runs: many `pubmed_xml` partitions, each its own run and
process, as deployed (the `ncbi` pool from the repository's dagster.yaml plus the client's
cross-process slots), against a real HTTP mirror that counts concurrent connections."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from kg_platform_tests.conftest import REPO_ROOT, require_reference
from kg_platform_tests.sources.mirror_server import serve_mirror
from kg_platform_tests.support.source import many_files_mirror

RUNS = 6


def test_repository_dagster_yaml_sets_the_ncbi_pool(tmp_path: Path) -> None:
    shutil.copy(REPO_ROOT / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        pool = instance.get_concurrency_config().pool_config
        assert (pool.default_pool_limit, pool.pool_granularity.value) == (4, "op")
        info = instance.event_log_storage.get_concurrency_info("ncbi")
        assert (info.limit, info.using_default_limit) == (4, True)
        # the UI's daemon looks for queued runs every second (Dagster's default: 5 s)
        assert instance.run_coordinator.dequeue_interval_seconds == 1
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs == 8


@pytest.mark.slow  # six Python processes (a run each, its step inside it, as `kg build` runs it)
def test_at_most_four_downloads_across_runs(tmp_path: Path) -> None:
    mirror = require_reference("pubmed", "mirror")
    files = many_files_mirror(mirror, tmp_path / "src", RUNS)
    home = tmp_path / "dagster"
    home.mkdir()
    shutil.copy(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("pubmed_files", [f.name for f in files])
    lake = tmp_path / "lake"
    # long enough per request that the runs overlap on a slow machine
    with serve_mirror(tmp_path / "src", delay_s=0.5) as (url, state):
        env = {
            **os.environ,
            "DAGSTER_HOME": str(home),
            "KG_LAKE": str(lake),
            "KG_PUBMED_SOURCE": url,
        }
        runs = [
            subprocess.Popen(
                [sys.executable, "-m", "kg_platform_tests.sources.pool_run", f.name],
                cwd=REPO_ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            for f in files
        ]
        outputs = [run.communicate(timeout=300)[0].decode(errors="replace") for run in runs]
        assert [run.returncode for run in runs] == [0] * RUNS, outputs[0][-3000:]
        # every run listed the source and fetched md5 + file
        assert sum(r.endswith(".xml.gz") for r in state.requests) == RUNS
        assert 2 <= state.max_active <= 4, state.max_active
    for f in files:
        path = lake / "raw" / "pubmed" / "26" / "baseline" / f.xml_filename
        assert path.stat().st_size == 72456
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert sorted(instance.get_materialized_partitions(dg.AssetKey("pubmed_xml"))) == [
            f.name for f in files
        ]
