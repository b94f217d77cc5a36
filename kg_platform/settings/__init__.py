"""Where the platform's state lives, shared by the CLI, the Dagster definitions and the UI.

What `kg workers start` brought up is recorded beside them (settings/workers.py): the
executor and the broker follow it.

Precedence: environment variable, then what the last `kg build` recorded in
`<home>/sources.json`, then the embedded default (a local lake under `.kg/`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kg_platform.settings import local
from kg_platform.settings.local import kg_home, write_text_atomically
from kg_platform.settings.workers import load_deployment

NLM_PUBMED_URL = "https://ftp.ncbi.nlm.nih.gov/pubmed/"
NLM_MESH_URL = "https://nlmpubs.nlm.nih.gov/projects/mesh/MESH_FILES/xmlmesh/"
# the checkout: its dagster.yaml is the instance's template; ../shared/data the reference data
REPOSITORY = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Settings:
    home: Path
    lake: str
    catalog: str
    dagster_home: Path
    pubmed_source: str
    mesh_source: str
    # `multiprocess` (one machine) or `celery` (steps on the workers of `kg workers start`,
    # or of KG_CELERY_BROKER); the default follows a running `kg workers` deployment
    executor: str = "multiprocess"
    celery_broker: str = ""
    celery_backend: str = ""
    # a local reader folder (KG_READER) that answers `kg ask` and the demo's examples; ""
    reader: str = ""

    @classmethod
    def load(cls) -> Settings:
        home = kg_home()
        recorded: dict[str, str] = {}
        sources_file = home / "sources.json"
        if sources_file.exists():
            recorded = json.loads(sources_file.read_text())

        def pick(env: str, key: str, default: str) -> str:
            return os.environ.get(env) or recorded.get(key) or default

        deployment = running_deployment(home)
        broker = os.environ.get("KG_CELERY_BROKER") or (deployment.broker_url if deployment else "")
        return cls(
            home=home,
            lake=pick("KG_LAKE", "lake", str(home / "lake")),
            catalog=pick("KG_CATALOG", "catalog", str(home / "catalog.duckdb")),
            dagster_home=Path(os.environ.get("DAGSTER_HOME") or home / "dagster"),
            pubmed_source=pick("KG_PUBMED_SOURCE", "pubmed_source", NLM_PUBMED_URL),
            mesh_source=pick("KG_MESH_SOURCE", "mesh_source", NLM_MESH_URL),
            executor=os.environ.get("KG_EXECUTOR") or ("celery" if deployment else "multiprocess"),
            celery_broker=broker,
            celery_backend=os.environ.get("KG_CELERY_BACKEND")
            or (deployment.backend_url if deployment else broker),
            reader=reader_folder(),
        )

    def environment(self) -> dict[str, str]:
        """The variables `load` reads first, set to this choice of lake and sources."""
        return {
            "KG_LAKE": self.lake,
            "KG_CATALOG": self.catalog,
            "KG_PUBMED_SOURCE": self.pubmed_source,
            "KG_MESH_SOURCE": self.mesh_source,
        }

    def record(self) -> None:
        """Remember the sources and lake so `make ui` shows and runs the same platform."""
        self.home.mkdir(parents=True, exist_ok=True)
        payload = {
            "lake": self.lake,
            "catalog": self.catalog,
            "pubmed_source": self.pubmed_source,
            "mesh_source": self.mesh_source,
        }
        write_text_atomically(self.home / "sources.json", json.dumps(payload, indent=2) + "\n")


def running_deployment(home: Path):
    """The `kg workers` deployment of `home` while its broker runs, else None."""
    deployment = load_deployment(home)
    redis = deployment.process("redis") if deployment else None
    return deployment if redis is not None and redis.alive() else None


def reader_folder() -> str:
    """The reader folder `kg ask` and `kg build`'s examples use without `--reader`:
    KG_READER, or "" (no reader: the question path stops at evidence)."""
    return os.environ.get("KG_READER", "").strip()


# what a process of a build reads of its own environment (the code server, the daemon and
# each run agree on these; `kg build` and `kg workers start` set some for their children)
FILES_PER_RUN_ENV = "KG_FILES_PER_RUN"
PARSE_WORKERS_ENV = "KG_PARSE_WORKERS"
FOLD_MEMORY_LIMIT_ENV = "KG_FOLD_MEMORY_LIMIT"
DEFAULT_FOLD_MEMORY_LIMIT = "4GB"
FULL_FOLD_ENV = "KG_FOLD_FULL"
GPU_QUEUE_ENV = "KG_GPU_QUEUE"


def s3_storage_options_from_env() -> dict[str, Any]:
    """s3fs options from the environment: endpoint (AWS_ENDPOINT_URL or KG_S3_ENDPOINT_URL)
    and region (AWS_REGION, else AWS_DEFAULT_REGION as botocore reads it). Credentials
    (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY) are left to botocore, so they never appear in
    the options, the settings or a run's config."""
    endpoint = os.environ.get("KG_S3_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL")
    client_kwargs: dict[str, Any] = {}
    if endpoint:
        client_kwargs["endpoint_url"] = endpoint
    if os.environ.get("AWS_REGION"):
        client_kwargs["region_name"] = os.environ["AWS_REGION"]
    return {"client_kwargs": client_kwargs} if client_kwargs else {}


