"""The same definitions on dagster-celery's executor, with the real parts: `kg workers start`
brings up Redis, Postgres and two Celery worker processes (kg-worker-1 on the `dagster` and
`parse` queues, kg-worker-2 on `parse` only), with an S3 lake on a moto server configured
through the environment. `kg build` of the reference mirror runs through the Postgres-backed
instance; one worker is killed outright mid-step; re-executing the backfill from failure
(what the UI's *Re-execute → From failure* does) redoes only what did not succeed, and the
S3 lake then holds exactly what an in-process build of the same sources writes. The `ncbi`
pool's slots, held in Postgres, hold a step back across processes."""

from __future__ import annotations

import logging
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from kg_platform_tests.conftest import REPO_ROOT, require_reference
from kg_platform_tests.storage.lake_content import content, lake_keys

pytestmark = pytest.mark.slow

FILES = ["pubmed26n1334", "pubmed26n1335"]
RELEASE = "pubmed26"
HOST = socket.gethostname()
DEFAULT_WORKER = f"kg-worker-1@{HOST}"  # queues dagster and parse
PARSE_WORKER = f"kg-worker-2@{HOST}"  # queue parse only: the one the build loses
QUEUES = {DEFAULT_WORKER: {"dagster", "parse"}, PARSE_WORKER: {"parse"}}
# the step's queue (its `dagster-celery/queue` tag)
STEP_QUEUE = {"pubmed_xml": "parse", "pubmed_tables": "parse", "corpus": "dagster"}
AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}
REEXECUTE_BACKFILL = """
mutation ($params: ReexecutionParams) {
  reexecutePartitionBackfill(reexecutionParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
  }
}
"""


def require_servers() -> None:
    from kg_platform.orchestration.services import missing_binaries

    missing = missing_binaries()
    if missing:
        message = f"not installed: {', '.join(missing)} (apt-get install -y {' '.join(missing)})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)


@dataclass
class Held:
    """One PUT request the S3 server has not answered yet."""

    path: str
    forward: bool = False
    decided: threading.Event = field(default_factory=threading.Event)


class HoldingS3:
    """A real S3 server (moto's, on 127.0.0.1) that, while armed, leaves each PUT of a raw
    PubMed file unanswered: the step writing it is mid-step, in its worker, for as long as
    the test needs. A held PUT is then failed (the object never reaches the server: its
    writer was killed) or passed on to moto."""

    def __init__(self) -> None:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per S3 request
        self._moto = DomainDispatcherApplication(create_backend_app)
        self._lock = threading.Lock()
        self._armed = False
        self._pending: list[Held] = []
        self.held: queue.Queue[Held] = queue.Queue()
        self._server = make_server(
            "127.0.0.1", 0, self, threaded=True, request_handler=MotoRequestHandler
        )
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if environ["REQUEST_METHOD"] == "PUT" and "/raw/pubmed/" in path:
            with self._lock:
                held = Held(path) if self._armed else None
                if held is not None:
                    self._pending.append(held)
            if held is not None:
                self.held.put(held)
                held.decided.wait(timeout=600)
                if not held.forward:
                    start_response("503 Service Unavailable", [("Content-Length", "0")])
                    return [b""]
        return self._moto(environ, start_response)

    def arm(self) -> None:
        with self._lock:
            self._armed = True

    def disarm(self) -> None:
        """Answer nothing more by holding: every PUT still held goes on to moto."""
        with self._lock:
            self._armed = False
            for held in self._pending:
                if not held.decided.is_set():
                    held.forward = True
                    held.decided.set()

    def stop(self) -> None:
        self.disarm()
        self._server.shutdown()
        self._thread.join()


@pytest.fixture(scope="module")
def s3_server():
    server = HoldingS3()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def deployment(s3_server):
    """`kg workers start --workers 2 --queues dagster,parse --queues parse` in a fresh KG
    home, with AWS_* pointing at the S3 server and a fresh bucket; stopped (and checked
    stopped) after the module. The lake is what `kg build --lake` records."""
    import boto3

    from kg_platform.cli import main
    from kg_platform.orchestration.state import load_deployment

    require_servers()
    mirror = require_reference("pubmed", "mirror")
    # Postgres runs as an unprivileged user when we are root: its folder must be reachable
    home = Path(tempfile.mkdtemp(prefix="kg-celery-"))
    home.chmod(0o755)
    bucket = f"lake-{uuid.uuid4().hex[:12]}"
    env = {
        **AWS,
        "AWS_ENDPOINT_URL": s3_server.endpoint,
        "KG_HOME": str(home),
        "DAGSTER_HOME": str(home / "dagster"),
        "KG_CATALOG": str(home / "catalog.duckdb"),
        "KG_PUBMED_SOURCE": str(mirror),
        "KG_MESH_SOURCE": str(require_reference("mesh", "tsv")),
    }
    keys = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
    s3 = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1", **keys)
    s3.create_bucket(Bucket=bucket)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        # the lake is what `kg build --lake` records; the executor follows the deployment
        for key in ("KG_LAKE", "KG_EXECUTOR", "KG_CELERY_BROKER", "KG_CELERY_BACKEND"):
            mp.delenv(key, raising=False)
        mp.delenv("KG_GPU_QUEUE", raising=False)
        start = ["workers", "start", "--workers", "2", "--queues", "dagster,parse"]
        assert main([*start, "--queues", "parse"]) == 0
        recorded = load_deployment(home)
        try:
            assert {w.name: set(w.queues) for w in recorded.workers} == QUEUES
            assert main(["workers", "status"]) == 0
            yield home, dict(os.environ), recorded, f"s3://{bucket}/kg"
        finally:
            assert main(["workers", "stop"]) == 0
            assert main(["workers", "status"]) == 1
    assert not any(p.alive() for p in recorded.processes)
    shutil.rmtree(home, ignore_errors=True)


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


def parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def steps(instance: dg.DagsterInstance, runs, kind: dg.DagsterEventType) -> set[tuple[str, str]]:
    """(step key, partition) of each event of ``kind`` in ``runs``."""
    return {
        (e.step_key, run.tags["dagster/partition"])
        for run in runs
        for e in instance.all_logs(run.run_id, of_type=kind)
    }


def in_process_lake(tmp_path: Path, mirror: Path) -> Path:
    """The reference: the same assets in process, on an ephemeral instance, into a folder."""
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


def kg_build(env: dict[str, str], lake: str) -> subprocess.Popen:
    """`kg build` of the reference mirror into ``lake``, out of process: its runs send their
    steps to the workers (the deployment runs). --force: the module's other tests may have
    materialised a partition on this instance already."""
    kg = str(Path(sys.executable).with_name("kg"))
    args = [kg, "build", "--lake", lake, "--select", "+key:corpus", "--jobs", "2", "--force"]
    return subprocess.Popen(
        args, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def worker_running(instance: dg.DagsterInstance, file: str, recorded) -> str | None:
    """The worker whose child runs `pubmed_xml` of ``file`` now (its STEP_START's pid)."""
    runs = instance.get_runs(dg.RunsFilter(tags={"dagster/partition": file}))
    for run in runs:
        pid = None if run.is_finished else step_pids(instance, run.run_id).get("pubmed_xml")
        if pid is not None:
            parent = parent_pid(pid)
            return next(w.name for w in recorded.workers if w.pid == parent)
    return None


def kill_parse_worker_mid_download(s3_server: HoldingS3, build, instance, recorded):
    """Hold each raw file's PUT until kg-worker-2 is the one writing it, then SIGKILL that
    worker (parent and child). A held kg-worker-1 cannot take the other file's download,
    so kg-worker-2, the only other `parse` worker, does. Returns (file, when killed)."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        try:
            held = s3_server.held.get(timeout=1)
        except queue.Empty:
            assert build.poll() is None, build.communicate()[0][-4000:]
            continue
        file = Path(held.path).name.removesuffix(".xml.gz")
        worker = None
        while worker is None and time.monotonic() < deadline:
            worker = worker_running(instance, file, recorded)
            time.sleep(0.1)
        if worker == PARSE_WORKER:
            (process,) = [w for w in recorded.workers if w.name == PARSE_WORKER]
            os.killpg(process.pid, signal.SIGKILL)
            killed_at = time.time()
            held.decided.set()  # fail it: a killed writer's object never reaches S3
            return file, killed_at
    raise AssertionError("kg-worker-2 never wrote a raw file")


def test_reference_build_on_celery_into_s3_survives_a_killed_worker(
    deployment, s3_server, tmp_path
) -> None:
    """Runs first: the lake must not hold the raw files yet (a fetched file is not put
    again). The kill takes kg-worker-2 away for the rest of the module."""
    from dagster_graphql.test.utils import execute_dagster_graphql
    from dagster_postgres import PostgresRunStorage

    from kg_platform.commands import build_run
    from kg_platform.orchestration.executor import PING_EVERY_S, PINGS_MISSED
    from kg_platform.storage.lake import Lake

    home, env, recorded, lake_url = deployment
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        before = {b.backfill_id for b in instance.get_backfills()}
        s3_server.arm()
        try:
            build = kg_build(env, lake_url)
            killed_file, killed_at = kill_parse_worker_mid_download(
                s3_server, build, instance, recorded
            )
        finally:
            s3_server.disarm()
        # the reference, in process into a folder, while the run waits out the lost worker
        reference = in_process_lake(tmp_path, require_reference("pubmed", "mirror"))
        out, _ = build.communicate(timeout=300)
        assert build.returncode == 1, out[-4000:]
        assert f"pubmed_tables+pubmed_xml [{killed_file}]: failure" in out, out[-4000:]
        (other_file,) = set(FILES) - {killed_file}

        # the build: the killed step failed within the pings' allowance; its file's tables
        # and the fold never started
        (backfill_id,) = {b.backfill_id for b in instance.get_backfills()} - before
        first = [r.dagster_run for r in build_run.backfill_runs(instance, backfill_id)]
        status = {r.tags["dagster/partition"]: r.status for r in first}
        assert status == {
            killed_file: dg.DagsterRunStatus.FAILURE,
            other_file: dg.DagsterRunStatus.SUCCESS,
        }
        (failed,) = [r for r in first if r.tags["dagster/partition"] == killed_file]
        line, error = build_run.run_failure(instance, failed.run_id)
        assert f"celery worker {PARSE_WORKER} stopped answering while running it" in error
        # the one line kg build prints names the lost step and worker, not the executor
        assert line.startswith(f"step pubmed_xml: celery worker {PARSE_WORKER} stopped"), line
        assert line in out, out[-4000:]
        failed_at = instance.get_run_record_by_id(failed.run_id).end_time
        assert failed_at - killed_at < PING_EVERY_S * (PINGS_MISSED + 3)
        # (the lost step has no step event of its own: the run's engine failed it)
        done = {("pubmed_xml", other_file), ("pubmed_tables", other_file)}
        assert steps(instance, first, dg.DagsterEventType.STEP_START) == {
            *done,
            ("pubmed_xml", killed_file),
        }
        assert steps(instance, first, dg.DagsterEventType.STEP_SUCCESS) == done
        # the lost download gave its `ncbi` slot back (it writes no step event that would)
        assert instance.event_log_storage.get_concurrency_info("ncbi").active_slot_count == 0

        # Dagster's re-execution of the backfill from failure, as the UI launches it
        with build_run.workspace(instance, home / "logs" / "reexecute.log") as context:
            params = {"parentRunId": backfill_id, "strategy": "FROM_FAILURE"}
            launched = execute_dagster_graphql(
                context.create_request_context(), REEXECUTE_BACKFILL, {"params": params}
            ).data["reexecutePartitionBackfill"]
            assert launched["__typename"] == "LaunchBackfillSuccess", launched
            result = build_run.wait_for_backfill(
                instance, context, launched["backfillId"], lambda run: None
            )
        assert result.status == "COMPLETED_SUCCESS"
        second = [r.dagster_run for r in build_run.backfill_runs(instance, result.backfill_id)]
        assert {r.status for r in second} == {dg.DagsterRunStatus.SUCCESS}
        # it redid only what did not succeed: the killed file's steps, and the fold
        redone = {("pubmed_xml", killed_file), ("pubmed_tables", killed_file), ("corpus", RELEASE)}
        assert steps(instance, second, dg.DagsterEventType.STEP_START) == redone
        assert steps(instance, second, dg.DagsterEventType.STEP_SUCCESS) == redone

        # every step ran on a worker of its queue, in a fresh child of that worker; kg-worker-2
        # ran the step it was killed in, and the survivor everything after
        worker_pids = {w.pid for w in recorded.workers}
        ran = {}
        for run in first + second:
            for step, worker in steps_by_worker(instance, run.run_id).items():
                ran[(step, run.tags["dagster/partition"], run.run_id)] = worker
                assert STEP_QUEUE[step] in QUEUES[worker], (step, worker)
            assert not set(step_pids(instance, run.run_id).values()) & worker_pids
        assert ran[("pubmed_xml", killed_file, failed.run_id)] == PARSE_WORKER
        assert {w for (*_, run_id), w in ran.items() if run_id in {r.run_id for r in second}} == {
            DEFAULT_WORKER
        }

        # the materialisations, in Postgres: each partition's latest from the run that made it
        made_by = {r.tags["dagster/partition"]: r.run_id for r in first + second if r.is_success}
        for asset, partitions in [("pubmed_tables", FILES), ("corpus", [RELEASE])]:
            for partition in partitions:
                (record,) = instance.fetch_materializations(
                    dg.AssetRecordsFilter(
                        asset_key=dg.AssetKey(asset), asset_partitions=[partition]
                    ),
                    limit=1,
                ).records
                assert record.run_id == made_by[partition], (asset, partition)

    # the S3 lake holds exactly what an in-process build into a folder holds
    lake = Lake(lake_url)
    reference = Lake(str(reference))
    on_s3 = content(lake)
    assert on_s3 == content(reference)
    assert len(on_s3) == 7 * len(FILES) + 6
    assert not any(k.startswith(".staging") for k in lake_keys(lake))
    for raw in ("baseline/pubmed26n1334.xml.gz", "updatefiles/pubmed26n1335.xml.gz"):
        assert lake.exists(f"raw/pubmed/26/{raw}")
    corpus = lake.scoped(release=RELEASE)
    assert pq.ParquetFile(corpus.open("corpus/articles.parquet")).metadata.num_rows == 60
    assert pq.ParquetFile(corpus.open("corpus/citations.parquet")).metadata.num_rows == 1349
    assert pq.read_table(lake.open("tables/deletions/pubmed26n1335.parquet")).num_rows == 6


def test_ncbi_pool_holds_a_download_back_across_processes(deployment) -> None:
    """All 4 `ncbi` slots held by another process: the download waits, in Postgres, until
    they are freed; then it runs on a worker."""
    home, env, _, _ = deployment
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
        # either `parse` worker (kg-worker-2 is gone once the build above killed it)
        assert steps_by_worker(instance, run_id)["pubmed_xml"] in (DEFAULT_WORKER, PARSE_WORKER)
        assert storage.get_concurrency_info("ncbi").active_slot_count == 0
