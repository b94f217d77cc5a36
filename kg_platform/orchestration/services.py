"""Start and stop the local Celery deployment's processes: Debian's `redis-server` as the
broker, a Postgres cluster (Debian's `postgresql`) holding the Dagster instance, and Celery
worker processes running dagster-celery's tasks. Each process runs in its own session, so
`stop` can end it with everything it forked."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from kg_platform.settings.workers import Process, pid_alive

HOST = "127.0.0.1"
POSTGRES_USER = "kg"
POSTGRES_DB = "dagster"
MAX_CONNECTIONS = 400
# prefork children start from a parent that imported dagster and the assets already
WORKER_PRELOAD = "kg_platform.assets.preload"


class ServiceError(RuntimeError):
    """A process of the deployment would not start; the message names it and its log."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def find_binary(name: str) -> str | None:
    """`name` on PATH, else in Debian's versioned PostgreSQL folder (newest first)."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return candidates[0] if candidates else None


def missing_binaries() -> list[str]:
    """The server programs this deployment needs that are not installed, by apt package."""
    wanted = {"redis-server": "redis-server", "initdb": "postgresql", "postgres": "postgresql"}
    return sorted({package for binary, package in wanted.items() if not find_binary(binary)})


def tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _spawn(
    args: Sequence[str],
    log: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    user: str | None = None,
) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(
            list(args),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            user=user,
            start_new_session=True,
        )


def _wait_until(ready, proc: subprocess.Popen, what: str, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServiceError(f"{what} exited with {proc.returncode}; {log}:\n{tail(log)}")
        try:
            if ready():
                return
        except Exception:  # not accepting connections yet
            pass
        time.sleep(0.2)
    raise ServiceError(f"{what} not ready after {timeout:.0f} s; {log}:\n{tail(log)}")


# --- Redis ---------------------------------------------------------------------------------


def start_redis(folder: Path, port: int, timeout: float = 30) -> Process:
    binary = find_binary("redis-server")
    if binary is None:
        raise ServiceError("redis-server: not installed (apt-get install -y redis-server)")
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "redis.log"
    # a broker holds only queued tasks and results: nothing to persist across restarts
    args = [binary, "--bind", HOST, "--port", str(port), "--dir", str(folder), "--save", ""]
    args += ["--appendonly", "no", "--daemonize", "no"]
    proc = _spawn(args, log)

    def ready() -> bool:
        import redis

        return bool(redis.Redis(host=HOST, port=port, socket_timeout=1).ping())

    _wait_until(ready, proc, f"redis-server on port {port}", log, timeout)
    return Process(name="redis", pid=proc.pid, log=str(log), port=port)


# --- Postgres ------------------------------------------------------------------------------


def postgres_os_user() -> str | None:
    """initdb and postgres refuse to run as root: as root, run them as `postgres` (Debian's
    package creates it) or `nobody`; otherwise as ourselves (None)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise ServiceError("running as root and no `postgres` or `nobody` user to run Postgres as")


def _check_reachable(folder: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    for parent in [folder, *folder.parents]:
        if not parent.exists():
            continue
        st = parent.stat()
        mode = st.st_mode
        if st.st_uid == entry.pw_uid:
            continue
        if not mode & 0o001:
            raise ServiceError(
                f"{folder}: {parent} is not reachable by user {user}, who runs Postgres "
                "(it refuses to run as root); set KG_HOME to a folder whose parents "
                "others can enter (chmod o+x), or run kg as another user"
            )


def _init_cluster(data: Path, user: str | None) -> None:
    initdb = find_binary("initdb")
    if initdb is None:
        raise ServiceError("initdb: not installed (apt-get install -y postgresql)")
    data.mkdir(parents=True, exist_ok=True)
    data.chmod(0o700)
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(data, entry.pw_uid, entry.pw_gid)
    log = data.parent / "initdb.log"
    args = [initdb, "-D", str(data), "-U", POSTGRES_USER, "--auth=trust", "--encoding=UTF8"]
    with open(log, "wb") as out:
        done = subprocess.run(
            args, stdout=out, stderr=subprocess.STDOUT, user=user, cwd=data, check=False
        )
    if done.returncode != 0:
        raise ServiceError(f"initdb {data} failed ({done.returncode}); {log}:\n{tail(log)}")


def _connect(port: int, db: str = "postgres"):
    import psycopg2

    return psycopg2.connect(host=HOST, port=port, user=POSTGRES_USER, dbname=db, connect_timeout=2)


def start_postgres(folder: Path, port: int, timeout: float = 60) -> Process:
    """A Postgres cluster under `folder/data` (created on first start, kept across stops:
    it is the run history) serving database `dagster` on HOST:port."""
    postgres = find_binary("postgres")
    if postgres is None:
        raise ServiceError("postgres: not installed (apt-get install -y postgresql)")
    user = postgres_os_user()
    folder.mkdir(parents=True, exist_ok=True)
    if user is not None:
        _check_reachable(folder, user)
    data = folder / "data"
    if not (data / "PG_VERSION").exists():
        _init_cluster(data, user)
    log = folder / "postgres.log"
    if user is not None and log.exists():
        os.chown(log, pwd.getpwnam(user).pw_uid, -1)
    args = [postgres, "-D", str(data), "-p", str(port), "-c", f"listen_addresses={HOST}"]
    args += ["-c", f"unix_socket_directories={data}"]
    # every process that opens the instance keeps a connection per storage open (and more
    # while its threads query at once: orchestration/pooled_postgres): room for the runs,
    # the workers' steps, the daemon and the UI of a large machine's deployment
    args += ["-c", f"max_connections={MAX_CONNECTIONS}"]
    proc = _spawn(args, log, cwd=data, user=user)
    _wait_until(lambda: _connect(port).close() is None, proc, f"postgres on {port}", log, timeout)
    conn = _connect(port)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (POSTGRES_DB,))
            if cur.fetchone() is None:
                cur.execute(f"CREATE DATABASE {POSTGRES_DB}")
    finally:
        conn.close()
    return Process(name="postgres", pid=proc.pid, log=str(log), port=port)


