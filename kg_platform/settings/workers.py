"""What `kg workers start` brought up on this machine, recorded in `<home>/workers/state.json`
so that `status` and `stop`, the Dagster definitions (which executor, which broker) and the
instance's dagster.yaml all read the same facts."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kg_platform.settings.local import process_started_at, write_text_atomically

# Celery queues: `dagster` is dagster-celery's default, `parse` takes the per-file parses,
# `gpu` the embedding steps, and is served only by workers on a machine with a GPU
DEFAULT_QUEUE = "dagster"
PARSE_QUEUE = "parse"
GPU_QUEUE = "gpu"


def workers_dir(home: Path) -> Path:
    return home / "workers"


def state_file(home: Path) -> Path:
    return workers_dir(home) / "state.json"


@dataclass(frozen=True)
class Process:
    """One process of the deployment: `redis`, `postgres` or a Celery worker."""

    name: str
    pid: int
    log: str
    port: int = 0
    queues: tuple[str, ...] = ()

    def alive(self) -> bool:
        return pid_alive(self.pid)


@dataclass(frozen=True)
class Deployment:
    """A Redis broker, a Postgres database for the Dagster instance, and Celery workers."""

    host: str
    redis_port: int
    postgres_port: int
    postgres_user: str
    postgres_db: str
    postgres_data: str
    processes: tuple[Process, ...] = field(default_factory=tuple)

    @property
    def broker_url(self) -> str:
        return f"redis://{self.host}:{self.redis_port}/0"

    @property
    def backend_url(self) -> str:
        return f"redis://{self.host}:{self.redis_port}/1"

    @property
    def postgres_url(self) -> str:
        # SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3; dagster-postgres ships psycopg2
        return (
            f"postgresql+psycopg2://{self.postgres_user}@{self.host}:{self.postgres_port}"
            f"/{self.postgres_db}"
        )

    @property
    def workers(self) -> tuple[Process, ...]:
        return tuple(p for p in self.processes if p.name not in ("redis", "postgres"))

    def process(self, name: str) -> Process | None:
        return next((p for p in self.processes if p.name == name), None)

    def serves(self, queue: str) -> bool:
        return any(queue in w.queues for w in self.workers)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Deployment:
        raw = json.loads(text)
        processes = tuple(
            Process(**{**p, "queues": tuple(p.get("queues", ()))}) for p in raw.pop("processes")
        )
        return cls(**raw, processes=processes)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not yet reaped by its parent) is not running
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def process_alive(pid: int, started_at: float) -> bool:
    """``pid`` still runs the process that started at ``started_at``: alive, and not a later
    process given the same pid (one that started after it, with a second's slack for the
    clock-tick rounding of /proc)."""
    if not pid_alive(pid):
        return False
    now_started = process_started_at(pid)
    return now_started is None or now_started <= started_at + 1.0


def load_deployment(home: Path) -> Deployment | None:
    path = state_file(home)
    if not path.exists():
        return None
    try:
        return Deployment.from_json(path.read_text())
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{path}: not a workers state file ({exc}); remove it") from exc


def save_deployment(home: Path, deployment: Deployment) -> None:
    write_text_atomically(state_file(home), deployment.to_json())


def remove_deployment(home: Path) -> None:
    state_file(home).unlink(missing_ok=True)
