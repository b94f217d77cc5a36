"""`kg serve` with a file of its build damaged under it: what a client sees.

Copies the lake (default: the one `kg build` recorded) to a scratch folder, and for each
fault starts `kg serve` over the copy, asks ``--question`` (one the build answers), damages
the copy in place, then asks again, reads /healthz twice (once at once, once 3 s later),
notes whether the server process is alive, puts the file back (the same bytes, in place) and
asks once more. Faults: ``array`` truncates the graph build's ``cite_indices.npy`` to 0
bytes, ``index`` the grounding index, ``sigbus`` sends SIGBUS to a worker (as a read racing
the damage would); at the HTTP edge, ``bodies`` sends 4 chunked 200 MB bodies at once (the
replies, the server's peak RSS before and after) and ``half_sent`` holds 1,000 connections
that sent half a request head for 15 s (how many the server closed, and a question asked
meanwhile); each with every ``--workers`` value, and with every ``--options`` set
(e.g. ``--options "" "--copy-below-mib 0"``; an empty set is the default). Each row: the
status and error of /ask after the damage, /healthz's, whether the answer was the last good
build's (same build, same verdict), whether the process lived, and /ask after the repair.

    KG_HOME=.kg .venv/bin/python benchmarks/serve_faults.py [--question "Is X associated with Y?"]

The machine's load is printed with the rows (``loadavg``). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kg_platform.settings import Settings  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def call(port: int, method: str, path: str, body: dict | None = None, timeout: float = 10.0):
    """(status, document) or (None, why the request failed)."""
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        headers = {"content-type": "application/json"} if body is not None else {}
        connection.request(method, path, json.dumps(body) if body else None, headers)
        response = connection.getresponse()
        raw = response.read()
        try:
            return response.status, json.loads(raw)
        except ValueError:
            return response.status, raw[:200].decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as error:
        return None, f"{type(error).__name__}: {error}"[:200]


def short(doc: object) -> object:
    if isinstance(doc, dict):
        keep = ("ok", "error", "graph_build", "last_worker_death", "worker_restarts")
        found = {k: doc[k] for k in keep if k in doc}
        if "damaged_on_disk" in doc:
            found["damaged_on_disk"] = len(doc["damaged_on_disk"])
        if "verdict" in doc:
            found["answerable"] = doc["verdict"]["answerable"]
        return found
    return doc


def one_fault(
    lake: str, fault: str, workers: int, options: list[str], question: str | None, sizes: dict
) -> dict:
    port = free_port()
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in the finally below)
    server = subprocess.Popen(
        [sys.executable, "-m", "kg_platform.cli", "serve", "--lake", lake, "--port", str(port)]
        + ["--workers", str(workers), *options],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 300
        while call(port, "GET", "/healthz", timeout=2)[0] != 200:
            if server.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"kg serve did not start: {log.read()[-1500:]!r}")
            time.sleep(0.2)
        if question is None:  # the question the server made from its graph and answers
            question = call(port, "GET", "/status")[1].get("example_question")
            if question is None:
                raise RuntimeError("the server names no example question: pass --question")
        status, good = call(port, "POST", "/ask", {"question": question}, timeout=120)
        assert status == 200, good
        pointer_path = next(_files(lake, "graph", "current.json"))
        with open(pointer_path) as f:
            build_dir = os.path.join(os.path.dirname(pointer_path), json.load(f)["build_id"])
        if fault in EDGE:
            return {
                "fault": fault,
                "workers": workers,
                "options": " ".join(options),
                **EDGE[fault](port, server.pid, question, **sizes.get(fault, {})),
                "server_alive": server.poll() is None,
            }
        target = {
            "array": os.path.join(build_dir, "cite_indices.npy"),
            "index": next(_files(lake, "grounding", "index.kgi")),
        }.get(fault)
        kept = None
        if target is not None:
            with open(target, "rb") as f:
                kept = f.read()
            os.truncate(target, 0)
        else:
            pid = call(port, "GET", "/status")[1]["worker_pid"]
            os.kill(pid, signal.SIGBUS)
            time.sleep(1.0)
        started = time.perf_counter()
        ask_status, ask = call(port, "POST", "/ask", {"question": question})
        ask_s = round(time.perf_counter() - started, 2)
        health_status, health = call(port, "GET", "/healthz")
        time.sleep(3.0)
        later_status, later = call(port, "GET", "/healthz")
        alive = server.poll() is None
        if kept is not None:
            with open(target, "r+b") as f:
                f.write(kept)
        time.sleep(6.0)  # a worker without a build retries every 5 s
        repaired_status, repaired = call(port, "POST", "/ask", {"question": question})
        kept_serving = (
            ask_status == 200
            and isinstance(ask, dict)
            and (ask["graph_build"], ask["verdict"]) == (good["graph_build"], good["verdict"])
        )
        return {
            "fault": fault,
            "file": os.path.relpath(target, lake) if target else None,
            "workers": workers,
            "options": " ".join(options),
            "ask": {"status": ask_status, "seconds": ask_s, "doc": short(ask)},
            "last_good_build_kept_serving": kept_serving,
            "healthz": {"status": health_status, "doc": short(health)},
            "healthz_3s_later": {"status": later_status, "doc": short(later)},
            "server_alive": alive,
            "after_repair": {"status": repaired_status, "doc": short(repaired)},
        }
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        log.close()


def tree_peak_mb(root: int) -> float:
    """The largest peak RSS (VmHWM) of the process and its descendants, in MiB."""
    peaks, todo = [], [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/status") as f:
                peaks.append(next(int(x.split()[1]) for x in f if x.startswith("VmHWM:")))
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, StopIteration):
            continue
    return round(max(peaks) / 1024, 1)


def big_bodies(port: int, pid: int, question: str, n: int = 4, mb: int = 200) -> dict:
    """``n`` clients at once, each sending a ``mb`` MB chunked body to /ask."""
    import threading

    before = tree_peak_mb(pid)
    results: list[str] = []
    chunk = b"%x\r\n" % (1 << 20) + b" " * (1 << 20) + b"\r\n"

    def send() -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
            s.sendall(
                b"POST /ask HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            try:
                for _ in range(mb):
                    s.sendall(chunk)
                s.sendall(b"0\r\n\r\n")
            except OSError as error:
                results.append(f"send stopped: {type(error).__name__}")
            try:
                results.append(s.recv(4096).split(b"\r\n")[0].decode())
            except OSError as error:
                results.append(f"recv: {type(error).__name__}")

    started = time.perf_counter()
    threads = [threading.Thread(target=send) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {
        "clients": n,
        "body_mb": mb,
        "seconds": round(time.perf_counter() - started, 2),
        "replies": sorted(results),
        "peak_rss_mb_before": before,
        "peak_rss_mb_after": tree_peak_mb(pid),
        "ask_after": short(call(port, "POST", "/ask", {"question": question})[1]),
    }


def half_sent(port: int, pid: int, question: str, n: int = 1000, hold_s: float = 15.0) -> dict:
    """``n`` connections each sending half a request head, held ``hold_s`` seconds: how many
    the server closed, and a real question asked meanwhile."""
    sockets = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(b"POST /ask HTTP/1.1\r\nhost: x\r\n")
        s.setblocking(False)
        sockets.append(s)
    started = time.perf_counter()
    status, doc = call(port, "POST", "/ask", {"question": question}, timeout=60)
    ask_s = round(time.perf_counter() - started, 2)
    time.sleep(max(0.0, hold_s - (time.perf_counter() - started)))
    closed = 0
    for s in sockets:
        try:
            data = s.recv(4096)
            closed += data == b"" or data.startswith(b"HTTP/1.1 408")
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
        s.close()
    return {
        "connections": n,
        "held_s": hold_s,
        "closed_by_server": closed,
        "ask_meanwhile": {"status": status, "seconds": ask_s, "doc": short(doc)},
    }


EDGE = {"bodies": big_bodies, "half_sent": half_sent}


def _files(root: str, under: str, name: str):
    for folder, _, files in os.walk(os.path.join(root, under)):
        if name in files:
            yield os.path.join(folder, name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", default=None, help="default: the lake `kg build` recorded")
    parser.add_argument(
        "--question",
        default=None,
        help="a question the build answers (default: the one `kg serve` made from the graph)",
    )
    parser.add_argument(
        "--faults", nargs="+", default=["array", "index", "sigbus", "bodies", "half_sent"]
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--options", nargs="+", default=[""], help="`kg serve` option sets")
    parser.add_argument("--body-mb", type=int, default=200, help="bodies: MB each (200)")
    parser.add_argument("--connections", type=int, default=1000, help="half_sent: how many")
    parser.add_argument("--hold-s", type=float, default=15.0, help="half_sent: held this long")
    args = parser.parse_args()
    sizes = {
        "bodies": {"mb": args.body_mb},
        "half_sent": {"n": args.connections, "hold_s": args.hold_s},
    }
    source = args.lake or Settings.load().lake
    rows = []
    with tempfile.TemporaryDirectory(prefix="serve-faults-") as scratch:
        lake = shutil.copytree(source, os.path.join(scratch, "lake"))
        for options in args.options:
            for workers in args.workers:
                for fault in args.faults:
                    row = one_fault(
                        lake, fault, workers, shlex.split(options), args.question, sizes
                    )
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    print(json.dumps({"lake": source, "loadavg": os.getloadavg(), "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
