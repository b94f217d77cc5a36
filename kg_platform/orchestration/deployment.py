"""The local Celery deployment as one unit: start Redis, Postgres and N workers, record
them, point the Dagster instance at Postgres; stop them all and point it back."""

from __future__ import annotations

import glob
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kg_platform.orchestration import services
from kg_platform.orchestration.instance import initialize_pools, write_instance_yaml
from kg_platform.settings import usable_cores
from kg_platform.settings.workers import (
    DEFAULT_QUEUE,
    GPU_QUEUE,
    PARSE_QUEUE,
    Deployment,
    Process,
    load_deployment,
    remove_deployment,
    save_deployment,
    workers_dir,
)

DEFAULT_QUEUES = (DEFAULT_QUEUE, PARSE_QUEUE)


# the device nodes a GPU that torch can use shows: NVIDIA's driver (/dev/nvidia0, ...) and
# AMD's ROCm (/dev/kfd), which torch also reports through torch.cuda
GPU_DEVICE_NODES = ("/dev/nvidia[0-9]*", "/dev/kfd")


def gpu_present() -> bool:
    """Whether torch sees a GPU. Without a GPU device node it cannot, and torch is not
    imported (~1.5-4.5 s, most of a `kg build` with nothing to do); with one, torch is asked."""
    if not any(glob.glob(pattern) for pattern in GPU_DEVICE_NODES):
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def worker_queues(
    n_workers: int, queue_lists: Sequence[Sequence[str]] = (), gpu: bool = False
) -> list[tuple[str, ...]]:
    """The queues of each of `n_workers` workers: the given lists in turn (cycled), or
    DEFAULT_QUEUES for all; `gpu` is added to every worker when this machine has one and
    removed otherwise, so a GPU step never lands where no GPU is."""
    if n_workers < 1:
        raise ValueError(f"--workers {n_workers}: at least one worker is needed")
    lists = [tuple(q) for q in queue_lists] or [DEFAULT_QUEUES]
    result = []
    for i in range(n_workers):
        queues = [q for q in lists[i % len(lists)] if q and q != GPU_QUEUE]
        if gpu:
            queues.append(GPU_QUEUE)
        if not queues:
            raise ValueError(
                f"worker {i + 1}: no queue to listen on ({list(lists[i % len(lists)])})"
            )
        result.append(tuple(dict.fromkeys(queues)))
    return result


def parse_workers_per_step(n_workers: int, concurrency: int, cores: int | None = None) -> int:
    """The processes a step of a local worker parses its files with: its share of the
    machine's cores among the steps its workers run at once, plus one, at most the cores
    (a Celery child, daemonic, would otherwise parse a batch on one core however many the
    worker has). The one more fills what the other steps leave idle (a step's set-up, its
    last file, a worker with no step left): its pool's processes are forks of the preloaded
    step process (kg_platform.pubmed.tables.pool_start_method), which cost no start-up."""
    cores = cores or usable_cores()
    return min(cores, cores // max(1, n_workers * concurrency) + 1)


@dataclass(frozen=True)
class Health:
    process: Process
    running: bool


def health(deployment: Deployment) -> list[Health]:
    return [Health(p, p.alive()) for p in deployment.processes]


def start(
    home: Path,
    dagster_home: Path,
    n_workers: int = 2,
    queue_lists: Sequence[Sequence[str]] = (),
    concurrency: int = 1,
    redis_port: int = 0,
    postgres_port: int = 0,
    gpu: bool | None = None,
    env: dict[str, str] | None = None,
) -> Deployment:
    """Bring up the deployment of `home`; refuse if one is running, clean up a dead one."""
    existing = load_deployment(home)
    if existing is not None:
        if any(h.running for h in health(existing)):
            raise ValueError(
                f"{home / 'workers'}: a deployment is running already "
                "(`kg workers status`; `kg workers stop` first)"
            )
        remove_deployment(home)
    missing = services.missing_binaries()
    if missing:
        raise services.ServiceError(
            f"not installed: {', '.join(missing)} (apt-get install -y {' '.join(missing)})"
        )
    queues = worker_queues(n_workers, queue_lists, gpu_present() if gpu is None else gpu)
    folder = workers_dir(home)
    folder.mkdir(parents=True, exist_ok=True)
    deployment = Deployment(
        host=services.HOST,
        redis_port=redis_port or services.free_port(),
        postgres_port=postgres_port or services.free_port(),
        postgres_user=services.POSTGRES_USER,
        postgres_db=services.POSTGRES_DB,
        postgres_data=str(folder / "postgres" / "data"),
    )
    started: list[Process] = []
    try:
        started.append(services.start_redis(folder / "redis", deployment.redis_port))
        save_deployment(home, replace(deployment, processes=tuple(started)))
        started.append(services.start_postgres(folder / "postgres", deployment.postgres_port))
        save_deployment(home, replace(deployment, processes=tuple(started)))
        # the instance every worker, run and the UI reads: Postgres from here on
        write_instance_yaml(dagster_home, deployment)
        initialize_pools(dagster_home)
        config_dir = services.write_celery_config(
            folder / "celery", deployment.broker_url, deployment.backend_url
        )
        worker_env = dict(os.environ if env is None else env)
        worker_env["KG_HOME"] = str(home)
        worker_env["DAGSTER_HOME"] = str(dagster_home)
        worker_env.setdefault(
            "KG_PARSE_WORKERS", str(parse_workers_per_step(len(queues), concurrency))
        )
        hostname = socket.gethostname()
        spawned = []
        for i, worker_queue in enumerate(queues, start=1):
            name = f"kg-worker-{i}@{hostname}"
            log = folder / f"worker-{i}.log"
            spawned.append(
                services.spawn_worker(name, worker_queue, config_dir, log, worker_env, concurrency)
            )
            started.append(spawned[-1][0])
        save_deployment(home, replace(deployment, processes=tuple(started)))
        services.wait_for_workers(spawned, deployment.broker_url)
    except BaseException:
        _stop_all(started)
        remove_deployment(home)
        write_instance_yaml(dagster_home, None)
        raise
    return replace(deployment, processes=tuple(started))


def _stop_all(processes: Sequence[Process], timeout: float = 30) -> list[str]:
    """Workers first (a warm shutdown lets a running step finish, up to `timeout`), then
    Postgres (SIGINT: fast shutdown), then Redis. Returns the names that had to be killed."""
    import signal

    order = [p for p in processes if p.name not in ("redis", "postgres")]
    order += [p for p in processes if p.name == "postgres"]
    order += [p for p in processes if p.name == "redis"]
    killed = []
    for process in order:
        sig = signal.SIGINT if process.name == "postgres" else signal.SIGTERM
        if services.stop_process(process, sig, timeout):
            killed.append(process.name)
    return killed


def stop(
    home: Path, dagster_home: Path, timeout: float = 30
) -> tuple[Deployment | None, list[str]]:
    """Stop every process of the deployment of `home` and put the instance back on its
    default storage. Returns what was recorded and the names that had to be killed."""
    deployment = load_deployment(home)
    if deployment is None:
        return None, []
    killed = _stop_all(deployment.processes, timeout)
    remove_deployment(home)
    write_instance_yaml(dagster_home, None)
    return deployment, killed
