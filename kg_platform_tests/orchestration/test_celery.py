"""The same definitions on dagster-celery's executor, with the real parts: `kg workers start`
brings up Redis, Postgres and two Celery worker processes (one on the `dagster` queue, one on
`parse`); `dagster asset materialize` runs the real mirror's two files and the release fold
through the Postgres-backed instance. Each step runs on the worker its queue names, the
tables equal an in-process build's byte for byte, the runs are in Postgres, and the `ncbi`
pool's slots, held in Postgres, hold a step back across processes. A worker killed outright
mid-step fails its run, which then re-executes from failure on the other worker."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest
from dagster._core.definitions.reconstruct import ReconstructableJob

from kg_platform_tests.conftest import REPO_ROOT, require_reference

pytestmark = pytest.mark.slow

FILES = ["pubmed26n1334", "pubmed26n1335"]
RELEASE = "pubmed26"
TABLES = ["articles", "mesh_edges", "citations", "corrections", "chemicals", "pubtypes"]
HOST = socket.gethostname()
DEFAULT_WORKER = f"kg-worker-1@{HOST}"
PARSE_WORKER = f"kg-worker-2@{HOST}"


def require_servers() -> None:
    from kg_platform.orchestration.services import missing_binaries

    missing = missing_binaries()
    if missing:
        message = f"not installed: {', '.join(missing)} (apt-get install -y {' '.join(missing)})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)


@contextlib.contextmanager
def workers(*start_args: str):
    """`kg workers start ARGS` in a fresh KG home, stopped (and checked stopped) after."""
    require_servers()
    mirror = require_reference("pubmed", "mirror")
    # Postgres runs as an unprivileged user when we are root: its folder must be reachable
    home = Path(tempfile.mkdtemp(prefix="kg-celery-"))
    home.chmod(0o755)
    env = {
        "KG_HOME": str(home),
        "DAGSTER_HOME": str(home / "dagster"),
        "KG_LAKE": str(home / "lake"),
        "KG_CATALOG": str(home / "catalog.duckdb"),
        "KG_PUBMED_SOURCE": str(mirror),
    }
    from kg_platform.cli import main
    from kg_platform.orchestration.state import load_deployment

    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        for key in ("KG_EXECUTOR", "KG_CELERY_BROKER", "KG_CELERY_BACKEND", "KG_GPU_QUEUE"):
            mp.delenv(key, raising=False)
        assert main(["workers", "start", *start_args]) == 0
        recorded = load_deployment(home)
        try:
            yield home, dict(os.environ), recorded
        finally:
            assert main(["workers", "stop"]) == 0
            assert main(["workers", "status"]) == 1
    assert not any(p.alive() for p in recorded.processes)
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def deployment():
    """Two workers, one per queue: `dagster` and `parse`."""
    from kg_platform.cli import main

    with workers("--workers", "2", "--queues", "dagster", "--queues", "parse") as running:
        assert main(["workers", "status"]) == 0
        yield running


def materialize(env: dict[str, str], select: str, partition: str) -> subprocess.Popen:
    """What an operator types: Dagster's own CLI, out of process, on the instance of
    DAGSTER_HOME and the executor of the definitions (celery, from the running deployment)."""
    args = [sys.executable, "-m", "dagster", "asset", "materialize"]
    args += ["-m", "kg_platform.definitions", "--select", select, "--partition", partition]
    return subprocess.Popen(
        args, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def finish(proc: subprocess.Popen, timeout: float = 300) -> None:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-4000:]


def steps_by_worker(instance: dg.DagsterInstance, run_id: str) -> dict[str, str]:
    """step key -> the Celery worker that ran it, from dagster-celery's engine event."""
    found = {}
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        metadata = entry.dagster_event.event_specific_data.metadata
        if "Celery worker" in metadata:
            found[entry.step_key] = metadata["Celery worker"].value
    return found


def step_pids(instance: dg.DagsterInstance, run_id: str) -> dict[str, int]:
    return {
        e.step_key: e.dagster_event.pid
        for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)
    }


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def in_process_lake(tmp_path: Path, mirror: Path) -> Path:
    """The reference: the same assets in process, on an ephemeral instance."""
    from kg_platform.assets.pubmed import corpus, pubmed_tables, pubmed_xml
    from kg_platform.resources.catalog import CatalogResource
    from kg_platform.resources.lake import LakeResource
    from kg_platform.resources.pubmed_source import PubmedSourceResource

    lake = tmp_path / "reference-lake"
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("pubmed_files", FILES)
    instance.add_dynamic_partitions("pubmed_releases", [RELEASE])
    resources = {
        "lake": LakeResource(root=str(lake)),
        "catalog": CatalogResource(database=str(tmp_path / "reference.duckdb")),
        "pubmed_source": PubmedSourceResource(base=str(mirror)),
    }
    for selection, partition in [([pubmed_xml, pubmed_tables], f) for f in FILES] + [
        ([corpus], RELEASE)
    ]:
        result = dg.materialize(
            [pubmed_xml, pubmed_tables, corpus],
            selection=selection,
            partition_key=partition,
            instance=instance,
            resources=resources,
        )
        assert result.success
    return lake


