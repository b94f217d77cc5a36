"""`kg serve` under a bounded load against the same questions asked in process.

Starts `kg serve` on a free 127.0.0.1 port over a built lake (default: the one `kg build`
recorded), then ``--clients`` threads (default 16), each with its own keep-alive HTTP
connection, send ``--requests`` POST /ask in all, cycling through the question set: a few
questions the graph answers (``answer.examples.graph_questions``), one it refuses, and the
giant pairs (a question naming two of the four BRIDGE descriptors on the most articles,
when it grounds to them). Reports p50/p95/p99 latency and requests/s, overall and for the giant and
non-giant questions apart, against the same questions asked one after another in this
process on an opened ``KnowledgeGraph`` (after one untimed round). Every reply is checked
to be a 200 with the in-process answer's verdict. ``peak_rss``: the server's and each
worker's own peak RSS (VmHWM) at the end of the load run. ``--heavy-candidates N ...``
measures the same with `kg serve --heavy-candidates N` too (``service_by_config``).

    KG_HOME=.kg .venv/bin/python benchmarks/serve.py --requests 800 --workers 1 2

The machine's load is printed with the figures (``loadavg``). The last line is one JSON
object.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kg_platform.answer.api import KnowledgeGraph  # noqa: E402
from kg_platform.answer.examples import graph_questions  # noqa: E402
from kg_platform.commands.partition_args import scoped_lake  # noqa: E402
from kg_platform.settings import Settings  # noqa: E402

REFUSED = "Is the colour of a quiet afternoon louder than its shadow?"
TARGET_P95_MS = 50.0


def giant_questions(kg: KnowledgeGraph, n: int = 4) -> list[str]:
    """Questions naming two of the ``n`` BRIDGE descriptors on the most articles (the
    pairs with the most candidate paths a question can reach; check tags such as Humans
    are IGNOREd before linking), kept when they ground to both."""
    counts = np.asarray(kg.store.array("mesh_article_count"))
    order = np.argsort(-counts, kind="stable").tolist()
    top = [d for d in order if kg.roles.get(kg.store.mesh_ui(d), ("",))[0] == "BRIDGE"][:n]
    names = {d: kg.grounder.names.get(kg.store.mesh_ui(d)) for d in top}
    found = []
    for a, b in itertools.combinations(top, 2):
        if not names[a] or not names[b]:
            continue
        question = f"Is {names[a]} associated with {names[b]}?"
        uis = {g.grounding.ui for g in kg.ground(question)}
        if {kg.store.mesh_ui(a), kg.store.mesh_ui(b)} <= uis:
            found.append(question)
    return found


def percentiles(ms: list[float]) -> dict:
    if not ms:
        return {"n": 0}
    a = np.asarray(ms)
    return {
        "n": len(ms),
        "p50_ms": round(float(np.percentile(a, 50)), 2),
        "p95_ms": round(float(np.percentile(a, 95)), 2),
        "p99_ms": round(float(np.percentile(a, 99)), 2),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    lake: str, port: int, workers: int = 1, heavy_candidates: int | None = None
) -> subprocess.Popen:
    command = [sys.executable, "-m", "kg_platform.cli", "serve", "--lake", lake]
    # its log (a line per request) goes to a file: a pipe nobody reads would fill and stop it
    log = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the server)
    server = subprocess.Popen(
        [*command, "--port", str(port), "--workers", str(workers)]
        + ([] if heavy_candidates is None else ["--heavy-candidates", str(heavy_candidates)]),
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/healthz")
            if connection.getresponse().status == 200:
                return server
        except OSError:
            time.sleep(0.2)
        if server.poll() is not None:
            break
    server.kill()
    log.seek(0)
    raise RuntimeError(f"kg serve did not start: {log.read().decode()[-2000:]}")


def load_run(port: int, work: list[tuple[str, bool]], clients: int, verdicts: dict) -> dict:
    lock = threading.Lock()
    queue = iter(range(len(work)))
    latencies: list[tuple[bool, float]] = []
    by_question: dict[str, list[float]] = {}
    errors: list[str] = []

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        while True:
            with lock:
                i = next(queue, None)
            if i is None:
                return
            question, giant = work[i]
            body = json.dumps({"question": question})
            started = time.perf_counter()
            connection.request("POST", "/ask", body, {"content-type": "application/json"})
            response = connection.getresponse()
            doc = json.loads(response.read())
            elapsed = (time.perf_counter() - started) * 1000.0
            with lock:
                latencies.append((giant, elapsed))
                by_question.setdefault(question, []).append(elapsed)
                if response.status != 200 or doc["verdict"] != verdicts[question]:
                    errors.append(f"{question!r}: {response.status}")

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    return {
        "clients": clients,
        "requests": len(work),
        "seconds": round(seconds, 2),
        "requests_per_s": round(len(work) / seconds, 1),
        "all": percentiles([ms for _, ms in latencies]),
        "non_giant": percentiles([ms for g, ms in latencies if not g]),
        "giant": percentiles([ms for g, ms in latencies if g]),
        # where the non-giant tail comes from: those questions with the highest p95
        "slowest_non_giant": sorted(
            (
                {"question": q[:60], **percentiles(ms)}
                for q, ms in by_question.items()
                if not dict(work)[q]
            ),
            key=lambda row: -row["p95_ms"],
        )[:3],
        "errors": errors[:5],
        "n_errors": len(errors),
    }


def process_tree_peak_mb(root: int) -> dict:
    """Peak RSS (VmHWM) of a live process and of each of its descendants (the ``--workers``
    children), in MiB, read from /proc while they run."""
    peaks, todo = {}, [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/status") as f:
                kb = next(int(x.split()[1]) for x in f if x.startswith("VmHWM:"))
            children = []
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    children += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            continue
        peaks[pid] = round(kb / 1024, 1)
        todo += children
    return {
        "server_mb": peaks.get(root),
        "workers_mb": [mb for pid, mb in sorted(peaks.items()) if pid != root],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", default=None, help="default: the lake `kg build` recorded")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=800)
    parser.add_argument("--questions", type=int, default=8, help="answered questions")
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=[1],
        help="`kg serve --workers` values, each measured in turn (default 1)",
    )
    parser.add_argument(
        "--heavy-candidates",
        type=int,
        nargs="+",
        default=None,
        help="also measure `kg serve --heavy-candidates N` for each N (the largest pairs "
        "searched one at a time per worker), with every --workers value (service_by_config)",
    )
    args = parser.parse_args()
    lake_root = args.lake or Settings.load().lake
    result = measure(
        lake_root, args.clients, args.requests, args.questions, args.workers, args.heavy_candidates
    )
    print(json.dumps(result))
    return 0


def measure(
    lake_root: str,
    clients: int,
    requests: int,
    n_questions: int,
    workers_list: list[int],
    heavy_list: list[int] | None = None,
) -> dict:
    """The figures above for the published graph build `kg serve --lake lake_root` serves."""
    lake, _ = scoped_lake(
        argparse.Namespace(lake=lake_root, release=None, mesh_year=None), quiet=True
    )
    kg = KnowledgeGraph.open(lake)
    plain = [q.text for q in graph_questions(kg, n_questions).questions] + [REFUSED]
    giant = giant_questions(kg)
    questions = [(q, False) for q in plain] + [(q, True) for q in giant]

    for q, _ in questions:  # one untimed round: the compiled passes load here
        kg.ask(q)
    verdicts, in_process = {}, []
    for q, is_giant in questions:
        started = time.perf_counter()
        answer = kg.ask(q)
        in_process.append((is_giant, (time.perf_counter() - started) * 1000.0))
        verdicts[q] = answer.verdict.to_json()
    work = [questions[i % len(questions)] for i in range(requests)]

    by_config = {}
    # kg serve as started by default first (no heavy lane), then each --heavy-candidates
    for heavy in [None, *(heavy_list or [])]:
        for workers in workers_list:
            port = free_port()
            server = start_server(lake_root, port, workers, heavy)
            try:
                for _ in range(workers):  # warm each worker's first question (if it can)
                    load_run(port, questions, workers, verdicts)
                got = load_run(port, work, clients, verdicts)
                got["peak_rss"] = process_tree_peak_mb(server.pid)
                by_config[(workers, heavy)] = got
            finally:
                server.terminate()
                server.wait(timeout=60)
    by_workers = {w: r for (w, heavy), r in by_config.items() if heavy is None}
    served = by_workers[workers_list[0]]
    return {
        "lake": lake_root,
        "graph_build": kg.store.build_id,
        "articles": kg.store.n_articles,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "questions": len(plain),
        "giant_questions": giant,
        "service": served,  # the first --workers value
        "service_by_workers": {str(w): r for w, r in by_workers.items()},
        "service_by_config": {
            f"workers={w} heavy_candidates={'none' if h is None else h}": r
            for (w, h), r in by_config.items()
        }
        if heavy_list
        else None,
        "in_process": {
            "all": percentiles([ms for _, ms in in_process]),
            "non_giant": percentiles([ms for g, ms in in_process if not g]),
            "giant": percentiles([ms for g, ms in in_process if g]),
        },
        "non_giant_p95_within_target": {
            str(w): r["non_giant"].get("p95_ms", 0.0) <= TARGET_P95_MS
            for w, r in by_workers.items()
        },
    }


if __name__ == "__main__":
    sys.exit(main())
