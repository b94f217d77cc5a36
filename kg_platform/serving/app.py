"""`kg serve`'s HTTP application over the graph service (``serving.service``).

Routes: ``POST /ask`` (the `kg ask --json` object), ``GET /search`` (`kg search --json`'s
hits over the embedding index, when the lake has one), ``GET /status``, ``GET /healthz``,
``POST /reload``, ``GET /openapi.json`` and ``GET /docs`` (the OpenAPI description), and
``GET /`` (the page). Input is checked here and by ``validate_question``; nothing a client
sends reaches a shell, a path or SQL: the release and MeSH year are compared with the
served pair's, never used to build a path.

Every answer is JSON, errors included (404, 405, 500), and each request writes one line to
the log. A body must be ``application/json`` (else 415), at most 64 KiB, counted while it is
read (else 413), received within the read timeout (else 408), and UTF-8 (else 422).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.schemas import SchemaGenerator
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kg_platform.answer.question import QuestionError, validate_question, validate_top_k
from kg_platform.answer.search import DenseSearch
from kg_platform.serving.edge import READ_TIMEOUT_S
from kg_platform.serving.page import render_page
from kg_platform.serving.service import GraphService, ServedGraph, Unavailable
from kg_platform.storage import mapped

MAX_SEARCH_K = 100
MAX_BODY_BYTES = 64 * 1024
ASK_FIELDS = {"question", "as_of", "top_k", "release", "mesh_year", "path_budget_ms"}
# the most a request's own path-search budget may be, in milliseconds
MAX_PATH_BUDGET_MS = 600_000.0


class BadInput(ValueError):
    """A request the service refuses (HTTP 4xx), with the message the client sees."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


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
    """The checked fields of a POST /ask body (BadInput names the first bad one); the
    question and top_k are checked as `kg ask` checks them (``answer.api``)."""
    if not isinstance(body, dict):
        raise BadInput("body: expected a JSON object with a `question`", 400)
    unknown = sorted(set(body) - ASK_FIELDS)
    if unknown:
        raise BadInput(f"body: unknown fields {unknown[:5]} (known: {sorted(ASK_FIELDS)})")
    if "question" not in body:
        raise BadInput("question: missing")
    try:
        question = validate_question(body["question"])
        top_k = validate_top_k(body.get("top_k", 10))
    except QuestionError as error:
        raise BadInput(str(error)) from None
    budget = body.get("path_budget_ms")
    if budget is not None and (
        isinstance(budget, bool)
        or not isinstance(budget, int | float)
        or not 0 < budget <= MAX_PATH_BUDGET_MS
    ):
        raise BadInput(
            f"path_budget_ms: {str(budget)[:40]!r} is not a number of milliseconds in "
            f"(0, {MAX_PATH_BUDGET_MS:g}]"
        )
    return {
        "question": question,
        "as_of": _int_field(body, "as_of", None, 1000, 2100),
        "top_k": top_k,
        "path_budget_ms": budget,
    }


def path_budget(served: float | None, asked: float | None) -> float | None:
    """A question's path-search budget: the request's (``path_budget_ms``) or the
    service's (``--path-budget-ms``), the smaller when both are given."""
    given = [float(b) for b in (served, asked) if b is not None]
    return min(given) if given else None


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def _has_body(request: Request) -> bool:
    length = request.headers.get("content-length")
    return "transfer-encoding" in request.headers or (length is not None and length != "0")


async def read_json_body(request: Request, timeout: float = READ_TIMEOUT_S) -> object:
    """The request's JSON body: ``application/json`` (else 415), at most ``MAX_BODY_BYTES``
    counted as it arrives (else 413, nothing more read), all of it within ``timeout``
    seconds (else 408), UTF-8 (else 422) and JSON (else 400)."""
    if _media_type(request) != "application/json":
        given = request.headers.get("content-type")
        raise BadInput(
            f"content-type {given[:60]!r}: the body must be application/json"
            if given
            else "content-type: missing; the body must be application/json",
            415,
        )
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise BadInput(f"body: {int(length)} bytes, at most {MAX_BODY_BYTES}", 413)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    chunks, size = [], 0
    stream = request.stream().__aiter__()
    while True:
        try:
            chunk = await asyncio.wait_for(anext(stream), max(0.0, deadline - loop.time()))
        except StopAsyncIteration:
            break
        except TimeoutError:
            raise BadInput(f"body: not received within {timeout:g} s", 408) from None
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise BadInput(f"body: more than {MAX_BODY_BYTES} bytes", 413)
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadInput(
            f"body: not UTF-8 (byte {error.start}: {raw[error.start : error.start + 1]!r})"
        ) from None
    try:
        return json.loads(text)
    except ValueError as error:
        raise BadInput(f"body: not JSON ({error})", 400) from None


