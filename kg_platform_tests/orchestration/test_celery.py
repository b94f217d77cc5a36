"""The same definitions on dagster-celery's executor, with the real parts: `kg workers start`
brings up Redis, Postgres and three Celery worker processes (kg-worker-1 on the `dagster`
queue, kg-worker-2 and kg-worker-3 on `parse`), with an S3 lake on a moto server configured
through the environment. `kg build` of the reference mirror runs through the Postgres-backed
instance, both files in one run's step; the worker running it is killed outright after the
first file was recorded; re-executing the backfill from failure (what the UI's *Re-execute →
From failure* does) redoes only the file not yet recorded and the fold, and the S3 lake then
holds exactly what an in-process build of the same sources writes. The `ncbi`
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

from kg_platform_tests.conftest import REPO_ROOT, materialised_partitions, require_reference
from kg_platform_tests.storage.lake_content import content, lake_keys

pytestmark = pytest.mark.slow

FILES = ["pubmed26n1334", "pubmed26n1335"]
RELEASE = "pubmed26"
HOST = socket.gethostname()
DEFAULT_WORKER = f"kg-worker-1@{HOST}"  # queue dagster
PARSE_WORKERS = [f"kg-worker-2@{HOST}", f"kg-worker-3@{HOST}"]  # queue parse: one is lost
QUEUES = {DEFAULT_WORKER: {"dagster"}, **{w: {"parse"} for w in PARSE_WORKERS}}
# the step's queue (its `dagster-celery/queue` tag)
STEP_QUEUE = {"pubmed_file_batch": "parse", "corpus": "dagster"}
BATCH = "pubmed_file_batch"  # the step that downloads and parses a range of files
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
    """`kg workers start --workers 3 --queues dagster --queues parse --queues parse` in a
    fresh KG home, with AWS_* pointing at the S3 server and a fresh bucket; stopped (and checked
    stopped) after the module. The lake is what `kg build --lake` records."""
    import boto3

    from kg_platform.cli import main
    from kg_platform.settings.workers import load_deployment

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
        # the workers' parse pools as `kg workers start` sizes them (the suite's conftest
        # sets KG_PARSE_WORKERS=1 for the builds it runs in process)
        mp.delenv("KG_PARSE_WORKERS", raising=False)
        start = ["workers", "start", "--workers", "3", "--queues", "dagster"]
        assert main([*start, "--queues", "parse", "--queues", "parse"]) == 0
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
    """(step key, partition or partition range) of each event of ``kind`` in ``runs``."""
    from kg_platform.orchestration.runs import partition_label

    return {
        (e.step_key, partition_label(run.tags))
        for run in runs
        for e in instance.all_logs(run.run_id, of_type=kind)
    }


def in_process_lake(tmp_path: Path, mirror: Path) -> Path:
    """The reference: the same assets in process, on an ephemeral instance, into a folder."""
    from kg_platform.assets.pubmed import corpus, pubmed_file_batch
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
    for selection, partition in [(["pubmed_xml", "pubmed_tables"], f) for f in FILES] + [
        ([corpus], RELEASE)
    ]:
        result = dg.materialize(
            [pubmed_file_batch, corpus],
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


def batch_run(instance: dg.DagsterInstance):
    """The build's run over both files, once it exists."""
    for run in instance.get_runs(
        dg.RunsFilter(tags={"dagster/asset_partition_range_start": FILES[0]})
    ):
        return run
    return None


def worker_running(instance: dg.DagsterInstance, run, recorded) -> str | None:
    """The worker whose child runs the batch step of ``run`` now (its STEP_START's pid)."""
    pid = step_pids(instance, run.run_id).get(BATCH)
    if pid is None:
        return None
    parent = parent_pid(pid)
    return next(w.name for w in recorded.workers if w.pid == parent)