def test_partitioned_build_runs_on_the_celery_workers(deployment, tmp_path) -> None:
    from dagster_postgres import PostgresRunStorage

    home, env, recorded = deployment
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        instance.add_dynamic_partitions("pubmed_files", FILES)
        instance.add_dynamic_partitions("pubmed_releases", [RELEASE])

        # both files at once: two runs, each orchestrating its steps on the workers
        for proc in [materialize(env, "pubmed_xml,pubmed_tables", f) for f in FILES]:
            finish(proc)
        finish(materialize(env, "corpus", RELEASE))

        runs = {r.tags["dagster/partition"]: r for r in instance.get_runs()}
        assert sorted(runs) == sorted([*FILES, RELEASE])
        assert {r.status for r in runs.values()} == {dg.DagsterRunStatus.SUCCESS}

        # each step on the worker its queue names; none in the run's own process
        for file in FILES:
            assert steps_by_worker(instance, runs[file].run_id) == {
                "pubmed_xml": PARSE_WORKER,
                "pubmed_tables": PARSE_WORKER,
            }
        assert steps_by_worker(instance, runs[RELEASE].run_id) == {"corpus": DEFAULT_WORKER}
        pids = {p for r in runs.values() for p in step_pids(instance, r.run_id).values()}
        worker_pids = {p.pid for p in recorded.workers}
        assert len(pids) == 5 and not pids & worker_pids  # one fresh worker child per step

        # the materialisations are in Postgres, one per partition
        for asset, partitions in [("pubmed_tables", FILES), ("corpus", [RELEASE])]:
            for partition in partitions:
                records = instance.fetch_materializations(
                    dg.AssetRecordsFilter(
                        asset_key=dg.AssetKey(asset), asset_partitions=[partition]
                    ),
                    limit=5,
                ).records
                assert [r.run_id for r in records] == [runs[partition].run_id]

    lake = home / "lake"
    for file in FILES:
        assert pq.read_table(lake / f"tables/articles/{file}.parquet").num_rows == 30
    assert pq.read_table(lake / "tables/deletions/pubmed26n1335.parquet").num_rows == 6
    assert pq.read_table(lake / "tables/citations/pubmed26n1335.parquet").num_rows == 1063

    # byte for byte what an in-process build writes
    reference = in_process_lake(tmp_path, require_reference("pubmed", "mirror"))
    written = sorted(p.relative_to(lake) for p in lake.rglob("*.parquet"))
    assert written == sorted(p.relative_to(reference) for p in reference.rglob("*.parquet"))
    assert len(written) == 7 * len(FILES) + len(TABLES)
    for key in written:
        assert sha256(lake / key) == sha256(reference / key), key


def test_ncbi_pool_holds_a_download_back_across_processes(deployment) -> None:
    """All 4 `ncbi` slots held by another process: the download waits, in Postgres, until
    they are freed; then it runs on a worker."""
    home, env, _ = deployment
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        instance.add_dynamic_partitions("pubmed_files", FILES)
        storage = instance.event_log_storage
        # `kg workers start` created both pools, before any run could race to
        assert storage.get_concurrency_info("ncbi").slot_count == 4
        assert storage.get_concurrency_info("gpu").slot_count == 1
        for i in range(4):
            assert storage.claim_concurrency_slot("ncbi", "holder", f"download_{i}").is_claimed

        before = {r.run_id for r in instance.get_runs()}
        proc = materialize(env, "pubmed_xml", FILES[0])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            info = storage.get_concurrency_info("ncbi")
            if info.pending_step_count:
                break
            time.sleep(0.5)
        time.sleep(3)
        info = storage.get_concurrency_info("ncbi")
        (run_id,) = {r.run_id for r in instance.get_runs()} - before
        assert info.pending_run_ids == {run_id}
        assert not step_pids(instance, run_id), "pubmed_xml started while the pool was full"

        freed = time.time()
        storage.free_concurrency_slots_for_run("holder")
        finish(proc)
        (start,) = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)
        assert start.timestamp > freed
        assert steps_by_worker(instance, run_id) == {"pubmed_xml": PARSE_WORKER}
        assert storage.get_concurrency_info("ncbi").active_slot_count == 0


def test_a_killed_worker_fails_its_step_and_the_run_reexecutes_from_failure() -> None:
    """The worker running a step is killed outright (its parent and child processes): the
    run fails at that step instead of waiting for ever, and re-executing it from failure
    runs the step on the other worker."""
    from kg_platform.orchestration.executor import PING_EVERY_S, PINGS_MISSED

    job_file = str(Path(__file__).with_name("slow_job.py"))
    with workers("--workers", "2") as (home, env, recorded):
        args = [sys.executable, "-m", "dagster", "job", "execute", "-f", job_file, "-j", "slow_job"]
        proc = subprocess.Popen(
            args,
            env=env,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        pid_file = home / "slow_step.pid"
        deadline = time.monotonic() + 120
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        step_pid = int(pid_file.read_text())
        parent = int(Path(f"/proc/{step_pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        (killed,) = [w for w in recorded.workers if w.pid == parent]
        os.killpg(killed.pid, signal.SIGKILL)
        killed_at = time.monotonic()

        out, _ = proc.communicate(timeout=PING_EVERY_S * (PINGS_MISSED + 3) + 30)
        assert proc.returncode != 0
        assert f"celery worker {killed.name} stopped answering" in out
        assert time.monotonic() - killed_at < PING_EVERY_S * (PINGS_MISSED + 3)

        (home / "slow_step.release").touch()
        with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
            (failed,) = instance.get_runs()
            assert failed.status == dg.DagsterRunStatus.FAILURE
            recon = ReconstructableJob.for_file(job_file, "slow_job")
            result = dg.execute_job(
                recon,
                instance,
                reexecution_options=dg.ReexecutionOptions.from_failure(failed.run_id, instance),
            )
            assert result.success
            (survivor,) = [w.name for w in recorded.workers if w is not killed]
            assert steps_by_worker(instance, result.run_id) == {"slow_step": survivor}