class Json(JSONResponse):
    """A JSON response that cannot fail on text it did not check: a lone surrogate is
    written as its JSON escape."""

    def render(self, content: Any) -> bytes:
        return json.dumps(
            content, ensure_ascii=False, allow_nan=False, separators=(",", ":")
        ).encode("utf-8", "backslashreplace")


def _error(error: BadInput | Unavailable) -> Json:
    status = error.status if isinstance(error, BadInput) else 503
    # a refused body may still be arriving: close the connection rather than read it
    headers = {"connection": "close"} if status in (408, 413) else None
    return Json({"error": str(error)}, status_code=status, headers=headers)


class RequestLog:
    """One line per request on stderr: time, worker pid, client, method, path, status,
    milliseconds (the path and query escaped, so a client cannot write a line of its own)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def logged(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, logged)
        finally:
            target = urllib.parse.quote(scope.get("path", ""), safe="/")
            query = scope.get("query_string", b"")
            if query:
                target += "?" + urllib.parse.quote(query[:200].decode("latin-1"), safe="=&%")
            client = scope.get("client") or ("-", 0)
            line = (
                f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} kg serve [{os.getpid()}] "
                f"{client[0]} {scope.get('method', '-')} {target} {status[0]} "
                f"{(time.perf_counter() - started) * 1000.0:.1f} ms\n"
            )
            os.write(2, line.encode("ascii", "backslashreplace"))


def build_app(
    service: GraphService, read_timeout: float = READ_TIMEOUT_S, synthetic: bool = False
) -> ASGIApp:
    """The ASGI application over ``service`` (``synthetic``: the corpus is the synthetic
    demo's, whose PMIDs are not the real articles': the page says so)."""

    async def ask(request: Request) -> Response:
        """
        summary: Answer a question from the served graph build, or refuse with the gate.
        description: 'The body is {"question", "as_of"?, "top_k"?, "release"?, "mesh_year"?,
          "path_budget_ms"?}, sent as application/json; the response is exactly `kg ask
          --json` (docs/ask_json.md) with `partition`. A path_budget_ms (or `kg serve
          --path-budget-ms`, the smaller of the two) bounds the path search; the answer
          then has `path_search`, which says whether the budget cut it short.'
        responses:
          200: {description: "the answer or refusal"}
          400: {description: "a malformed body, or another release or MeSH year"}
          408: {description: "the body did not arrive within the read timeout"}
          413: {description: "a body over 64 KiB"}
          415: {description: "a body that is not application/json"}
          422: {description: "a field with a bad value (empty, too long, control characters, not UTF-8)"}
          503: {description: "no build can be served now (the error names the damaged file)"}
        """
        try:
            body = await read_json_body(request, read_timeout)
            fields = ask_request(body)
            served = service.serving()
            _check_partition(served, body)  # type: ignore[arg-type]
        except (BadInput, Unavailable) as error:
            return _error(error)
        try:
            answer = await run_in_threadpool(
                served.kg.ask,
                fields["question"],
                as_of=fields["as_of"],
                top_k=fields["top_k"],
                admit=service.lane.admit(served.kg.store) if service.lane is not None else None,
                path_budget_ms=path_budget(service.path_budget_ms, fields["path_budget_ms"]),
            )
        except (ValueError, OSError):
            broken, _ = mapped.damage()  # a file damaged while the question was read
            if broken:
                return _error(Unavailable(f"{broken[0]}: changed under the server"))
            raise
        # checked again after: a file truncated while the question read it (to a size that
        # keeps the last page, where the lost bytes read as zeros, not a SIGBUS) may have
        # given a wrong answer; it is withheld
        broken, _ = mapped.damage()
        if broken:
            return _error(
                Unavailable(f"{broken[0]}: changed under the server while the question was read")
            )
        service.questions += 1
        if answer.path_search is not None and answer.path_search["cut"]:
            service.cut_questions += 1
        return Json({**answer.to_json(), "partition": served.partition})

    async def search(request: Request) -> Response:
        """
        summary: Exact dense top-k over the embedding index (as `kg search --json`).
        parameters:
          - {name: q, in: query, required: true, schema: {type: string}}
          - {name: k, in: query, required: false, schema: {type: integer, default: 10}}
        responses:
          200: {description: "the hits"}
          422: {description: "a bad q or k"}
          503: {description: "the lake has no embedding index, or no build can be served"}
        """
        try:
            question = validate_question(request.query_params.get("q", ""))
            raw_k = request.query_params.get("k", "10")
            if not raw_k.isdigit() or not 1 <= int(raw_k) <= MAX_SEARCH_K:
                raise BadInput(f"k: {raw_k[:20]!r} is not an integer in 1..{MAX_SEARCH_K}")
            served = service.serving()
            _check_partition(served, dict(request.query_params))
        except QuestionError as error:
            return _error(BadInput(str(error).replace("question", "q", 1)))
        except (BadInput, Unavailable) as error:
            return _error(error)
        try:
            hits = await run_in_threadpool(_search, served, question, int(raw_k))
        except (FileNotFoundError, ValueError) as error:  # no embedding index in the lake
            return Json({"error": str(error)}, status_code=503)
        return Json(hits)

    async def status(request: Request) -> Response:
        """
        summary: The served graph build, its size, its files, and the service's counters.
        responses:
          200: {description: "status"}
          503: {description: "no build can be served now"}
        """
        try:
            return Json(service.status())
        except Unavailable as error:
            return _error(error)

    async def healthz(request: Request) -> Response:
        """
        summary: Whether a whole build is served, and what went wrong when not.
        responses:
          200: {description: "a whole build is served"}
          503: {description: "no build can be served now; the error says why"}
        """
        code, doc = service.health()
        return Json(doc, status_code=code)

    async def reload(request: Request) -> Response:
        """
        summary: Open the newest published graph build and serve it from the next request.
        responses:
          200: {description: "what is served now"}
          415: {description: "a body that is not application/json"}
          503: {description: "the new build could not be opened; the old one stays served"}
        """
        if _has_body(request) and _media_type(request) != "application/json":
            return _error(BadInput("reload: a body, when sent, must be application/json", 415))
        try:
            done = await run_in_threadpool(service.reload)
        except (FileNotFoundError, ValueError, OSError) as error:
            kept = service._current.build_id if service._current is not None else None
            return Json({"error": str(error), "graph_build": kept}, status_code=503)
        return Json(done)

    async def page(request: Request) -> Response:
        served = service._current
        return HTMLResponse(
            render_page(
                served.example if served is not None else None,
                synthetic=synthetic,
                reader=getattr(service.reader, "name", None) if service.reader else None,
            )
        )

    routes = [
        Route("/", page, methods=["GET"], include_in_schema=False),
        Route("/ask", ask, methods=["POST"]),
        Route("/search", search, methods=["GET"]),
        Route("/status", status, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/reload", reload, methods=["POST"]),
    ]
    schemas = SchemaGenerator(
        {"openapi": "3.0.0", "info": {"title": "kg serve", "version": "1"}, "paths": {}}
    )

    async def openapi(request: Request) -> Response:
        return Json(schemas.get_schema(routes=app.routes))

    async def docs(request: Request) -> Response:
        return HTMLResponse(_docs_page(schemas.get_schema(routes=app.routes)))

    routes += [
        Route("/openapi.json", openapi, methods=["GET"], include_in_schema=False),
        Route("/docs", docs, methods=["GET"], include_in_schema=False),
    ]

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        where = f"{request.method} {urllib.parse.quote(request.url.path, safe='/')}"
        if error.status_code == 404:
            message = f"{where}: no such route (the API is described at /docs)"
        elif error.status_code == 405:
            allowed = (error.headers or {}).get("Allow", "")
            message = f"{where}: method not allowed (allowed: {allowed})"
        else:
            message = f"{where}: {error.detail}"
        return Json({"error": message}, status_code=error.status_code, headers=error.headers)

    async def server_error(request: Request, error: Exception) -> Response:
        return Json(
            {"error": f"internal error ({type(error).__name__}); the server's log has the trace"},
            status_code=500,
        )

    @asynccontextmanager
    async def warm(app: Starlette) -> AsyncIterator[None]:
        """Before the server listens: one question through the path a request takes (the
        thread pool, the JSON), so the first client's answer costs what any other does."""
        served = service._current
        if served is not None and served.example is not None:
            answer = await run_in_threadpool(served.kg.ask, served.example)
            Json({**answer.to_json(), "partition": served.partition})
        yield

    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error, Exception: server_error},
        lifespan=warm,
    )
    return RequestLog(app)


def _search(served: ServedGraph, question: str, k: int) -> dict[str, Any]:
    search = DenseSearch.of_graph(served.kg)
    return search.document(question, k, search.hits(question, k), served.partition)


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
