"""What stands between `kg serve`'s application and the network and the operating system:
the HTTP protocol with a deadline for each request's head, and the supervisor of the
worker processes, which restarts a dead worker with a back-off and records why it died.

A client that opens a connection and sends its request line and headers slowly (or never)
holds a connection and little else, but a thousand of them hold a thousand: each request's
head must arrive within ``TimedHttp.read_timeout`` seconds of its first byte (or of the
connection, for the first), else 408 and the connection is closed. The body has the same
deadline, enforced where it is read (``app.read_json_body``); between requests
uvicorn's keep-alive timeout closes an idle connection.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections import deque
from socket import socket

from uvicorn.config import STARTUP_FAILURE, Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.supervisors.multiprocess import Multiprocess, Process

# seconds a client has for a request's head, and again for its body (`kg serve --read-timeout`)
READ_TIMEOUT_S = 10.0


class TimedHttp(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol (httptools) with a deadline for each request's head."""

    read_timeout = READ_TIMEOUT_S  # set by the worker from `kg serve --read-timeout`

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._arm_head()

    def _arm_head(self) -> None:
        self._cancel_head()
        self._head_timer = self.loop.call_later(self.read_timeout, self._head_expired)

    def _cancel_head(self) -> None:
        timer = getattr(self, "_head_timer", None)
        if timer is not None:
            timer.cancel()
            self._head_timer = None

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_head()

    def on_headers_complete(self) -> None:
        self._cancel_head()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head()
        super().connection_lost(exc)

    def _head_expired(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        body = json.dumps(
            {"error": f"request head not received within {self.read_timeout:g} s"}
        ).encode()
        self.transport.write(
            b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(body) + body
        )
        self.transport.close()
        client = self.client[0] if self.client else "-"
        line = (
            f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} kg serve [{os.getpid()}] "
            f"{client} - (head not received) 408 {self.read_timeout * 1000.0:.1f} ms\n"
        )
        os.write(2, line.encode("ascii", "backslashreplace"))


# a worker's death counts towards the back-off for this long; the back-off never exceeds
WINDOW_S = 60.0
MAX_BACKOFF_S = 60.0


def backoff_after(deaths: int) -> float:
    """Seconds before a dead worker is replaced, given the deaths within ``WINDOW_S`` (this
    one included): none for the first, then 1, 2, 4 .. ``MAX_BACKOFF_S``."""
    return 0.0 if deaths <= 1 else min(MAX_BACKOFF_S, 2.0 ** (deaths - 2))


def death_cause(exitcode: int | None) -> str:
    """How a worker process ended, in words."""
    if exitcode is None:
        return "did not answer the supervisor's health check"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"killed by {name}"
    return f"exited with code {exitcode}"


class WorkerRecord:
    """The supervisor's account of its workers, one small JSON file the workers read for
    /healthz: restarts, the last death and its cause, and the back-off now in force."""

    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, doc: dict) -> None:
        temporary = f"{self.path}.{os.getpid()}.tmp"
        with open(temporary, "w") as f:
            json.dump(doc, f)
        os.replace(temporary, self.path)

    def read(self) -> dict:
        try:
            with open(self.path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}


def bind_each(config: Config, workers: int) -> list[socket]:
    """The listening sockets of ``workers`` worker processes on ``config``'s host and port:
    with more than one, a socket per worker, each with SO_REUSEPORT, so the kernel spreads
    new connections over the workers (one shared socket lets whichever worker wakes first
    accept a whole burst of keep-alive connections: 16 clients then all land on one
    worker). One worker, or a platform without SO_REUSEPORT: uvicorn's one socket."""
    import socket as sockets

    if workers == 1 or not hasattr(sockets, "SO_REUSEPORT") or config.uds or config.fd:
        return [config.bind_socket()]
    family = sockets.AF_INET6 if config.host and ":" in config.host else sockets.AF_INET
    bound: list[socket] = []
    port = config.port
    try:
        for _ in range(workers):
            sock = sockets.socket(family, sockets.SOCK_STREAM, sockets.IPPROTO_TCP)
            bound.append(sock)
            sock.setsockopt(sockets.SOL_SOCKET, sockets.SO_REUSEADDR, 1)
            sock.setsockopt(sockets.SOL_SOCKET, sockets.SO_REUSEPORT, 1)
            sock.bind((config.host, port))
            port = sock.getsockname()[1]  # --port 0: the others bind the port the first got
            sock.set_inheritable(True)
    except OSError as error:
        for sock in bound:
            sock.close()
        print(f"kg serve: cannot bind {config.host}:{config.port}: {error}", file=sys.stderr)
        sys.exit(STARTUP_FAILURE)
    return bound


