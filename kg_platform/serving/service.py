"""`kg serve`'s graph service: one graph build kept warm, and how it is replaced.

The build (release x MeSH year) is chosen as `kg ask` chooses it. ``ServedGraph`` holds the
opened ``KnowledgeGraph`` with the pair it came from; a request takes the one current at
its start, and ``POST /reload`` opens the newest published build beside it and swaps the
reference in one assignment, so a request never sees half of one build and half of
another (a build's arrays are immutable in their own folder; the grounding index is one
object). Question work runs in the server's thread pool: the compiled passes release the
GIL and are loaded once at start. The HTTP application over it is ``serving.app``.

The build's files are read under ``storage.mapped.serve_policy``: small ones copied into
memory at opening, the others mapped and their sizes checked before each request, so a file
damaged on disk (truncated in place) is a 503 naming it, never a SIGBUS, and a worker that
cannot open its build (or finds it damaged) stays up and says why in /healthz.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from kg_platform.answer.api import Admission, AskConfig, KnowledgeGraph
from kg_platform.answer.readers.base import Reader
from kg_platform.graph.store import KGStore
from kg_platform.retrieval.linking import ConceptPair, keep_article_bits
from kg_platform.retrieval.paths import candidate_bound, keep_packed, load_kernels, major_reads
from kg_platform.serving.edge import Supervisor, WorkerRecord, bind_each
from kg_platform.storage import mapped
from kg_platform.storage.lake import Lake

# seconds between two attempts to open a build while none can be served
RETRY_OPEN_S = 5.0
# what a worker process opens: set by `kg serve` for the processes it starts
SPEC_ENV = "KG_SERVE_SPEC"


class Unavailable(RuntimeError):
    """No build can be served now (HTTP 503): none opened, or a file of the served one
    changed under it; the message names the file."""


@dataclass(frozen=True)
class ServedGraph:
    """One opened graph build and the pair it was chosen as."""

    kg: KnowledgeGraph
    partition: dict[str, str | None]
    opened_at: float
    open_ms: float
    kernels_ms: float
    warm_ms: float = 0.0  # the first questions, asked before the service says it is ready
    example: str | None = None  # a question this build answers (the page's placeholder)
    tables_ms: float = 0.0  # per-build tables of the question path (``paths.major_reads``)

    @property
    def build_id(self) -> str:
        return self.kg.store.build_id


# which build to serve: the lake scoped to the chosen (release, MeSH year), and that pair;
# `kg serve` passes `kg ask`'s choice (commands.partition_args.scoped_lake), asked again
# on every reload so the newest published build is found
Chooser = Callable[[], tuple[Lake, dict[str, str | None]]]


def open_served(choose: Chooser, reader: Reader | None, kernels: bool = True) -> ServedGraph:
    """Open the build ``choose`` names, every one of its arrays (so each file is read or
    mapped, and checked, now), load the compiled passes and ask the first questions: a
    warm service never pays for them inside a client's question. ``kernels=False``: a
    process that only checks the build opens, as `kg serve` does before starting its
    workers."""
    from kg_platform.answer.examples import answerable_examples

    started = time.perf_counter()
    scoped, partition = choose()
    kg = KnowledgeGraph.open(scoped, AskConfig(), reader=reader)
    for name in kg.store.manifest["arrays"]:
        kg.store.array(name)
    opened = time.perf_counter()
    kernels_ms = load_kernels(kg.store) if kernels else 0.0
    tables_ms = 0.0
    if kernels:  # what the question path keeps per graph build, made before any question
        tabling = time.perf_counter()
        major_reads(kg.store)
        keep_packed(kg.store)  # the large near sides' links, packed on their first question
        keep_article_bits(kg.store)  # the largest article lists as bit tables, likewise
        tables_ms = round((time.perf_counter() - tabling) * 1000.0, 1)
    example, warm_ms = None, 0.0
    if kernels:
        warming = time.perf_counter()
        found = answerable_examples(kg, 1)
        example = found[0] if found else None
        warm_ms = round((time.perf_counter() - warming) * 1000.0, 1)
    return ServedGraph(
        kg,
        partition,
        time.time(),
        round((opened - started) * 1000.0, 1),
        kernels_ms,
        warm_ms,
        example,
        tables_ms,
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
    other worker open the newest published build before it answers its next request.

    ``tolerant``: a build that cannot be opened leaves the service up without one (every
    question a 503 saying why, retried every ``RETRY_OPEN_S`` seconds), as a worker of `kg
    serve` must be: a worker that exits because its build is damaged is restarted into the
    same damage. ``record``: the supervisor's account of the workers, for /healthz.
    ``path_budget_ms``: each question's path-search budget (``KnowledgeGraph.ask``; None:
    none); /status counts the questions it cut short."""

    def __init__(
        self,
        choose: Chooser,
        reader: Reader | None = None,
        generation: Generation | None = None,
        kernels: bool = True,
        lane: HeavyLane | None = None,
        tolerant: bool = False,
        record: WorkerRecord | None = None,
        path_budget_ms: float | None = None,
    ) -> None:
        self.choose, self.reader, self.kernels = choose, reader, kernels
        self.path_budget_ms = path_budget_ms
        self.cut_questions = 0
        self.generation = generation
        self.lane = lane
        self.record = record
        self._reload_lock = threading.Lock()
        self._seen = generation.value if generation is not None else 0
        self._current: ServedGraph | None = None
        self.open_error: str | None = None
        self._retry_at = 0.0
        self.started_at = time.time()
        self.reloads = 0
        self.reload_error: str | None = None
        self.questions = 0
        if tolerant:
            self._try_open()
        else:
            self._current = open_served(choose, reader, kernels)

    def _try_open(self) -> None:
        """Open the newest build for the choice; on failure keep the one served (if any)
        and say why in ``open_error`` until an attempt succeeds."""
        self._retry_at = time.monotonic() + RETRY_OPEN_S
        try:
            self._current = open_served(self.choose, self.reader, self.kernels)
            self.open_error = None
        except (FileNotFoundError, ValueError, OSError) as error:
            self.open_error = str(error)

    @property
    def current(self) -> ServedGraph:
        """The build served now (raises ``Unavailable`` when there is none)."""
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
        if self._current is None:
            with self._reload_lock:
                if self._current is None and time.monotonic() >= self._retry_at:
                    self._try_open()
            if self._current is None:
                raise Unavailable(f"no graph build can be served: {self.open_error}")
        return self._current

    def serving(self) -> ServedGraph:
        """The build to answer a request from, after checking that no mapped file of it
        changed on disk (``Unavailable`` names the first that did; when a newer build is
        published, or the file is repaired, the next request after ``RETRY_OPEN_S`` finds
        it)."""
        served = self.current
        broken, _ = mapped.damage()
        if not broken:
            return served
        with self._reload_lock:
            if time.monotonic() >= self._retry_at:
                self._retry_at = time.monotonic() + RETRY_OPEN_S
                try:  # a newer published build, or a repaired one, replaces the damaged
                    fresh = open_served(self.choose, self.reader, self.kernels)
                except (FileNotFoundError, ValueError, OSError):
                    fresh = None
                if fresh is not None:
                    self._current = served = fresh
                    del fresh
                    self.reloads += 1
        broken, _ = mapped.damage()
        if broken:
            raise Unavailable(
                f"{broken[0]}: a file of the served graph build changed under the server "
                "(published builds are never rewritten); `kg build` repairs it, then "
                "POST /reload (or wait: the newest build is tried every "
                f"{RETRY_OPEN_S:g} s)"
            )
        return served

    def reload(self) -> dict[str, Any]:
        """Open the newest published build for the same choice; swap it in when it opened
        whole (a failure leaves the served one in place and is raised)."""
        try:
            before: ServedGraph | None = self.current
        except Unavailable:
            before = None
        shared = self.generation.advancing() if self.generation is not None else None
        with self._reload_lock, shared or nullcontext() as bump:
            fresh = open_served(self.choose, self.reader, self.kernels)
            self._current = fresh  # one reference assignment: requests see old or new
            self.open_error = None
            if bump is not None:
                self._seen = bump()  # the other workers follow before their next request
            self.reloads += 1
        previous = before.build_id if before is not None else None
        return {
            "changed": fresh.build_id != previous,
            "previous_graph_build": previous,
            "graph_build": fresh.build_id,
            "partition": fresh.partition,
            "open_ms": fresh.open_ms,
        }

    def health(self) -> tuple[int, dict[str, Any]]:
        """(HTTP status, body) of /healthz: 200 when a build is served whole, else 503 and
        why; what the supervisor recorded of dead workers, and copies still served whose
        files changed on disk, are said when there are any."""
        doc: dict[str, Any] = {"ok": True}
        status = 200
        try:
            doc["graph_build"] = self.serving().build_id
        except Unavailable as error:
            status, doc["ok"], doc["error"] = 503, False, str(error)
            doc["graph_build"] = self._current.build_id if self._current is not None else None
        _, copied = mapped.damage()
        if copied:
            doc["damaged_on_disk"] = copied
            doc["note"] = (
                "these files changed on disk after they were read into memory; the copies "
                "are served until a reload, which needs a repaired build (`kg build`)"
            )
        workers = self.record.read() if self.record is not None else {}
        if workers.get("restarts") or workers.get("last_death"):
            doc["worker_restarts"] = workers.get("restarts", 0)
            doc["last_worker_death"] = workers.get("last_death")
            if workers.get("backoff_s"):
                doc["restart_backoff_s"] = workers["backoff_s"]
        return status, doc

    def status(self) -> dict[str, Any]:
        served = self.current
        store = served.kg.store
        broken, copied = mapped.damage()
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
            "warm_ms": served.warm_ms,
            "tables_ms": served.tables_ms,
            "example_question": served.example,
            "files": {
                "copied": sum(f.copied for f in mapped.opened_files()),
                "mapped": sum(not f.copied for f in mapped.opened_files()),
                "damaged": broken + copied,
            },
            "started_at": self.started_at,
            "worker_pid": os.getpid(),
            "reloads": self.reloads,
            "reload_error": self.reload_error,
            "questions": self.questions,
            "path_budget": None
            if self.path_budget_ms is None
            else {"budget_ms": self.path_budget_ms, "cut_questions": self.cut_questions},
            "heavy_lane": None
            if self.lane is None
            else {
                "threshold": self.lane.threshold,
                "slots": self.lane.slots,
                "heavy_searches": self.lane.heavy_searches,
            },
        }


def serve_workers(factory: str, spec: dict[str, Any], workers: int, host: str, port: int) -> None:
    """Run ``workers`` processes of the application ``factory`` ("module:function", which
    reads ``spec`` from ``SPEC_ENV``) on ``host:port`` until stopped. Always under the
    supervisor, with one worker too: a worker killed by the system (a SIGBUS from a file
    damaged under it) is replaced, with a back-off when it repeats."""
    import uvicorn

    with tempfile.TemporaryDirectory(prefix="kg-serve-") as shared:
        spec = spec | {
            "generation": os.path.join(shared, "generation"),
            "record": os.path.join(shared, "workers.json"),
        }
        Generation.create(spec["generation"])
        os.environ[SPEC_ENV] = json.dumps(spec)
        config = uvicorn.Config(
            factory,
            factory=True,
            workers=workers,
            host=host,
            port=port,
            log_level="warning",
            http="kg_platform.serving.edge:TimedHttp",
            timeout_keep_alive=5,
            # a worker warming up (compiling its passes) on a loaded machine answers late
            timeout_worker_healthcheck=60,
        )
        sockets = bind_each(config, workers)
        Supervisor(config, sockets, WorkerRecord(spec["record"])).run()
