"""`kg build`'s code server: Dagster's own (`dagster api grpc`, started and watched by
Dagster's workspace as usual), except that it starts each run's process as a fork of a
process that has imported dagster, the run worker's storage and the code location already.

Dagster's code server starts every run in a *spawned* interpreter (a `spawn` context is
hard-coded in its `DagsterApiServer`), which imports dagster and the definitions again
before the run's first event: seconds of every run launch on a busy machine. Here the
server takes a `forkserver` context instead, whose server process is started as this code
server starts (beside its own load of the definitions) and preloads PRELOAD and the
modules given with `--preload`. A run's process is still Dagster's (its `_run_in_subprocess`,
its events, its cancellation), reports its own pid as before ("Started process for run"),
and its definitions are the code location's, read with this build's settings and
environment (the forkserver inherits both from this server).

Invoked through the script `code_server_script` writes (Dagster starts a code server as
`<executable> -m dagster api grpc ...`): `python -m kg_platform.orchestration.code_server
[--preload MODULE ...] -m dagster api grpc ...`. Anything else is passed to dagster's CLI."""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import shlex
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

# what a run's process needs before its first event, besides the code location: dagster's
# run entry point and the instance's storage (SQLite's, on kept engines, or under `kg workers`
# the pooled Postgres storage its dagster.yaml names, which imports dagster_postgres)
PRELOAD = (
    "dagster._grpc.impl",
    "dagster._core.storage.sqlite_storage",
    "dagster._core.storage.runs.sqlite.sqlite_run_storage",
    "dagster._core.storage.event_log.sqlite.sqlite_event_log",
    "dagster._core.storage.event_log.sqlite.consolidated_sqlite_event_log",
    "dagster._core.storage.schedules.sqlite.sqlite_schedule_storage",
    "kg_platform.orchestration.sqlite_storage",
    "kg_platform.orchestration.pooled_postgres",
)
SCRIPT = "kg-code-server"
MODULE = "kg_platform.orchestration.code_server"


def split_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the modules named by leading `--preload` options, dagster's CLI arguments, without
    the `-m dagster` Dagster puts before them)."""
    args, preload = list(argv), []
    while len(args) >= 2 and args[0] == "--preload":
        preload.append(args[1])
        args = args[2:]
    if args[:2] == ["-m", "dagster"]:
        args = args[2:]
    return preload, args


def forking_api_server():
    """Dagster's DagsterApiServer, starting its runs' processes from the forkserver."""
    from dagster._grpc.server import DagsterApiServer

    class ForkingApiServer(DagsterApiServer):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self._mp_ctx = multiprocessing.get_context("forkserver")

    return ForkingApiServer


def start_forkserver(modules: Sequence[str]) -> threading.Thread:
    """The forkserver, importing ``modules``, started now in a thread (so its imports run
    beside the code server's own load) rather than at the first run."""
    multiprocessing.set_forkserver_preload(list(modules))
    thread = threading.Thread(
        target=multiprocessing.forkserver.ensure_running, name="kg-forkserver", daemon=True
    )
    thread.start()
    return thread


def main(argv: Sequence[str]) -> int:
    preload, args = split_args(argv)
    if args[:2] == ["api", "grpc"]:
        import dagster._grpc.server as server

        start_forkserver([*PRELOAD, *preload])
        # dagster's grpc command imports the class from its module when it runs
        server.DagsterApiServer = forking_api_server()
    from dagster._cli import cli

    return cli.main(args=args, prog_name="dagster")


def code_server_script(
    folder: Path,
    preload: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
) -> Path:
    """An executable that Dagster's workspace runs as the code location's Python (it adds
    `-m dagster api grpc ...`): this module, in this interpreter, preloading ``preload``,
    with ``env`` on top of the environment it is started with and its output (the runs'
    too) appended to ``log``. Written in ``folder`` (the instance's home, where one build
    runs at a time), replaced only when it would change."""
    command = [sys.executable, "-m", MODULE]
    command += [word for module in preload for word in ("--preload", module)]
    lines = [
        "#!/bin/sh",
        "# kg build's Dagster code server (kg_platform/orchestration/code_server.py)",
    ]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in (env or {}).items()]
    output = f" >>{shlex.quote(str(log))} 2>&1" if log is not None else ""
    lines.append(f'exec {shlex.join(command)} "$@"{output}')
    text = "\n".join(lines) + "\n"
    path = folder / SCRIPT
    try:
        current = path.read_text()
    except OSError:
        current = None
    if current != text or not os.access(path, os.X_OK):
        folder.mkdir(parents=True, exist_ok=True)
        staged = folder / f".{SCRIPT}.{os.getpid()}"
        staged.write_text(text)
        staged.chmod(0o755)
        os.replace(staged, path)
    return path


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