class Supervisor(Multiprocess):
    """uvicorn's supervisor, restarting a dead worker after a back-off that doubles with each
    death inside a minute (0 s for the first, then 1, 2, 4 .. 60 s), so a worker that dies
    again at once never crash-loops; each death is logged with its cause and written to the
    ``WorkerRecord`` the surviving workers report in /healthz."""

    def __init__(self, config: Config, sockets: list[socket], record: WorkerRecord) -> None:
        super().__init__(config, sockets)
        # one listening socket per worker (``bind_each``): each worker, and its replacement,
        # accepts on its own; else every worker accepts on all of them
        self.own = len(sockets) == self.processes_num > 1
        self.record = record
        self.deaths: deque[float] = deque()
        self.restarts = 0
        self.last_death: dict | None = None
        self.waiting: dict[int, float] = {}  # worker slot -> when its replacement starts
        self._write(None)

    def _write(self, backoff: float | None) -> None:
        self.record.write(
            {
                "restarts": self.restarts,
                "last_death": self.last_death,
                "backoff_s": backoff,
                "workers": self.processes_num,
            }
        )

    def _sockets_of(self, idx: int) -> list[socket]:
        return [self.sockets[idx]] if self.own else self.sockets

    def init_processes(self) -> None:
        for idx in range(self.processes_num):
            process = Process(self.config, self._sockets_of(idx))
            process.start()
            self.processes.append(process)

    def backoff(self, now: float) -> float:
        while self.deaths and now - self.deaths[0] > WINDOW_S:
            self.deaths.popleft()
        return backoff_after(len(self.deaths))

    def keep_subprocess_alive(self) -> None:
        if self.should_exit.is_set():
            return
        now = time.monotonic()
        for idx in list(self.waiting):
            if now >= self.waiting[idx]:
                del self.waiting[idx]
                replacement = Process(self.config, self._sockets_of(idx))
                replacement.start()
                self.processes[idx] = replacement
                self.restarts += 1
                self._write(None)
        # the dead first (no waiting on anyone), then a health check of the living, whose
        # answer can take a while from a worker still warming up
        for hung in (False, True):
            for idx, process in enumerate(self.processes):
                if idx in self.waiting or self.should_exit.is_set():
                    continue
                if hung:
                    if process.is_alive(timeout=self.config.timeout_worker_healthcheck):
                        continue
                elif process.process.is_alive():
                    continue
                self._replace(idx, process, now, hung)

    def _replace(self, idx: int, process: Process, now: float, hung: bool) -> None:
        process.kill()
        process.join()
        if self.should_exit.is_set():
            return
        if process.exitcode == STARTUP_FAILURE:  # the application cannot start at all
            print(f"kg serve: worker {process.pid} could not start; stopping", file=sys.stderr)
            self.should_exit.set()
            return
        cause = (
            f"did not answer the health check within {self.config.timeout_worker_healthcheck} s"
            if hung
            else death_cause(process.exitcode)
        )
        self.deaths.append(now)
        delay = self.backoff(now)
        self.last_death = {
            "pid": process.pid,
            "cause": cause,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        self.waiting[idx] = now + delay
        self._write(delay)
        print(
            f"kg serve: worker {process.pid} {cause}; starting another in {delay:g} s "
            f"({len(self.deaths)} death(s) in the last minute)",
            file=sys.stderr,
            flush=True,
        )
