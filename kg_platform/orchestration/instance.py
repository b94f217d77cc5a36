"""The Dagster instance's dagster.yaml: the repository's template (pools, run queue, run
monitoring), plus Postgres run, event-log and schedule storage while a Celery deployment is
up, so the webserver, the daemon, the CLI and every worker share one run and event history
and one set of pool slots."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from kg_platform.orchestration.state import Deployment

TEMPLATE = Path(__file__).resolve().parents[2] / "dagster.yaml"
# NLM throttles heavy clients: at most 4 downloads at once, across every run and worker
NCBI_POOL_LIMIT = 4
HEADER = (
    "# Written by `kg workers start` from the repository's dagster.yaml, with Postgres\n"
    "# storage; `kg build` leaves it as it is, `kg workers stop` puts the template back.\n"
)


def template_config(template: Path = TEMPLATE) -> dict[str, Any]:
    if not template.exists():
        return {}
    return yaml.safe_load(template.read_text()) or {}


def instance_config(
    deployment: Deployment | None, template: dict[str, Any] | None = None
) -> dict[str, Any]:
    """dagster.yaml as a dict: the template with the pool default pinned to the ncbi limit,
    and Postgres storage when `deployment` is given."""
    config = copy.deepcopy(template_config() if template is None else template)
    pools = config.setdefault("concurrency", {}).setdefault("pools", {})
    pools["default_limit"] = NCBI_POOL_LIMIT
    if deployment is None:
        config.pop("storage", None)
    else:
        # one `storage` block covers run, event-log and schedule storage
        config["storage"] = {"postgres": {"postgres_url": deployment.postgres_url}}
    return config


def write_instance_yaml(dagster_home: Path, deployment: Deployment | None) -> Path:
    """Write `<dagster_home>/dagster.yaml` atomically and return its path: Postgres storage
    for `deployment`, else the repository's template as it is (which `kg build` and `make ui`
    then treat as their own again)."""
    dagster_home.mkdir(parents=True, exist_ok=True)
    path = dagster_home / "dagster.yaml"
    if deployment is None and TEMPLATE.exists():
        text = TEMPLATE.read_text()
    else:
        text = HEADER + yaml.safe_dump(instance_config(deployment), sort_keys=False)
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


# the pools the assets declare: `ncbi` follows dagster.yaml's default, `gpu` holds one step
GPU_POOL_LIMIT = 1


def initialize_pools(dagster_home: Path) -> None:
    """Create the pools' rows before any run claims a slot. Two runs initialising a pool at
    the same moment on Postgres collide in dagster 1.13 (a unique-key error aborts the
    transaction, and the step fails); one process doing it first leaves nothing to race."""
    import dagster as dg

    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        storage = instance.event_log_storage
        if "ncbi" not in storage.get_concurrency_keys():
            storage.initialize_concurrency_limit_to_default("ncbi")
        storage.set_concurrency_slots("gpu", GPU_POOL_LIMIT)
