"""`kg serve`: one graph build kept warm behind an HTTP JSON API and a small question page.

The build (release x MeSH year) is chosen as `kg ask` chooses it. ``ServedGraph`` holds the
opened ``KnowledgeGraph`` with the pair it came from; a request takes the one current at
its start, and ``POST /reload`` opens the newest published build beside it and swaps the
reference in one assignment, so a request never sees half of one build and half of
another (a build's arrays are immutable in their own folder; the grounding index is one
object). Question work runs in the server's thread pool: the compiled passes release the
GIL and are loaded once at start.

Routes: ``POST /ask`` (the `kg ask --json` object), ``GET /search`` (`kg search --json`'s
hits over the embedding index, when the lake has one), ``GET /status``, ``GET /healthz``,
``POST /reload``, ``GET /openapi.json`` and ``GET /docs`` (the OpenAPI description), and
``GET /`` (the page). Input is checked here and by ``validate_question``; nothing a client
sends reaches a shell, a path or SQL: the release and MeSH year are compared with the
served pair's, never used to build a path.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.schemas import SchemaGenerator

from kg_platform.answer.api import (
    Admission,
    AskConfig,
    KnowledgeGraph,
    QuestionError,
    validate_question,
)
from kg_platform.answer.readers.base import Reader
from kg_platform.graph.store import KGStore
from kg_platform.retrieval.linking import ConceptPair
from kg_platform.retrieval.paths import candidate_bound, load_kernels
from kg_platform.serving.page import PAGE
from kg_platform.storage.lake import Lake

MAX_TOP_K = 100
MAX_SEARCH_K = 100
ASK_FIELDS = {"question", "as_of", "top_k", "release", "mesh_year"}


class BadInput(ValueError):
    """A request the service refuses (HTTP 400 or 422), with the message the client sees."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ServedGraph:
    """One opened graph build and the pair it was chosen as."""

    kg: KnowledgeGraph
    partition: dict[str, str | None]
    opened_at: float
    open_ms: float
    kernels_ms: float

    @property
    def build_id(self) -> str:
        return self.kg.store.build_id


# which build to serve: the lake scoped to the chosen (release, MeSH year), and that pair;
# `kg serve` passes `kg ask`'s choice (commands.partition_args.scoped_lake), asked again
# on every reload so the newest published build is found
Chooser = Callable[[], tuple[Lake, dict[str, str | None]]]


def open_served(choose: Chooser, reader: Reader | None, kernels: bool = True) -> ServedGraph:
    """Open the build ``choose`` names and load the compiled passes (a warm service never
    loads them inside a question; ``kernels=False``: a process that only checks the build
    opens, as `kg serve --workers N` does before starting its workers)."""
    started = time.perf_counter()
    scoped, partition = choose()
    kg = KnowledgeGraph.open(scoped, AskConfig(), reader=reader)
    opened = time.perf_counter()
    kernels_ms = load_kernels(kg.store) if kernels else 0.0
    return ServedGraph(
        kg, partition, time.time(), round((opened - started) * 1000.0, 1), kernels_ms
    )