def whole_number(variable: str) -> int | None:
    """A variable that counts something: None when unset or blank; a ValueError naming the
    variable and its value when it is not a whole number of at least 1."""
    value = os.environ.get(variable, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{variable}={value!r}: must be a whole number of at least 1")
    return int(value)


def fold_memory_limit() -> str:
    """DuckDB's memory limit for the fold and the graph's recount (KG_FOLD_MEMORY_LIMIT)."""
    return os.environ.get(FOLD_MEMORY_LIMIT_ENV) or DEFAULT_FOLD_MEMORY_LIMIT


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (``taskset``, a container's
    cpuset), else every core. Polars and Arrow size their pools by it; DuckDB sizes its
    threads by the machine's cores whatever the affinity, so the fold, its checks and the
    profile set DuckDB's ``threads`` to this (two threads on one core only take turns)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity on this platform (macOS)
        return os.cpu_count() or 1


def full_fold_forced() -> bool:
    """KG_FOLD_FULL=1: fold the whole release even where an incremental fold would do."""
    return os.environ.get(FULL_FOLD_ENV) == "1"


def gpu_queue_forced() -> bool | None:
    """KG_GPU_QUEUE=1/0 when set (a cluster says whether a worker serves `gpu`), else None."""
    forced = os.environ.get(GPU_QUEUE_ENV)
    return None if forced is None else forced.strip().lower() in ("1", "true", "yes")


def reference_data_dir() -> Path:
    """The read-only reference data (PubMedQA, HotpotQA, ...) used by evaluation assets."""
    return Path(
        os.environ.get("KG_REFERENCE_DATA") or REPOSITORY.parent / "shared" / "data"
    ).absolute()


def home_hint(error: Exception) -> str:
    """For something missing from the home's lake (a `kg` command run outside the checkout
    that built it): which home was used, and how to choose another; "" for anything else."""
    settings = Settings.load()
    if not isinstance(error, FileNotFoundError) or not str(error).startswith(settings.lake):
        return ""
    if "KG_HOME" in os.environ:
        how = "from KG_HOME"
    elif settings.home.is_dir():
        how = "the nearest .kg folder"
    else:
        how = f"no .kg folder here, above here or in the checkout {local.CHECKOUT}"
    return (
        f"\n  (home {settings.home}: {how}; build one with `kg build`, or set KG_HOME to "
        "the .kg folder of a build, e.g. `export KG_HOME=/path/to/kg-platform/.kg`)"
    )
