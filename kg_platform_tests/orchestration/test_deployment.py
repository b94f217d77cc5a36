"""The pieces of the Celery deployment that need no server: which worker serves which
queue, what dagster.yaml says, which executor the definitions get, the recorded state."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

from kg_platform.orchestration.deployment import parse_workers_per_step, worker_queues
from kg_platform.orchestration.executor import executor_for
from kg_platform.orchestration.instance import (
    GPU_POOL,
    GPU_POOL_LIMIT,
    NCBI_POOL,
    NCBI_POOL_LIMIT,
    TEMPLATE,
    initialize_pools,
    instance_config,
    template_config,
    write_instance_yaml,
)
from kg_platform.orchestration.queues import QUEUE_TAG, submit_queue
from kg_platform.orchestration.services import stop_process
from kg_platform.settings import Settings
from kg_platform.settings.workers import (
    Deployment,
    Process,
    load_deployment,
    save_deployment,
)
from kg_platform_tests.conftest import use_kg_home

STORAGES = ("run_storage", "event_log_storage", "schedule_storage")


def deployment_with(redis_pid: int, queues: tuple[str, ...] = ("dagster", "parse")) -> Deployment:
    return Deployment(
        host="127.0.0.1",
        redis_port=6390,
        postgres_port=5440,
        postgres_user="kg",
        postgres_db="dagster",
        postgres_data="/x/postgres/data",
        processes=(
            Process("redis", redis_pid, "/x/redis.log", port=6390),
            Process("postgres", 2, "/x/postgres.log", port=5440),
            Process("kg-worker-1@h", 3, "/x/worker-1.log", queues=queues),
        ),
    )


def test_worker_queues_default_cycle_and_gpu() -> None:
    assert worker_queues(2) == [("dagster", "parse"), ("dagster", "parse")]
    assert worker_queues(3, [["dagster"], ["parse"]]) == [("dagster",), ("parse",), ("dagster",)]
    # gpu only where a GPU is, on every worker of such a machine
    assert worker_queues(1, [["dagster", "gpu"]], gpu=False) == [("dagster",)]
    assert worker_queues(2, gpu=True) == [("dagster", "parse", "gpu")] * 2
    with pytest.raises(ValueError, match="at least one worker"):
        worker_queues(0)
    with pytest.raises(ValueError, match="no queue"):
        worker_queues(1, [["gpu"]], gpu=False)


def test_a_step_parses_on_its_share_of_the_cores_plus_one() -> None:
    """Each step a local worker runs takes its share of the cores among the steps running at
    once, plus one process that fills what the others leave idle, never more than the cores."""
    assert parse_workers_per_step(2, 1, cores=2) == 2  # 4 processes on 2 cores while both run
    assert parse_workers_per_step(1, 1, cores=8) == 8
    assert parse_workers_per_step(2, 1, cores=26) == 14
    assert parse_workers_per_step(4, 4, cores=26) == 2  # 16 steps: not 16 x 26 processes
    assert parse_workers_per_step(3, 1, cores=1) == 1


def test_instance_config_adds_postgres_and_pins_the_ncbi_limit() -> None:
    template = template_config()
    deployment = deployment_with(1)
    config = instance_config(deployment)
    url = "postgresql+psycopg2://kg@127.0.0.1:5440/dagster"
    module = "kg_platform.orchestration.pooled_postgres"
    assert {k: config[k] for k in STORAGES} == {
        "run_storage": {
            "module": module,
            "class": "PooledPostgresRunStorage",
            "config": {"postgres_url": url},
        },
        "event_log_storage": {
            "module": module,
            "class": "PooledPostgresEventLogStorage",
            "config": {"postgres_url": url},
        },
        "schedule_storage": {
            "module": module,
            "class": "PooledPostgresScheduleStorage",
            "config": {"postgres_url": url},
        },
    }
    assert config["concurrency"]["pools"]["default_limit"] == 4
    # everything else is the repository's template
    rest = {k: v for k, v in config.items() if k not in STORAGES}
    assert rest == template
    assert not set(STORAGES) & set(instance_config(None))


def test_instance_yaml_round_trip_and_back_to_the_template(tmp_path: Path) -> None:
    path = write_instance_yaml(tmp_path, deployment_with(1))
    written = yaml.safe_load(path.read_text())["event_log_storage"]["config"]
    assert written["postgres_url"].endswith("@127.0.0.1:5440/dagster")
    write_instance_yaml(tmp_path, None)
    assert path.read_text() == TEMPLATE.read_text()


def test_state_round_trip(tmp_path: Path) -> None:
    deployment = deployment_with(os.getpid())
    save_deployment(tmp_path, deployment)
    assert load_deployment(tmp_path) == deployment
    assert deployment.broker_url == "redis://127.0.0.1:6390/0"
    assert deployment.backend_url == "redis://127.0.0.1:6390/1"
    assert [w.name for w in deployment.workers] == ["kg-worker-1@h"]
    (tmp_path / "workers" / "state.json").write_text("{}")
    with pytest.raises(ValueError, match="state.json: not a workers state file"):
        load_deployment(tmp_path)


def test_executor_follows_a_running_deployment(tmp_path, monkeypatch) -> None:
    home = use_kg_home(monkeypatch, tmp_path / "kg")
    for var in ("KG_EXECUTOR", "KG_CELERY_BROKER", "KG_CELERY_BACKEND", "KG_GPU_QUEUE"):
        monkeypatch.delenv(var, raising=False)
    assert Settings.load().executor == "multiprocess"
    assert executor_for(Settings.load()) is dg.multiprocess_executor

    # a recorded deployment whose broker is alive (this process stands in for redis)
    save_deployment(home, deployment_with(os.getpid(), ("dagster", "gpu")))
    settings = Settings.load()
    assert (settings.executor, settings.celery_broker, settings.celery_backend) == (
        "celery",
        "redis://127.0.0.1:6390/0",
        "redis://127.0.0.1:6390/1",
    )
    celery = executor_for(settings)
    assert celery.name == "celery"
    assert [submit_queue(q) for q in ("gpu", "parse", "dagster")] == ["gpu", "parse", "dagster"]
    save_deployment(home, deployment_with(os.getpid(), ("dagster", "parse")))
    assert [submit_queue(q) for q in ("gpu", "parse")] == ["dagster", "parse"]  # nobody on gpu
    monkeypatch.setenv("KG_GPU_QUEUE", "1")  # a cluster says a GPU worker serves it
    assert submit_queue("gpu") == "gpu"
    monkeypatch.delenv("KG_GPU_QUEUE")
    monkeypatch.setenv("KG_EXECUTOR", "multiprocess")
    assert Settings.load().executor == "multiprocess"

    # a dead broker: the deployment is gone, back to one machine
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    monkeypatch.delenv("KG_EXECUTOR")
    save_deployment(home, deployment_with(dead.pid, ("dagster", "gpu")))
    assert Settings.load().executor == "multiprocess"
    assert submit_queue("gpu") == "dagster"


def test_celery_without_broker_and_unknown_executor_are_refused(tmp_path, monkeypatch) -> None:
    use_kg_home(monkeypatch, tmp_path / "kg")
    monkeypatch.delenv("KG_CELERY_BROKER", raising=False)
    monkeypatch.setenv("KG_EXECUTOR", "celery")
    with pytest.raises(ValueError, match="KG_EXECUTOR=celery: no broker"):
        executor_for(Settings.load())
    monkeypatch.setenv("KG_CELERY_BROKER", "redis://10.0.0.5:6379/0")
    settings = Settings.load()
    assert settings.celery_backend == "redis://10.0.0.5:6379/0"
    assert executor_for(settings).name == "celery"
    monkeypatch.setenv("KG_EXECUTOR", "dask")
    with pytest.raises(
        ValueError, match="KG_EXECUTOR='dask': expected one of multiprocess, celery"
    ):
        executor_for(Settings.load())


def test_asset_steps_carry_their_queue() -> None:
    from kg_platform.assets import embeddings, pubmed

    # one step downloads and parses a range of files (pubmed_xml and pubmed_tables)
    assert pubmed.pubmed_file_batch.op.tags[QUEUE_TAG] == "parse"
    assert QUEUE_TAG not in pubmed.corpus.op.tags
    # whatever serves `gpu` now: the executor routes a step as it submits it
    for asset in (embeddings.embedding_shards, embeddings.embedding_index):
        assert asset.op.tags[QUEUE_TAG] == "gpu"
    # the token files are made on CPU workers: the default queue, outside the GPU pool
    assert QUEUE_TAG not in embeddings.embedding_tokens.op.tags
    assert (embeddings.embedding_tokens.op.pool, embeddings.embedding_shards.op.pool) == (
        None,
        "gpu",
    )


def test_every_pool_the_assets_declare_is_initialised(tmp_path: Path) -> None:
    from kg_platform.definitions import defs

    assets = defs.resolve_asset_graph().assets_defs
    assert {a.op.pool for a in assets if a.is_executable} == {GPU_POOL, NCBI_POOL, None}
    write_instance_yaml(tmp_path, None)
    initialize_pools(tmp_path)
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        storage = instance.event_log_storage
        limits = {
            pool: storage.get_concurrency_info(pool).slot_count for pool in (GPU_POOL, NCBI_POOL)
        }
    assert limits == {GPU_POOL: GPU_POOL_LIMIT, NCBI_POOL: NCBI_POOL_LIMIT} == {"gpu": 1, "ncbi": 4}


def test_stop_process_kills_what_ignores_sigterm(tmp_path) -> None:
    script = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    time.sleep(0.5)
    process = Process("stubborn", proc.pid, str(tmp_path / "log"))
    assert stop_process(process, signal.SIGTERM, timeout=1) is True
    assert not process.alive()
    assert stop_process(process) is False  # gone already


# a fresh interpreter: whether gpu_present imported torch, then what torch itself says
GPU_PROBE = """
import glob, sys
from kg_platform.orchestration.deployment import GPU_DEVICE_NODES, gpu_present
present = gpu_present()
imported = "torch" in sys.modules
nodes = any(glob.glob(p) for p in GPU_DEVICE_NODES)
if nodes:
    import torch
# without a node no GPU can be used, whatever torch would say (its import is what is saved)
print(present, imported, nodes, nodes and torch.cuda.is_available())
"""


def test_gpu_present_answers_as_torch_and_imports_it_only_where_a_gpu_node_is() -> None:
    done = subprocess.run(
        [sys.executable, "-c", GPU_PROBE], capture_output=True, text=True, check=True
    )
    present, imported, nodes, available = done.stdout.split()
    assert present == available
    # without a device node torch is not loaded (a `kg build` with nothing to do paid 1.5-4.5
    # s for it); with one it is what answers
    assert imported == nodes