class Generation:
    """A reload counter the worker processes of one `kg serve` share: 8 bytes of a small
    file, memory-mapped by each worker and read on every request (no system call); a reload
    increments it under an exclusive lock of the file."""

    def __init__(self, path: str) -> None:
        self.path = path
        with open(path, "r+b") as f:
            self._map = mmap.mmap(f.fileno(), 8)

    @classmethod
    def create(cls, path: str) -> Generation:
        with open(path, "wb") as f:
            f.write(bytes(8))
        return cls(path)

    @property
    def value(self) -> int:
        return int.from_bytes(self._map[:8], "little")

    @contextmanager
    def advancing(self) -> Iterator[Callable[[], int]]:
        """Hold the file's exclusive lock (one reload at a time across the workers, so two
        at once cannot leave them on different builds) and give the increment to call once
        the new build is open."""
        with open(self.path, "r+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)

            def bump() -> int:
                value = self.value + 1
                self._map[:8] = value.to_bytes(8, "little")
                return value

            yield bump


class HeavyLane:
    """At most ``slots`` path searches of heavy pairs (``retrieval.paths.candidate_bound``
    above ``threshold``) at once in this process; the others wait their turn. Searches of
    smaller pairs never wait here, so under concurrent load the largest questions queue
    behind each other instead of taking every core from the rest; the answers are the same.
    (On a 10M-article graph a pair above ~1M candidates costs ~60-110 ms of CPU, most
    others 1-20 ms.)"""

    def __init__(self, threshold: int, slots: int = 1) -> None:
        if threshold < 0 or slots < 1:
            raise ValueError(f"heavy lane: threshold {threshold} and slots {slots}")
        self.threshold, self.slots = threshold, slots
        self._slots = threading.BoundedSemaphore(slots)
        self._count = threading.Lock()
        self.heavy_searches = 0

    def admit(self, store: KGStore) -> Admission:
        """The admission ``KnowledgeGraph.ask`` enters around each pair's search."""

        def enter(pair: ConceptPair):
            if candidate_bound(store, pair) <= self.threshold:
                return nullcontext()
            with self._count:
                self.heavy_searches += 1
            return self._slots

        return enter


class GraphService:
    """The served graph and how it is replaced: ``current`` is read once per request. With
    a shared ``generation`` (several worker processes) a reload in one worker makes every
    other worker open the newest published build before it answers its next request."""

    def __init__(
        self,
        choose: Chooser,
        reader: Reader | None = None,
        generation: Generation | None = None,
        kernels: bool = True,
        lane: HeavyLane | None = None,
    ) -> None:
        self.choose, self.reader, self.kernels = choose, reader, kernels
        self.generation = generation
        self.lane = lane
        self._reload_lock = threading.Lock()
        self._seen = generation.value if generation is not None else 0
        self._current = open_served(choose, reader, kernels)
        self.started_at = time.time()
        self.reloads = 0
        self.reload_error: str | None = None
        self.questions = 0

    @property
    def current(self) -> ServedGraph:
        shared = self.generation
        if shared is not None and shared.value != self._seen:
            with self._reload_lock:
                seen = shared.value
                if seen != self._seen:  # another worker reloaded: follow it
                    self._seen = seen
                    try:
                        self._current = open_served(self.choose, self.reader, self.kernels)
                        self.reloads += 1
                        self.reload_error = None
                    except (FileNotFoundError, ValueError, OSError) as error:
                        self.reload_error = str(error)  # the old build stays served
        return self._current

    def reload(self) -> dict[str, Any]:
        """Open the newest published build for the same choice; swap it in when it opened
        whole (a failure leaves the served one in place and is raised)."""
        before = self.current
        shared = self.generation.advancing() if self.generation is not None else None
        with self._reload_lock, shared or nullcontext() as bump:
            fresh = open_served(self.choose, self.reader, self.kernels)
            self._current = fresh  # one reference assignment: requests see old or new
            if bump is not None:
                self._seen = bump()  # the other workers follow before their next request
            self.reloads += 1
        return {
            "changed": fresh.build_id != before.build_id,
            "previous_graph_build": before.build_id,
            "graph_build": fresh.build_id,
            "partition": fresh.partition,
            "open_ms": fresh.open_ms,
        }

    def status(self) -> dict[str, Any]:
        served = self.current
        store = served.kg.store
        return {
            "graph_build": served.build_id,
            "partition": served.partition,
            "articles": store.n_articles,
            "descriptors": store.n_descriptors,
            "ranker": served.kg.ranker,
            "grounder": served.kg.grounder_description,
            "reader": getattr(served.kg.reader, "name", None) if served.kg.reader else None,
            "opened_at": served.opened_at,
            "open_ms": served.open_ms,
            "kernels_ms": served.kernels_ms,
            "started_at": self.started_at,
            "worker_pid": os.getpid(),
            "reloads": self.reloads,
            "reload_error": self.reload_error,
            "questions": self.questions,
            "heavy_lane": None
            if self.lane is None
            else {
                "threshold": self.lane.threshold,
                "slots": self.lane.slots,
                "heavy_searches": self.lane.heavy_searches,
            },
        }


def _check_partition(served: ServedGraph, body: dict[str, Any]) -> None:
    for field in ("release", "mesh_year"):
        wanted = body.get(field)
        if wanted is None:
            continue
        if not isinstance(wanted, str) or wanted != served.partition.get(field):
            have = served.partition.get(field)
            raise BadInput(
                f"{field} {str(wanted)[:40]!r}: not served (this service serves {field} "
                f"{have}); start another `kg serve --{field.replace('_', '-')}`",
                400,
            )


def _int_field(body: dict[str, Any], name: str, default: int | None, low: int, high: int):
    value = body.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"{name}: expected an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise BadInput(f"{name}: {value} is outside {low}..{high}")
    return value


def ask_request(body: object) -> dict[str, Any]:
    """The checked fields of a POST /ask body (BadInput names the first bad one)."""
    if not isinstance(body, dict):
        raise BadInput("body: expected a JSON object with a `question`", 400)
    unknown = sorted(set(body) - ASK_FIELDS)
    if unknown:
        raise BadInput(f"body: unknown fields {unknown[:5]} (known: {sorted(ASK_FIELDS)})")
    if "question" not in body:
        raise BadInput("question: missing")
    try:
        question = validate_question(body["question"])
    except QuestionError as error:
        raise BadInput(str(error)) from None
    return {
        "question": question,
        "as_of": _int_field(body, "as_of", None, 1000, 2100),
        "top_k": _int_field(body, "top_k", 10, 1, MAX_TOP_K),
    }


async def _json_body(request: Request) -> object:
    raw = await request.body()
    if len(raw) > 64 * 1024:
        raise BadInput(f"body: {len(raw)} bytes, at most 65536", 400)
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise BadInput(f"body: not JSON ({error})", 400) from None


def _error(error: BadInput) -> JSONResponse:
    return JSONResponse({"error": str(error)}, status_code=error.status)


def build_app(service: GraphService) -> Starlette:
    """The ASGI application over ``service``."""

    async def ask(request: Request) -> Response:
        """
        summary: Answer a question from the served graph build, or refuse with the gate.
        description: The body is {"question", "as_of"?, "top_k"?, "release"?, "mesh_year"?};
          the response is exactly `kg ask --json` (docs/ask_json.md) with `partition`.
        responses:
          200: {description: the answer or refusal}
          400: {description: malformed body or another release / MeSH year}
          422: {description: a field with a bad value (empty, too long, control characters)}
        """
        served = service.current
        try:
            body = await _json_body(request)
            fields = ask_request(body)
            _check_partition(served, body)  # type: ignore[arg-type]
        except BadInput as error:
            return _error(error)
        answer = await run_in_threadpool(
            served.kg.ask,
            fields["question"],
            as_of=fields["as_of"],
            top_k=fields["top_k"],
            admit=service.lane.admit(served.kg.store) if service.lane is not None else None,
        )
        service.questions += 1
        return JSONResponse({**answer.to_json(), "partition": served.partition})

    async def search(request: Request) -> Response:
        """
        summary: Exact dense top-k over the embedding index (as `kg search --json`).
        parameters:
          - {name: q, in: query, required: true, schema: {type: string}}
          - {name: k, in: query, required: false, schema: {type: integer, default: 10}}
        responses:
          200: {description: the hits}
          422: {description: a bad q or k}
          503: {description: the lake has no embedding index}
        """
        served = service.current
        try:
            question = validate_question(request.query_params.get("q", ""))
            raw_k = request.query_params.get("k", "10")
            if not raw_k.isdigit() or not 1 <= int(raw_k) <= MAX_SEARCH_K:
                raise BadInput(f"k: {raw_k[:20]!r} is not an integer in 1..{MAX_SEARCH_K}")
            _check_partition(served, dict(request.query_params))
        except QuestionError as error:
            return _error(BadInput(str(error).replace("question", "q", 1)))
        except BadInput as error:
            return _error(error)
        try:
            hits = await run_in_threadpool(_search, served, question, int(raw_k))
        except (FileNotFoundError, ValueError) as error:  # no embedding index in the lake
            return JSONResponse({"error": str(error)}, status_code=503)
        return JSONResponse(hits)

    async def status(request: Request) -> Response:
        """
        summary: The served graph build, its size, and the service's counters.
        responses: {200: {description: status}}
        """
        return JSONResponse(service.status())

    async def healthz(request: Request) -> Response:
        """
        summary: Liveness; the graph build served.
        responses: {200: {description: alive}}
        """
        return JSONResponse({"ok": True, "graph_build": service.current.build_id})

    async def reload(request: Request) -> Response:
        """
        summary: Open the newest published graph build and serve it from the next request.
        responses:
          200: {description: what is served now}
          503: {description: the new build could not be opened; the old one stays served}
        """
        try:
            done = await run_in_threadpool(service.reload)
        except (FileNotFoundError, ValueError, OSError) as error:
            return JSONResponse(
                {"error": str(error), "graph_build": service.current.build_id}, status_code=503
            )
        return JSONResponse(done)

    async def page(request: Request) -> Response:
        return HTMLResponse(PAGE)

    routes = [
        Route("/", page, methods=["GET"], include_in_schema=False),
        Route("/ask", ask, methods=["POST"]),
        Route("/search", search, methods=["GET"]),
        Route("/status", status, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/reload", reload, methods=["POST"]),
    ]
    schemas = SchemaGenerator({"openapi": "3.0.0", "info": {"title": "kg serve", "version": "1"}})

    async def openapi(request: Request) -> Response:
        return JSONResponse(schemas.get_schema(routes=app.routes))

    async def docs(request: Request) -> Response:
        return HTMLResponse(_docs_page(schemas.get_schema(routes=app.routes)))

    routes += [
        Route("/openapi.json", openapi, methods=["GET"], include_in_schema=False),
        Route("/docs", docs, methods=["GET"], include_in_schema=False),
    ]
    app = Starlette(routes=routes)
    return app


def _search(served: ServedGraph, question: str, k: int) -> dict[str, Any]:
    from kg_platform.embeddings.encoder import Encoder
    from kg_platform.retrieval.dense import DenseIndex

    lake = served.kg.lake
    semantic = served.kg.semantic
    index = semantic.index if semantic is not None else DenseIndex.open(lake)
    encoder = semantic.encoder if semantic is not None else Encoder()
    hits = index.search(encoder.encode([question]), k=k)[0]
    titles = served.kg.title_lookup.titles([int(p) for p in hits.pmids.tolist()])
    return {
        "question": question,
        "partition": served.partition,
        "k": k,
        "index_vectors": len(index),
        "hits": [{**h, "title": titles.get(int(h["pmid"]))} for h in hits.as_list()],
    }


def _docs_page(schema: dict) -> str:
    from html import escape

    rows = []
    for path, operations in schema.get("paths", {}).items():
        for method, op in operations.items():
            rows.append(
                f"<h2>{escape(method.upper())} {escape(path)}</h2>"
                f"<p>{escape(str(op.get('summary', '')))}</p>"
                f"<pre>{escape(json.dumps(op, indent=1))}</pre>"
            )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>kg serve API</title></head>"
        "<body><h1>kg serve API</h1><p>Machine-readable: <a href='/openapi.json'>"
        "/openapi.json</a></p>" + "".join(rows) + "</body></html>"
    )
