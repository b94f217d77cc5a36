"""`kg serve` under a bounded load against the same questions asked in process.

Starts `kg serve` on a free 127.0.0.1 port over a built lake (default: the one `kg build`
recorded), then ``--clients`` threads (default 16), each with its own keep-alive HTTP
connection, send ``--requests`` POST /ask in all, cycling through the question set: a few
questions the graph answers (``answer.examples.graph_questions``), one it refuses, and the
giant pairs (a question naming two of the four BRIDGE descriptors on the most articles,
when it grounds to them). Reports p50/p95/p99 latency and requests/s, overall and for the giant and
non-giant questions apart, against the same questions asked one after another in this
process on an opened ``KnowledgeGraph`` (after one untimed round). Every reply is checked:
``n_lost`` (no reply, or not a 200), ``n_cut`` (the path budget cut the search and the answer
says so: `path_search.cut`, and its explanation or its `path_search_cut` refusal), ``n_wrong``
(any other verdict than the in-process answer's, or a cut answer that does not say so).
``peak_rss``: the server's and each worker's own peak RSS (VmHWM) at the end of the load run.
``--heavy-candidates N ...`` and ``--path-budget-ms MS ...`` measure the same with `kg serve
--heavy-candidates N` and `--path-budget-ms MS` too (``service_by_config``), every
``--workers`` value each.

``--half-rate``: after the closed-loop run (its requests/s at ``--clients`` is taken as the
saturating rate), the same questions are sent open loop at half that rate for
``--half-rate-s`` seconds, each request's latency counted from the moment it was due (a
late send counts against the server), as ``half_rate``; ``questions_per_s_per_core`` is the
saturating rate over the machine's cores, and ``questions_per_cpu_s`` the questions over the
CPU-seconds the server's processes used for them (on a machine shared with other work, the
figure that does not depend on what else runs).

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
# a client's keep-alive connection idle longer than this is replaced before its next request
IDLE_RECONNECT_S = 4.0
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
    lake: str,
    port: int,
    workers: int = 1,
    heavy_candidates: int | None = None,
    path_budget_ms: float | None = None,
) -> subprocess.Popen:
    command = [sys.executable, "-m", "kg_platform.cli", "serve", "--lake", lake]
    # its log (a line per request) goes to a file: a pipe nobody reads would fill and stop it
    log = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the server)
    server = subprocess.Popen(
        [*command, "--port", str(port), "--workers", str(workers)]
        + ([] if heavy_candidates is None else ["--heavy-candidates", str(heavy_candidates)])
        + ([] if path_budget_ms is None else ["--path-budget-ms", str(path_budget_ms)]),
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


def judge(status: int, doc: dict | None, want: dict) -> str:
    """``same`` (the in-process verdict), ``cut`` (the path budget cut the search and the
    answer says so), ``wrong`` (anything else) or ``lost`` (no 200 reply)."""
    if status != 200 or doc is None:
        return "lost"
    search = doc.get("path_search") or {}
    verdict = doc["verdict"]
    if search.get("cut"):
        says = verdict["reason"] == "path_search_cut" or (
            verdict["answerable"] and "cut by its" in verdict["explanation"]
        )
        return "cut" if says else "wrong"
    return "same" if verdict == want else "wrong"


def load_run(
    port: int,
    work: list[tuple[str, bool]],
    clients: int,
    verdicts: dict,
    rate: float | None = None,
) -> dict:
    """``work`` sent by ``clients`` threads, each with a keep-alive connection: closed loop
    (each sends its next question when its last is answered), or with ``rate`` open loop
    (request i due at i / rate seconds; its latency counts from then)."""
    lock = threading.Lock()
    queue = iter(range(len(work)))
    latencies: list[tuple[bool, float]] = []
    by_question: dict[str, list[float]] = {}
    errors: list[str] = []
    outcomes = {"same": 0, "cut": 0, "wrong": 0, "lost": 0}
    late: list[float] = []
    began = time.perf_counter()

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        used = time.perf_counter()
        while True:
            with lock:
                i = next(queue, None)
            if i is None:
                return
            question, giant = work[i]
            body = json.dumps({"question": question})
            started = time.perf_counter()
            if rate is not None:
                due = began + i / rate
                if due > started:
                    time.sleep(due - started)
                late.append(max(0.0, started - due) * 1000.0)
                started = due
            if time.perf_counter() - used > IDLE_RECONNECT_S:
                # the server closes a keep-alive connection idle for 5 s (`kg serve`'s
                # timeout_keep_alive); a request sent as it closes would be refused unread
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            try:
                connection.request("POST", "/ask", body, {"content-type": "application/json"})
                response = connection.getresponse()
                status, doc = response.status, json.loads(response.read())
            except (OSError, http.client.HTTPException, ValueError) as error:
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
                status, doc = 0, None
                with lock:
                    errors.append(f"{question!r}: {type(error).__name__}")
            used = time.perf_counter()
            elapsed = (used - started) * 1000.0
            outcome = judge(status, doc, verdicts[question])
            with lock:
                latencies.append((giant, elapsed))
                by_question.setdefault(question, []).append(elapsed)
                outcomes[outcome] += 1
                if outcome in ("wrong", "lost"):
                    errors.append(f"{question!r}: {status} {outcome}")

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - began
    return {
        "clients": clients,
        "offered_per_s": None if rate is None else round(rate, 1),
        "requests": len(work),
        "seconds": round(seconds, 2),
        "requests_per_s": round(len(work) / seconds, 1),
        "n_same": outcomes["same"],
        "n_cut": outcomes["cut"],
        "n_wrong": outcomes["wrong"],
        "n_lost": outcomes["lost"],
        "sent_late_ms_p95": round(float(np.percentile(late, 95)), 2) if late else None,
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


def process_tree_cpu_s(root: int) -> float:
    """CPU-seconds (user + system) used so far by a live process and its descendants."""
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


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
    parser.add_argument(
        "--path-budget-ms",
        type=float,
        nargs="+",
        default=None,
        help="also measure `kg serve --path-budget-ms MS` for each MS, with every --workers "
        "value (service_by_config)",
    )
    parser.add_argument(
        "--half-rate",
        action="store_true",
        help="also send the questions open loop at half the closed-loop rate (half_rate)",
    )
    parser.add_argument("--half-rate-s", type=float, default=20.0)
    args = parser.parse_args()
    lake_root = args.lake or Settings.load().lake
    result = measure(
        lake_root,
        args.clients,
        args.requests,
        args.questions,
        args.workers,
        args.heavy_candidates,
        args.path_budget_ms,
        args.half_rate_s if args.half_rate else None,
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
    budget_list: list[float] | None = None,
    half_rate_s: float | None = None,
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
    cores = os.cpu_count() or 1
    # kg serve as started by default first (no heavy lane, no budget), then each
    # --heavy-candidates, then each --path-budget-ms
    settings = [(None, None)] + [(h, None) for h in heavy_list or []]
    settings += [(None, b) for b in budget_list or []]
    for heavy, budget in settings:
        for workers in workers_list:
            port = free_port()
            server = start_server(lake_root, port, workers, heavy, budget)
            try:
                for _ in range(workers):  # warm each worker's first question (if it can)
                    load_run(port, questions, workers, verdicts)
                cpu = process_tree_cpu_s(server.pid)
                got = load_run(port, work, clients, verdicts)
                cpu = process_tree_cpu_s(server.pid) - cpu
                got["loadavg"] = [round(x, 2) for x in os.getloadavg()]
                got["questions_per_s_per_core"] = round(got["requests_per_s"] / cores, 1)
                # the server's own CPU: what a question costs whatever else the machine runs
                got["server_cpu_s"] = round(cpu, 2)
                got["questions_per_cpu_s"] = round(len(work) / cpu, 1) if cpu else None
                if half_rate_s is not None:
                    rate = got["requests_per_s"] / 2.0
                    n = max(1, int(rate * half_rate_s))
                    half = [questions[i % len(questions)] for i in range(n)]
                    got["half_rate"] = load_run(port, half, max(clients, 32), verdicts, rate)
                    got["half_rate"]["loadavg"] = [round(x, 2) for x in os.getloadavg()]
                got["peak_rss"] = process_tree_peak_mb(server.pid)
                by_config[(workers, heavy, budget)] = got
            finally:
                server.terminate()
                server.wait(timeout=60)
    by_workers = {w: r for (w, h, b), r in by_config.items() if h is None and b is None}
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
            f"workers={w} heavy_candidates={'none' if h is None else h} "
            f"path_budget_ms={'none' if b is None else f'{b:g}'}": r
            for (w, h, b), r in by_config.items()
        }
        if heavy_list or budget_list
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
