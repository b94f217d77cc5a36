"""A real HTTP server on 127.0.0.1 standing in for NLM's download site in tests.

It serves a folder with NLM's layout (directory listings as Python's http.server writes
them), counts concurrent connections, and can be told to misbehave per path: throttle
(429/503), reset the connection, cut a body short, hold a body half sent, or serve corrupt
bytes.
"""

from __future__ import annotations

import http.server
import io
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path


@dataclass
class MirrorState:
    delay_s: float = 0.0
    active: int = 0
    max_active: int = 0
    requests: list[str] = field(default_factory=list)
    # path -> actions consumed one per request: an HTTP status ("429", "503"), "reset",
    # "truncate", "hold"
    faults: dict[str, list[str]] = field(default_factory=dict)
    # paths served with one byte flipped for as long as they are in the set
    corrupt: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # a "hold" action sends half the body, sets `holding`, and resets once `release` is set
    holding: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Counts a connection from accept until the server hands over the last byte of the
    response's headers.

    The client may let go of a connection as soon as that byte arrives (it raises on an
    error status without reading the body), and the server's own teardown after its last
    byte (flush, close, thread exit) lags behind the client, which may already have opened
    the next connection; counting any later would see connections the client no longer holds.
    """

    state: MirrorState

    def setup(self) -> None:
        super().setup()
        self._counted = True
        with self.state.lock:
            self.state.active += 1
            self.state.max_active = max(self.state.max_active, self.state.active)

    def _uncount(self) -> None:
        with self.state.lock:
            if self._counted:
                self._counted = False
                self.state.active -= 1

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self._uncount()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802
        with self.state.lock:
            self.state.requests.append(self.path)
            pending = self.state.faults.get(self.path)
            action = pending.pop(0) if pending else None
            corrupt = self.path in self.state.corrupt
        if self.state.delay_s:
            time.sleep(self.state.delay_s)
        if action == "reset":
            self._uncount()
            self._reset()
            return
        socket_out, self.wfile = self.wfile, io.BytesIO()
        try:
            if action is not None and action.isdigit():
                self.send_response(int(action))
                self.send_header("Retry-After", "0")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif action in ("truncate", "hold") or corrupt:
                body = Path(self.translate_path(self.path)).read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if corrupt:
                    body = body[:100] + bytes([body[100] ^ 0xFF]) + body[101:]
                self.wfile.write(body)
            else:
                super().do_GET()
            response = self.wfile.getvalue()
        finally:
            self.wfile = socket_out
        if action == "hold":
            socket_out.write(response[: len(response) // 2])
            socket_out.flush()
            self._uncount()
            self.state.holding.set()
            self.state.release.wait(timeout=900)
            self._reset()
            return
        if action == "truncate":
            socket_out.write(response[: len(response) // 2])
            socket_out.flush()
            self._uncount()
            self._reset()
            return
        # the client may close as soon as it has the headers (an error status is raised
        # before any body is read), so the count ends before their last byte
        head_end = response.find(b"\r\n\r\n") + 4 if b"\r\n\r\n" in response else len(response)
        socket_out.write(response[: head_end - 1])
        socket_out.flush()
        self._uncount()
        socket_out.write(response[head_end - 1 :])

    def _reset(self) -> None:
        # SO_LINGER 0 makes close() send RST: the client sees "connection reset by peer"
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def handle_error(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        pass  # resets we cause ourselves are expected


@contextmanager
def serve_mirror(root: Path | str, delay_s: float = 0.0) -> Iterator[tuple[str, MirrorState]]:
    """Serve ``root`` on 127.0.0.1 (a free port); yields (base URL, state)."""
    state = MirrorState(delay_s=delay_s)
    handler = type("MirrorHandler", (_Handler,), {"state": state})
    server = _Server(("127.0.0.1", 0), partial(handler, directory=os.fspath(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
