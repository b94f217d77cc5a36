"""Which Celery queue a step goes to (the `dagster-celery/queue` op tag; the multiprocess
executor ignores it): per-file parses to `parse`, embeddings to `gpu`, everything else to
dagster-celery's default `dagster`. Whether `gpu` is served is asked as each step is
submitted (``submit_queue``), not when the definitions are imported: a code server loaded
before `kg workers start` added a GPU worker would otherwise keep its old answer."""

from __future__ import annotations

from kg_platform.settings.workers import DEFAULT_QUEUE, GPU_QUEUE, PARSE_QUEUE

QUEUE_TAG = "dagster-celery/queue"


def queue_tags(queue: str) -> dict[str, str]:
    return {QUEUE_TAG: queue}


def parse_queue_tags() -> dict[str, str]:
    return queue_tags(PARSE_QUEUE)


def gpu_served() -> bool:
    """KG_GPU_QUEUE=1/0 when set (a cluster says so), else whether a worker of the local
    deployment listens on `gpu` (`kg workers start` adds it only where torch sees a GPU)."""
    from kg_platform.settings import gpu_queue_forced, kg_home, running_deployment

    forced = gpu_queue_forced()
    if forced is not None:
        return forced

    deployment = running_deployment(kg_home())
    return deployment is not None and deployment.serves(GPU_QUEUE)


def embedding_queue_tags() -> dict[str, str]:
    return queue_tags(GPU_QUEUE)


def submit_queue(queue: str) -> str:
    """The queue a step tagged ``queue`` is sent to now. A step sent to a queue nobody
    serves would wait forever: without a GPU worker, `gpu` steps run with everything else."""
    return DEFAULT_QUEUE if queue == GPU_QUEUE and not gpu_served() else queue