def recorded_by(instance: dg.DagsterInstance, asset: str, partition: str) -> str | None:
    """The run of the latest materialisation of ``asset[partition]``."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1
    ).records
    return records[0].run_id if records else None


def kill_batch_worker_after_first_file(s3_server: HoldingS3, build, instance, recorded):
    """Let the first raw file's PUT through and hold the second's; once the first file's
    tables are recorded, SIGKILL the worker running the step (parent and child) and fail the
    held PUT. Returns (the worker, the run, when killed)."""
    deadline = time.monotonic() + 240
    held = []
    while len(held) < 2 and time.monotonic() < deadline:
        try:
            held.append(s3_server.held.get(timeout=1))
        except queue.Empty:
            assert build.poll() is None, build.communicate()[0][-4000:]
            continue
        if len(held) == 1:
            held[0].forward = True
            held[0].decided.set()
    assert [Path(h.path).name for h in held] == [
        "pubmed26n1334.xml.gz",
        "pubmed26n1335.xml.gz",
    ], held
    run = batch_run(instance)
    while recorded_by(instance, "pubmed_tables", FILES[0]) != run.run_id:
        assert time.monotonic() < deadline, "the first file was never recorded"
        time.sleep(0.1)
    worker = worker_running(instance, run, recorded)
    assert worker in PARSE_WORKERS, worker
    (process,) = [w for w in recorded.workers if w.name == worker]
    os.killpg(process.pid, signal.SIGKILL)
    killed_at = time.time()
    held[1].decided.set()  # fail it: a killed writer's object never reaches S3
    return worker, run, killed_at


def test_reference_build_on_celery_into_s3_survives_a_killed_worker(
    deployment, s3_server, tmp_path
) -> None:
    """Runs first: the lake must not hold the raw files yet (a fetched file is not put
    again). The kill takes kg-worker-2 away for the rest of the module."""
    from dagster_graphql.test.utils import execute_dagster_graphql
    from dagster_postgres import PostgresRunStorage

    from kg_platform.orchestration import backfill, runs
    from kg_platform.orchestration.executor import PING_EVERY_S, PINGS_MISSED
    from kg_platform.storage.corpus import corpus_rows
    from kg_platform.storage.lake import Lake

    home, env, recorded, lake_url = deployment
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        before = {b.backfill_id for b in instance.get_backfills()}
        s3_server.arm()
        try:
            build = kg_build(env, lake_url)
            killed_worker, run, killed_at = kill_batch_worker_after_first_file(
                s3_server, build, instance, recorded
            )
        finally:
            s3_server.disarm()
        # the reference, in process into a folder, while the run waits out the lost worker
        reference = in_process_lake(tmp_path, require_reference("pubmed", "mirror"))
        out, _ = build.communicate(timeout=300)
        assert build.returncode == 1, out[-4000:]
        label = f"pubmed_tables+pubmed_xml [{FILES[0]}..{FILES[1]}]"
        assert f"{label}: failure" in out, out[-4000:]
        assert "1 file recorded, 1 failed" in out, out[-4000:]

        # the build: the killed step failed within the pings' allowance; the first file stays
        # recorded by it, the second and the fold were not
        (backfill_id,) = {b.backfill_id for b in instance.get_backfills()} - before
        first = [r.dagster_run for r in backfill.backfill_runs(instance, backfill_id)]
        assert [(r.run_id, r.status) for r in first] == [(run.run_id, dg.DagsterRunStatus.FAILURE)]
        line, error = runs.run_failure(instance, run.run_id)
        assert f"celery worker {killed_worker} stopped answering while running it" in error
        # the one line kg build prints names the lost step and worker, not the executor
        assert line.startswith(f"step {BATCH}: celery worker {killed_worker} stopped"), line
        assert f"  failed: pubmed_tables+pubmed_xml [{FILES[1]}]: {line}" in out, out[-4000:]
        failed_at = instance.get_run_record_by_id(run.run_id).end_time
        assert failed_at - killed_at < PING_EVERY_S * (PINGS_MISSED + 3)
        assert materialised_partitions(instance, first, "pubmed_xml") == {FILES[0]}
        assert materialised_partitions(instance, first, "pubmed_tables") == {FILES[0]}
        # the lost step gave its `ncbi` slot back (it writes no step event that would)
        assert instance.event_log_storage.get_concurrency_info("ncbi").active_slot_count == 0

        # Dagster's re-execution of the backfill from failure, as the UI launches it
        with backfill.workspace(instance, home / "logs" / "reexecute.log") as context:
            params = {"parentRunId": backfill_id, "strategy": "FROM_FAILURE"}
            launched = execute_dagster_graphql(
                context.create_request_context(), REEXECUTE_BACKFILL, {"params": params}
            ).data["reexecutePartitionBackfill"]
            assert launched["__typename"] == "LaunchBackfillSuccess", launched
            result = backfill.wait_for_backfill(
                instance, context, launched["backfillId"], lambda run: None
            )
        assert result.status == "COMPLETED_SUCCESS"
        second = [r.dagster_run for r in backfill.backfill_runs(instance, result.backfill_id)]
        assert {r.status for r in second} == {dg.DagsterRunStatus.SUCCESS}
        # it redid only what was not recorded: the second file's tables, and the fold
        assert materialised_partitions(instance, second, "pubmed_tables") == {FILES[1]}
        assert materialised_partitions(instance, second, "corpus") == {RELEASE}

        # every step ran on a worker of its queue, in a fresh child of that worker; the
        # killed worker ran nothing after
        worker_pids = {w.pid for w in recorded.workers}
        ran = {}
        for r in first + second:
            for step, worker in steps_by_worker(instance, r.run_id).items():
                ran[(step, r.run_id)] = worker
                assert STEP_QUEUE[step] in QUEUES[worker], (step, worker)
            assert not set(step_pids(instance, r.run_id).values()) & worker_pids
        assert ran[(BATCH, run.run_id)] == killed_worker
        assert killed_worker not in {w for (_, run_id), w in ran.items() if run_id != run.run_id}

        # the materialisations, in Postgres: each partition's latest from the run that made it
        (redo,) = [r for r in second if BATCH in steps_by_worker(instance, r.run_id)]
        (fold,) = [r for r in second if r.run_id != redo.run_id]
        assert recorded_by(instance, "pubmed_tables", FILES[0]) == run.run_id
        assert recorded_by(instance, "pubmed_tables", FILES[1]) == redo.run_id
        assert recorded_by(instance, "corpus", RELEASE) == fold.run_id

    # the S3 lake holds exactly what an in-process build into a folder holds
    lake = Lake(lake_url)
    reference = Lake(str(reference))
    on_s3 = content(lake)
    assert on_s3 == content(reference)
    # seven tables per file, the corpus's six in five parts each (the pair's PMIDs fall in
    # five buckets) and the fold's deletions (corpus/<release>/fold/)
    assert len(on_s3) == 7 * len(FILES) + 6 * 5 + 1
    assert "corpus/pubmed26/fold/deletions.parquet" in on_s3
    assert not any(k.startswith(".staging") for k in lake_keys(lake))
    for raw in ("baseline/pubmed26n1334.xml.gz", "updatefiles/pubmed26n1335.xml.gz"):
        assert lake.exists(f"raw/pubmed/26/{raw}")
    corpus = lake.scoped(release=RELEASE)
    assert corpus_rows(corpus, "articles") == 60
    assert corpus_rows(corpus, "citations") == 1349
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
        # a `parse` worker (the build above killed one of the two)
        assert steps_by_worker(instance, run_id)[BATCH] in PARSE_WORKERS
        assert storage.get_concurrency_info("ncbi").active_slot_count == 0


def test_an_instance_keeps_one_postgres_connection_per_storage(deployment) -> None:
    """The instance `kg workers start` writes pools its connections: once its run, event-log
    and schedule storage have each connected, 90 more queries open no new connection (no
    new Postgres backend). dagster-postgres alone opens one per query: 9,861 backends, 74
    CPU-s of Postgres, in a 64-file build."""
    import psycopg2

    from kg_platform.orchestration.services import MAX_CONNECTIONS

    home, _, recorded, _ = deployment
    watcher = psycopg2.connect(
        host=recorded.host,
        port=recorded.postgres_port,
        user=recorded.postgres_user,
        dbname="postgres",
    )
    watcher.autocommit = True

    def query(sql: str):
        with watcher.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchone()[0]

    def sessions() -> int:
        """Sessions opened on the dagster database so far, once the count stops moving."""
        sql = "SELECT sessions FROM pg_stat_database WHERE datname = 'dagster'"
        last, deadline = query(sql), time.monotonic() + 5
        while time.monotonic() < deadline:
            time.sleep(0.5)
            if (now := query(sql)) == last:
                return now
            last = now
        return last

    def each_storage(instance) -> None:
        instance.get_runs(limit=1)
        instance.event_log_storage.get_concurrency_keys()
        instance.all_instigator_state()

    try:
        since = query("SELECT now()")
        with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
            each_storage(instance)
            before = sessions()
            for _ in range(30):
                each_storage(instance)
            during = sessions() - before
            kept = query(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = 'dagster' "
                f"AND backend_start >= '{since.isoformat()}'"
            )
        assert (during, kept) == (0, 3)
        # room for a connection kept per storage by every process of a large deployment
        assert query("SHOW max_connections") == str(MAX_CONNECTIONS)
    finally:
        watcher.close()
