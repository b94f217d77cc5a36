"""The Dagster instance's dagster.yaml: the repository's template (pools, run queue, run
monitoring), plus Postgres run, event-log and schedule storage while a Celery deployment is
up, so the webserver, the daemon, the CLI and every worker share one run and event history
and one set of pool slots."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import yaml

from kg_platform.settings import REPOSITORY, Settings
from kg_platform.settings.local import write_text_atomically
from kg_platform.settings.workers import Deployment

TEMPLATE = REPOSITORY / "dagster.yaml"
# the pools the assets declare. NLM throttles heavy clients: at most 4 downloads at once,
# across every run and worker (`ncbi` follows dagster.yaml's default); `gpu` holds one step
NCBI_POOL, NCBI_POOL_LIMIT = "ncbi", 4
GPU_POOL, GPU_POOL_LIMIT = "gpu", 1
HEADER = (
    "# Written by `kg workers start` from the repository's dagster.yaml, with Postgres\n"
    "# storage; `kg build` leaves it as it is, `kg workers stop` puts the template back.\n"
)
INSTANCE_MARK = "# kg build writes this file from the repository's dagster.yaml"


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
    config.pop("storage", None)
    if deployment is not None:
        # run, event-log and schedule storage on Postgres, each keeping its connection open
        # in every process (dagster-postgres alone opens one per query); imported here, as
        # dagster_postgres is, only where a deployment is
        from kg_platform.orchestration.pooled_postgres import storage_config

        config.update(storage_config(deployment.postgres_url))
    return config


def write_instance_yaml(
    dagster_home: Path, deployment: Deployment | None, max_concurrent_runs: int | None = None
) -> Path:
    """Write `<dagster_home>/dagster.yaml` atomically and return its path: Postgres storage
    for `deployment`; else the repository's template as it is, or, with
    ``max_concurrent_runs`` (`kg build`'s --jobs), the template under INSTANCE_MARK with the
    run queue's limit set. The one writer of the instance's dagster.yaml."""
    path = dagster_home / "dagster.yaml"
    if deployment is not None or not TEMPLATE.exists():
        text = HEADER + yaml.safe_dump(instance_config(deployment), sort_keys=False)
    elif max_concurrent_runs:
        limit = f"max_concurrent_runs: {max_concurrent_runs}"
        text = f"{INSTANCE_MARK}\n" + re.sub(
            r"max_concurrent_runs: \d+", limit, TEMPLATE.read_text()
        )
    else:
        text = TEMPLATE.read_text()
    if not path.exists() or path.read_text() != text:
        write_text_atomically(path, text)
    return path


def build_may_rewrite(path: Path) -> bool:
    """`kg build` rewrites dagster.yaml when it is absent, its own, or the template as `make
    ui` copies it; one written by someone else (`kg workers` for Postgres) stays as it is."""
    if not path.exists():
        return True
    current = path.read_text()
    return current.startswith(INSTANCE_MARK) or (
        TEMPLATE.exists() and current == TEMPLATE.read_text()
    )


def prepare_instance(settings: Settings, max_concurrent_runs: int | None = None):
    """The persistent instance under DAGSTER_HOME (default .kg/dagster) for a command that
    writes it (`kg build`, `kg eval ...`): its dagster.yaml (see write_instance_yaml) and the
    GPU pool's limit. DAGSTER_HOME is set for this process and what it starts."""
    import dagster as dg

    dagster_home = settings.dagster_home
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    path = dagster_home / "dagster.yaml"
    if build_may_rewrite(path):
        dagster_home.mkdir(parents=True, exist_ok=True)
        written = path.read_text() if path.exists() else ""
        keep_limit = re.search(r"max_concurrent_runs: (\d+)", written)
        # a command without --jobs keeps the limit the last build set
        limit = max_concurrent_runs or (
            int(keep_limit.group(1)) if keep_limit and written.startswith(INSTANCE_MARK) else None
        )
        write_instance_yaml(dagster_home, None, limit)
    instance = dg.DagsterInstance.get()
    storage = instance.event_log_storage
    if storage.get_concurrency_info(GPU_POOL).slot_count != GPU_POOL_LIMIT:
        storage.set_concurrency_slots(GPU_POOL, GPU_POOL_LIMIT)
    return instance


def open_instance(dagster_home: Path):
    """The instance under ``dagster_home`` for a command that only reads it (`kg status`):
    nothing is written, and None when there is none yet (no build has run)."""
    import dagster as dg

    if not (dagster_home / "dagster.yaml").exists():
        return None
    return dg.DagsterInstance.from_config(str(dagster_home))


def initialize_pools(dagster_home: Path) -> None:
    """Create the pools' rows before any run claims a slot. Two runs initialising a pool at
    the same moment on Postgres collide in dagster 1.13 (a unique-key error aborts the
    transaction, and the step fails); one process doing it first leaves nothing to race."""
    import dagster as dg

    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        storage = instance.event_log_storage
        if NCBI_POOL not in storage.get_concurrency_keys():
            storage.initialize_concurrency_limit_to_default(NCBI_POOL)
        storage.set_concurrency_slots(GPU_POOL, GPU_POOL_LIMIT)