# --- Celery workers ------------------------------------------------------------------------


def write_celery_config(folder: Path, broker_url: str, backend_url: str) -> Path:
    """`dagster_celery_config.py`, which dagster_celery.app reads from the path: the broker
    and result backend every worker and the executor share."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "dagster_celery_config.py"
    path.write_text(
        f"broker_url = {broker_url!r}\n"
        f"result_backend = {backend_url!r}\n"
        "worker_prefetch_multiplier = 1\n"
        # a worker takes a step only when it has a free process to run it: with early
        # acknowledgement it would otherwise hold one more, not started, and a worker killed
        # outright would take that step with it (never started, so never reported lost: its
        # run would wait for ever), while another worker stood idle
        "worker_disable_prefetch = True\n"
        # a new child per step: memory of a big parse is returned, and each step loads the
        # definitions (and kg settings) afresh; the preloaded parent keeps that cheap
        "worker_max_tasks_per_child = 1\n"
        # a started step names its worker, so the run can tell when that worker is gone
        "task_track_started = True\n"
    )
    return folder


def spawn_worker(
    name: str,
    queues: Sequence[str],
    config_dir: Path,
    log: Path,
    env: dict[str, str],
    concurrency: int = 1,
) -> tuple[Process, subprocess.Popen]:
    """Start one Celery worker running dagster-celery's tasks; see wait_for_workers."""
    if not 0 < len(queues) <= 4:
        raise ValueError(f"{name}: a worker listens on 1 to 4 queues, got {list(queues)}")
    worker_env = dict(env)
    worker_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(config_dir), env.get("PYTHONPATH", "")) if p
    )
    args = [sys.executable, "-m", "celery", "-A", "dagster_celery.app", "worker"]
    args += ["-n", name, "-Q", ",".join(queues), "--concurrency", str(concurrency)]
    # a worker takes a task only when it has a free process: without --disable-prefetch a busy
    # worker reserves the next step too (early acks free its prefetch slot) while another
    # worker idles, so two batches of files ran one after the other on one worker
    args += ["--prefetch-multiplier", "1", "--disable-prefetch"]
    args += ["-I", WORKER_PRELOAD, "--loglevel", "INFO"]
    args += ["--without-gossip", "--without-mingle"]
    proc = _spawn(args, log, env=worker_env)
    return Process(name=name, pid=proc.pid, log=str(log), queues=tuple(queues)), proc


def wait_for_workers(
    workers: Sequence[tuple[Process, subprocess.Popen]], broker_url: str, timeout: float = 120
) -> None:
    """Until every worker answers a ping through the broker (it consumes its queues then)."""
    from celery import Celery

    app = Celery(broker=broker_url)
    try:
        for process, proc in workers:
            _wait_until(
                lambda name=process.name: bool(app.control.ping(destination=[name], timeout=0.5)),
                proc,
                f"celery worker {process.name}",
                Path(process.log),
                timeout,
            )
    finally:
        app.close()


# --- stopping ------------------------------------------------------------------------------


def stop_process(process: Process, sig: int = signal.SIGTERM, timeout: float = 30) -> bool:
    """Signal `process`, wait up to `timeout`, then kill its session. True if it had to be
    killed."""
    if not process.alive():
        return False
    try:
        os.kill(process.pid, sig)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(process.pid):
            _reap(process.pid)
            return False
        _reap(process.pid)
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pid_alive(process.pid) and time.monotonic() < deadline:
        _reap(process.pid)
        time.sleep(0.05)
    _reap(process.pid)
    return True


def _reap(pid: int) -> None:
    # our own child (started by this process, as in the tests) is reaped here; others are not
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
