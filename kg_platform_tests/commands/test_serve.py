"""`kg serve --workers 2` in a subprocess on a free port over the small real-MeSH question
graph (with its load-ready grounding index and title store): /ask is `kg ask --json` for an
answer and for refusals, bad input is a 4xx with a message, /reload in one worker makes both
serve a newly published build, and the page works in headless Chromium (Debian's, driven by
Playwright)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from kg_platform.graph import layout
from kg_platform.grounding.index import build_grounding_index
from kg_platform.storage.lake import Lake
from kg_platform_tests.answer.graph_fixture import build_question_graph
from kg_platform_tests.support.platform import browser_page

ANSWERED = "Does aspirin prevent myocardial infarction?"
NOT_QUOTABLE = "Does heparin prevent pulmonary embolism?"
NONSENSE = "Is the colour of a quiet afternoon louder than its shadow?"
VOLATILE = ("timings_ms", "start_up_ms")  # measured, not part of what must agree


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    return {**env, "KG_HOME": str(home)}


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Lake:
    lake = Lake(str(tmp_path_factory.mktemp("serve") / "lake"))
    build_question_graph(lake)
    build_grounding_index(lake)
    return lake


@contextmanager
def running_server(lake_root: str, home: Path, *options: str):
    """`kg serve --lake LAKE_ROOT OPTIONS` in a subprocess on a free port, its output in
    HOME/serve.log: (the process, its base URL) once /healthz answers."""
    port = _free_port()
    log = open(home / "serve.log", "w")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(
        [sys.executable, "-m", "kg_platform.cli", "serve", "--lake", lake_root]
        + ["--port", str(port), *options],
        env=_env(home),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180  # a loaded 2-core machine starts Python slowly
    while True:
        try:
            if _get(base + "/healthz")[0] == 200:
                break
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"kg serve did not start: {(home / 'serve.log').read_text()[-2000:]}")
        time.sleep(0.05)  # polls /healthz: the wait ends as soon as it answers
    try:
        yield process, base
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def server(lake, tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    with running_server(
        lake.root,
        home,
        "--workers",
        "2",  # two processes: /reload in one must reach the other
        "--heavy-candidates",
        "1",  # the aspirin pair (4 candidates) goes through the heavy lane, heparin's not
        "--read-timeout",
        "3",  # a half-sent request is dropped after 3 s
    ) as (_, base):
        yield base, home


def _request(url: str, data: bytes | None = None, headers: dict | None = None) -> tuple[int, dict]:
    headers = headers if headers is not None else {"content-type": "application/json"}
    request = urllib.request.Request(
        url, data=data, method="POST" if data is not None else "GET", headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _get(url: str) -> tuple[int, dict]:
    return _request(url)


def _post(url: str, body: object) -> tuple[int, dict]:
    return _request(url, json.dumps(body).encode())


def _kg_ask(lake: Lake, home: Path, questions: list[str]) -> list[dict]:
    """`kg ask QUESTION --json` for each question, the processes run side by side."""
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "kg_platform.cli", "ask", q, "--json", "--lake", lake.root],
            env=_env(home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for q in questions
    ]
    docs = []
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        docs.append(json.loads(out))
    return docs


def _stable(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in VOLATILE}


def test_ask_is_kg_ask_json(server, lake) -> None:
    base, home = server
    seen = {}
    questions = [ANSWERED, NOT_QUOTABLE, NONSENSE]
    for question, cli in zip(questions, _kg_ask(lake, home, questions), strict=True):
        status, served = _post(base + "/ask", {"question": question})
        assert status == 200
        assert list(served) == list(cli)  # the same keys in the same order
        assert _stable(served) == _stable(cli), question
        seen[question] = served["verdict"]
    assert seen[ANSWERED]["answerable"] is True
    assert (seen[NOT_QUOTABLE]["gate"], seen[NOT_QUOTABLE]["reason"]) == (
        4,
        "no_quotable_terminal",
    )
    assert (seen[NONSENSE]["gate"], seen[NONSENSE]["reason"]) == (1, "no_mesh_entry_point")
    status, top1 = _post(base + "/ask", {"question": ANSWERED, "top_k": 1})
    assert [e["pmid"] for e in top1["evidence"]] == [100]


def test_both_workers_answer_questions_under_a_path_budget(server, lake) -> None:
    """16 clients at once, a connection each, ask under a path budget: every answer is the
    one asked in this process with the same budget, `path_search` included (the aspirin
    pair's 2 citation links read of 2, not cut), and the request log shows that both
    worker processes answered POST /ask."""
    from concurrent.futures import ThreadPoolExecutor

    from kg_platform.answer.api import KnowledgeGraph

    base, home = server
    want = _stable(KnowledgeGraph.open(lake).ask(ANSWERED, path_budget_ms=60_000).to_json())
    assert want["path_search"] == {
        "budget_ms": 60000.0,
        "cut": False,
        "links_read": 2,
        "links": 2,
    }
    log = home / "serve.log"
    start = log.stat().st_size
    body = {"question": ANSWERED, "path_budget_ms": 60_000}
    answered: set[int] = set()
    with ThreadPoolExecutor(16) as pool:
        for _ in range(20):  # rounds of 16 until both workers have answered one
            for status, doc in pool.map(lambda _: _post(base + "/ask", body), range(16)):
                assert status == 200
                assert {k: v for k, v in _stable(doc).items() if k != "partition"} == want
            with open(log, "rb") as f:
                f.seek(start)
                lines = f.read().decode().splitlines()
            answered = {
                int(line.split("[", 1)[1].split("]", 1)[0])
                for line in lines
                if " POST /ask 200 " in line
            }
            if len(answered) == 2:
                break
    assert answered == set(_workers(base))


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"question": ""}, 422, "question: empty"),
        ({"question": "   "}, 422, "question: empty"),
        ({"question": "x" * 1001}, 422, "question: 1001 characters, the limit is 1000"),
        (
            {"question": "aspirin\x00; rm -rf /"},
            422,
            "question: contains control characters (U+0000)",
        ),  # fmt: skip
        ({"question": "aspirin\r\x1b[31m"}, 422, "question: contains control characters (U+001B)"),
        (
            {"question": "\ud800 aspirin"},
            422,
            "question: not valid Unicode text (lone surrogates U+D800)",
        ),
        ({"question": 7}, 422, "question: expected text, got int"),
        ({}, 422, "question: missing"),
        ({"question": ANSWERED, "top_k": 0}, 422, "top_k: 0 is outside 1..100"),
        ({"question": ANSWERED, "top_k": 10**12}, 422, "top_k: 1000000000000 is outside 1..100"),
        ({"question": ANSWERED, "as_of": "2001"}, 422, "as_of: expected an integer, got str"),
        ({"question": ANSWERED, "path": "/etc"}, 422, "body: unknown fields ['path']"),
        (
            {"question": ANSWERED, "path_budget_ms": 0},
            422,
            "path_budget_ms: '0' is not a number of milliseconds in (0, 600000]",
        ),
        (
            {"question": ANSWERED, "path_budget_ms": "50"},
            422,
            "path_budget_ms: '50' is not a number of milliseconds in (0, 600000]",
        ),
        (
            {"question": ANSWERED, "path_budget_ms": True},
            422,
            "path_budget_ms: 'True' is not a number of milliseconds in (0, 600000]",
        ),
        ({"question": ANSWERED, "release": "../../etc"}, 400, "release '../../etc': not served"),
        (["not", "an", "object"], 400, "body: expected a JSON object"),
    ],
)
def test_bad_input_is_a_4xx_with_a_message(server, body, status, message) -> None:
    got_status, doc = _post(server[0] + "/ask", body)
    assert got_status == status
    assert doc["error"].startswith(message), doc


def test_malformed_bodies_and_search_input(server) -> None:
    base = server[0]
    status, doc = _request(base + "/ask", b"{not json")
    assert status == 400 and doc["error"].startswith("body: not JSON"), doc
    # bytes that are not UTF-8, and a content type that is not JSON
    assert _request(base + "/ask", b'{"question": "\xff aspirin"}') == (
        422,
        {"error": "body: not UTF-8 (byte 14: b'\\xff')"},
    )
    assert _request(base + "/ask", b'{"question": "a"}', {"content-type": "text/plain"}) == (
        415,
        {"error": "content-type 'text/plain': the body must be application/json"},
    )
    assert _get(base + "/search?q=")[1] == {"error": "q: empty"}
    assert _get(base + "/search?q=aspirin&k=0")[0] == 422
    # the question graph has no embedding index: a clear 503, never a traceback
    status, doc = _get(base + "/search?q=aspirin")
    assert status == 503 and "materialise embedding_index" in doc["error"]
    # no such route, no such method: JSON like every other error
    assert _get(base + "/nowhere") == (
        404,
        {"error": "GET /nowhere: no such route (the API is described at /docs)"},
    )
    assert _get(base + "/ask") == (405, {"error": "GET /ask: method not allowed (allowed: POST)"})


def _raw(base: str, payload: bytes, then_wait: bool = True) -> tuple[bytes, float]:
    """Send ``payload`` on a new connection and read until the server closes it: (what it
    answered, seconds it took)."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(payload)
        started, got = time.monotonic(), b""
        while chunk := s.recv(65536):
            got += chunk
        return got, time.monotonic() - started


def test_bodies_are_limited_while_read_and_half_sent_requests_time_out(server) -> None:
    base = server[0]
    # a chunked body with no length: refused as soon as 64 KiB have arrived, the rest unread
    head = b"POST /ask HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    chunk = b"4000\r\n" + b" " * 0x4000 + b"\r\n"
    got, _ = _raw(base, head + b"transfer-encoding: chunked\r\n\r\n" + chunk * 5)
    assert got.startswith(b"HTTP/1.1 413 ") and got.endswith(
        b'{"error":"body: more than 65536 bytes"}'
    )
    # a declared length over the limit: refused before any of it is read
    got, _ = _raw(base, head + b"content-length: 209715200\r\n\r\n{")
    assert got.endswith(b'{"error":"body: 209715200 bytes, at most 65536"}')
    # half a head, and half a body: 408 after the 3 s read timeout, and the connection closed
    got, waited = _raw(base, b"POST /ask HTTP/1.1\r\nhost: x\r\n")
    assert got.startswith(b"HTTP/1.1 408 ") and got.endswith(
        b'{"error": "request head not received within 3 s"}'
    )
    assert waited >= 2.5
    got, waited = _raw(base, head + b"content-length: 100\r\n\r\n{")
    assert got.startswith(b"HTTP/1.1 408 ") and got.endswith(
        b'{"error":"body: not received within 3 s"}'
    )


def test_a_request_log_line_per_request(server) -> None:
    base, home = server
    _get(base + "/status?probe=log%0Aline")
    deadline = time.monotonic() + 30
    while True:  # the line is written as the response goes out
        lines = (home / "serve.log").read_text().splitlines()
        logged = [line for line in lines if "GET /status?probe=log%0Aline 200 " in line]
        if logged or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(logged) == 1, lines[-5:]
    assert " 127.0.0.1 GET /status?probe=log%0Aline 200 " in logged[0]
    assert logged[0].endswith(" ms")


def test_kg_ask_and_the_api_share_their_bounds(server, capsys) -> None:
    """`kg ask` refuses what /ask refuses, with the same words (one definition)."""
    import argparse

    from kg_platform.commands.ask import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    for argv, body in [
        (["\ud800 aspirin"], {"question": "\ud800 aspirin"}),
        (["a\x07b"], {"question": "a\x07b"}),
        (["x" * 1001], {"question": "x" * 1001}),
        ([ANSWERED, "--top-k", str(10**12)], {"question": ANSWERED, "top_k": 10**12}),
        ([ANSWERED, "--top-k", "0"], {"question": ANSWERED, "top_k": 0}),
    ]:
        args = parser.parse_args(["ask", *argv, "--lake", "/nonexistent"])
        assert args.func(args) == 2
        status, doc = _post(server[0] + "/ask", body)
        said = capsys.readouterr().err
        assert status == 422
        assert said == "kg ask: " + doc["error"].replace("top_k", "--top-k") + "\n"


def test_status_health_and_openapi(server, lake) -> None:
    from openapi_spec_validator import validate

    base = server[0]
    build = layout.current_build_id(lake)
    assert _get(base + "/healthz") == (200, {"ok": True, "graph_build": build})
    status, doc = _get(base + "/status")
    assert (status, doc["graph_build"], doc["articles"], doc["ranker"]) == (
        200,
        build,
        8,
        "structural",
    )
    assert {k: doc["heavy_lane"][k] for k in ("threshold", "slots")} == {"threshold": 1, "slots": 1}
    # every file of the build (and the grounding index) under 16 MiB: read into memory
    assert (doc["files"]["mapped"], doc["files"]["damaged"]) == (0, [])
    assert doc["files"]["copied"] == len(layout.read_manifest(lake, build)["arrays"]) + 1
    schema = _get(base + "/openapi.json")[1]
    validate(schema)  # a valid OpenAPI 3.0 description
    assert set(schema["paths"]) == {"/ask", "/search", "/status", "/healthz", "/reload"}
    assert schema["paths"]["/ask"]["post"]["responses"]["422"] == {
        "description": "a field with a bad value (empty, too long, control characters, not UTF-8)"
    }
    assert set(schema["paths"]["/ask"]["post"]["responses"]) == {
        "200", "400", "408", "413", "415", "422", "503"
    }  # fmt: skip


def test_page_in_headless_chromium(server, lake) -> None:
    from playwright.sync_api import expect

    from kg_platform.answer.api import KnowledgeGraph
    from kg_platform.answer.examples import answerable_examples
    from kg_platform.serving.page import NO_READER_NOTE

    base = server[0]
    # the placeholder is a question made from this graph that it answers
    (example,) = answerable_examples(KnowledgeGraph.open(lake), 1)
    assert example == "Is there a link between Aspirin and Myocardial Infarction?"
    with browser_page("serve_failure.png") as page:
        page.goto(base + "/")
        box = page.get_by_label("question")
        assert box.get_attribute("placeholder") == example
        expect(page.locator("#reader-note")).to_have_text(NO_READER_NOTE)
        expect(page.locator("#synthetic-note")).to_have_count(0)  # a lake of its own
        box.fill(example)
        page.get_by_role("button", name="Ask").click()
        expect(page.locator("#verdict")).to_have_text(
            "Answerable: the graph holds evidence for this question."
        )
        expect(page.locator("#answer")).to_have_text(
            "No reader loaded: no yes/no answer, the evidence above is the answer."
        )
        page.get_by_label("question").fill(ANSWERED)
        page.get_by_role("button", name="Ask").click()
        verdict = page.locator("#verdict")
        expect(verdict).to_have_text("Answerable: the graph holds evidence for this question.")
        links = page.locator("#evidence a.pmid")
        expect(links).to_have_count(5)  # 100; 200 -> 300; 100 <- 400
        hrefs = [links.nth(i).get_attribute("href") for i in range(5)]
        assert hrefs == [f"https://pubmed.ncbi.nlm.nih.gov/{p}/" for p in (100, 200, 300, 100, 400)]
        expect(page.locator("#pair")).to_contain_text("Aspirin + Myocardial Infarction")
        expect(page.locator("#groundings li")).to_have_count(2)
        page.get_by_label("question").fill(NONSENSE)
        page.get_by_role("button", name="Ask").click()
        expect(verdict).to_have_text("Refused at gate 1 (no mesh entry point).")
        expect(page.locator("#evidence")).to_have_text("no evidence shown")
        page.get_by_label("question").fill("")
        page.get_by_role("button", name="Ask").click()
        expect(page.locator("#error")).to_have_text("question: empty")


def test_workers_follow_a_reload_through_the_shared_generation(lake, tmp_path) -> None:
    """Two services in this process sharing one Generation file, as two workers do: a reload
    in one makes the other reopen before its next request; a reload whose build cannot be
    opened raises, leaves the counter alone and the other worker untouched."""
    from kg_platform.serving.service import Generation, GraphService

    path = str(tmp_path / "generation")
    Generation.create(path)

    def choose():
        return lake, {"release": None, "mesh_year": None}

    first = GraphService(choose, None, Generation(path), kernels=False)
    second = GraphService(choose, None, Generation(path), kernels=False)
    opened = second.current
    assert first.reload()["graph_build"] == opened.build_id
    assert Generation(path).value == 1
    assert second.current is not opened  # reopened before answering
    assert (first.reloads, second.reloads, second.current is second.current) == (1, 1, True)

    def missing():
        raise FileNotFoundError("no graph here")

    first.choose = missing
    with pytest.raises(FileNotFoundError):
        first.reload()
    assert Generation(path).value == 1
    assert (first.current.build_id, second.reloads) == (opened.build_id, 1)


def test_reload_serves_a_newly_published_build(server, lake) -> None:
    """Last in the module: it publishes another build of the question graph (article 100
    gets a new title), which the server answers from only after /reload."""
    base = server[0]
    before = layout.current_build_id(lake)
    build_question_graph(lake, texts={100: ("Aspirin after infarction, revisited", "Text.")})
    after = layout.current_build_id(lake)
    assert after != before
    assert _post(base + "/ask", {"question": ANSWERED})[1]["graph_build"] == before
    status, done = _post(base + "/reload", {})
    assert (status, done["changed"], done["previous_graph_build"], done["graph_build"]) == (
        200,
        True,
        before,
        after,
    )
    for _ in range(8):  # whichever worker answers
        _, doc = _post(base + "/ask", {"question": ANSWERED})
        assert (doc["graph_build"], doc["evidence"][0]["title"]) == (
            after,
            "Aspirin after infarction, revisited",
        )
    # both workers serve the new build (the reload reached the one that did not receive it)
    workers = _workers(base)
    assert (len(workers), set(workers.values())) == (2, {after})


def _workers(base: str) -> dict[int, str]:
    """Worker pid -> the build it serves, asking /status (each request a new connection,
    which either worker may accept) until both answered."""
    seen: dict[int, str] = {}
    for _ in range(400):
        _, doc = _get(base + "/status")
        seen[doc["worker_pid"]] = doc["graph_build"]
        if len(seen) == 2:
            break
    return seen


def test_heavy_lane_queues_large_pairs_and_lets_small_ones_pass(lake) -> None:
    """With the lane's one slot taken, a question whose pair has more candidates than the
    threshold waits for it and then gets the same answer; a question whose pair has fewer
    is answered meanwhile; a refusal with no pair never enters the lane."""
    import threading

    from kg_platform.answer.api import KnowledgeGraph
    from kg_platform.retrieval.paths import candidate_bound
    from kg_platform.serving.service import HeavyLane

    kg = KnowledgeGraph.open(lake)
    plain = {q: kg.ask(q) for q in (ANSWERED, NOT_QUOTABLE, NONSENSE)}
    bounds = {q: candidate_bound(kg.store, a.chosen_pair) for q, a in plain.items() if a.pairs}
    assert bounds == {ANSWERED: 4, NOT_QUOTABLE: 1}
    lane = HeavyLane(threshold=1)
    admit = lane.admit(kg.store)
    got = {}

    def ask(question: str) -> None:
        got[question] = kg.ask(question, admit=admit)

    holder = admit(plain[ANSWERED].chosen_pair)  # a heavy search in progress elsewhere
    holder.__enter__()
    assert lane.heavy_searches == 1
    waiting = threading.Thread(target=ask, args=(ANSWERED,))
    waiting.start()
    while lane.heavy_searches < 2:  # counted as it reaches the lane, before it waits
        time.sleep(0.01)
    for question in (NOT_QUOTABLE, NONSENSE):  # not heavy: answered while the slot is held
        ask(question)
    assert waiting.is_alive() and ANSWERED not in got  # it cannot pass the held slot
    holder.__exit__(None, None, None)
    waiting.join(timeout=120)
    assert not waiting.is_alive()
    assert lane.heavy_searches == 2
    for question, answer in plain.items():
        assert _stable(got[question].to_json()) == _stable(answer.to_json())
    with pytest.raises(ValueError, match="heavy lane: threshold -1"):
        HeavyLane(threshold=-1)


def test_a_negative_heavy_candidates_is_refused_by_name(lake, tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kg_platform.cli", "serve", "--lake", lake.root]
        + ["--heavy-candidates", "-1"],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stderr.strip()) == (
        2,
        "kg serve: --heavy-candidates -1: must be 0 or more",
    )


def test_the_synthetic_demo_corpus_is_recognised(tmp_path, monkeypatch) -> None:
    from kg_platform.serving.page import corpus_is_synthetic

    monkeypatch.setenv("KG_HOME", str(tmp_path))
    for name in [k for k in os.environ if k.startswith("KG_") and k != "KG_HOME"]:
        monkeypatch.delenv(name)
    assert corpus_is_synthetic(None) is False  # NLM, no synthetic corpus written
    (tmp_path / "synthetic" / "baseline").mkdir(parents=True)
    assert corpus_is_synthetic(None) is True  # NLM unreachable: `kg build` wrote it
    assert corpus_is_synthetic(str(tmp_path / "elsewhere")) is False  # not the home's lake


def _truncate(path: str) -> bytes:
    """Truncate the file to 0 bytes in place (the same inode, as outside damage does); its
    bytes before, to put back."""
    with open(path, "rb") as f:
        kept = f.read()
    os.truncate(path, 0)
    return kept


def _put_back(path: str, data: bytes) -> None:
    with open(path, "r+b") as f:  # in place: the served map sees the bytes again
        f.write(data)


def test_mapped_files_damaged_under_a_running_server(lake, tmp_path) -> None:
    """Every file mapped (``--copy-below-mib 0``), then each kind truncated in place under
    the running server: a 503 naming the file, never a dead process; a worker killed by
    SIGBUS is replaced, and /healthz says so; the repaired file is served again."""
    import shutil
    import signal

    root = shutil.copytree(lake.root, tmp_path / "lake")
    build = layout.current_build_id(lake)
    cite = str(root / layout.array_key(build, "cite_indices"))
    index = str(root / "grounding" / "index.kgi")
    with running_server(str(root), tmp_path, "--workers", "1", "--copy-below-mib", "0") as (
        process,
        base,
    ):
        status, before = _post(base + "/ask", {"question": ANSWERED})
        assert status == 200 and before["verdict"]["answerable"] is True
        files = _get(base + "/status")[1]["files"]
        assert (files["copied"], files["damaged"]) == (0, [])
        for path in (index, cite):
            size = os.path.getsize(path)
            data = _truncate(path)
            damage = f"{path}: 0 bytes on disk, {size} when it was opened"
            status, doc = _post(base + "/ask", {"question": ANSWERED})
            assert status == 503 and doc["error"].startswith(damage + ": a file of the served")
            assert _get(base + "/healthz") == (
                503,
                {"ok": False, "error": doc["error"], "graph_build": build},
            )
            _put_back(path, data)
            status, again = _post(base + "/ask", {"question": ANSWERED})
            assert (status, _stable(again)) == (200, _stable(before))
        # the worker dies of a SIGBUS (a read racing the damage): the supervisor starts
        # another, which finds the damaged file when it opens the build and stays up
        data = _truncate(cite)
        dead = _get(base + "/status")[1]["worker_pid"]  # status reads no array
        os.kill(dead, signal.SIGBUS)
        deadline = time.monotonic() + 120
        while True:
            try:
                status, health = _get(base + "/healthz")
                if health.get("last_worker_death"):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert process.poll() is None
        assert status == 503
        assert health["last_worker_death"]["cause"] == "killed by SIGBUS"
        assert (health["last_worker_death"]["pid"], health["worker_restarts"]) == (dead, 1)
        assert health["error"].startswith("no graph build can be served: ")
        assert cite in health["error"]
        status, doc = _post(base + "/ask", {"question": ANSWERED})
        assert status == 503 and cite in doc["error"]
        _put_back(cite, data)  # repaired: the new worker opens it on its next try (5 s)
        deadline = time.monotonic() + 60
        while _get(base + "/healthz")[0] != 200:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        status, again = _post(base + "/ask", {"question": ANSWERED})
        assert (status, _stable(again)) == (200, _stable(before))
    log = (tmp_path / "serve.log").read_text()
    assert f"kg serve: worker {dead} killed by SIGBUS; starting another in 0 s" in log


def test_copied_files_keep_serving_the_last_good_build(lake, tmp_path) -> None:
    """The default policy reads this small build into memory: each kind of file truncated
    under the running server, it keeps answering from the copy, /healthz names the
    damaged files, and a reload (which would open them) is refused with the old build kept."""
    import shutil

    root = shutil.copytree(lake.root, tmp_path / "lake")
    build = layout.current_build_id(lake)
    cite = str(root / layout.array_key(build, "cite_indices"))
    index = str(root / "grounding" / "index.kgi")
    with running_server(str(root), tmp_path, "--workers", "1") as (process, base):
        status, before = _post(base + "/ask", {"question": ANSWERED})
        assert status == 200
        sizes = {path: os.path.getsize(path) for path in (index, cite)}
        for path in (index, cite):
            _truncate(path)
        status, after = _post(base + "/ask", {"question": ANSWERED})
        assert (status, _stable(after)) == (200, _stable(before))
        status, health = _get(base + "/healthz")
        assert (status, health["ok"], health["graph_build"]) == (200, True, build)
        assert sorted(health["damaged_on_disk"]) == sorted(
            f"{path}: 0 bytes on disk, {size} when it was opened" for path, size in sizes.items()
        )
        status, doc = _post(base + "/reload", {})
        assert (status, doc["graph_build"]) == (503, build)
        assert cite in doc["error"]
        assert _post(base + "/ask", {"question": ANSWERED})[0] == 200
        assert process.poll() is None


def test_the_supervisor_backs_off_when_deaths_repeat() -> None:
    from kg_platform.serving.edge import backoff_after, death_cause

    assert [backoff_after(n) for n in range(1, 10)] == [0, 1, 2, 4, 8, 16, 32, 60, 60]
    assert (death_cause(-7), death_cause(1), death_cause(None)) == (
        "killed by SIGBUS",
        "exited with code 1",
        "did not answer the supervisor's health check",
    )


def test_an_answer_read_while_its_file_shrank_is_withheld(lake, tmp_path, monkeypatch) -> None:
    """A mapped file truncated while a question reads it, to a size that keeps its last page
    (the lost bytes read as zeros, no SIGBUS): the answer is a 503 naming the file, not an
    answer computed from zeros. The service's own app, called as uvicorn calls it."""
    import asyncio
    import shutil
    from contextlib import nullcontext

    from kg_platform.serving.app import build_app
    from kg_platform.serving.service import GraphService
    from kg_platform.storage import mapped

    monkeypatch.setitem(mapped._policy, "watch", True)  # `kg serve`'s policy, every file mapped
    monkeypatch.setitem(mapped._policy, "copy_below", 0)
    root = shutil.copytree(lake.root, tmp_path / "lake")
    build = layout.current_build_id(lake)
    cite = str(root / layout.array_key(build, "cite_indices"))
    size = os.path.getsize(cite)

    class TruncatingLane:  # entered around the pair's path search, inside the question
        def admit(self, store):
            def enter(pair):
                os.truncate(cite, size - 4)  # the same page: no SIGBUS, 4 bytes read as 0
                return nullcontext()

            return enter

    service = GraphService(
        lambda: (Lake(str(root)), {"release": None, "mesh_year": None}),
        kernels=False,
        lane=TruncatingLane(),  # type: ignore[arg-type]
    )
    app = build_app(service)

    async def ask() -> tuple[int, dict]:
        body = json.dumps({"question": ANSWERED}).encode()
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        sent: list[dict] = []

        async def receive():
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/ask",
            "raw_path": b"/ask",
            "root_path": "",
            "query_string": b"",
            "headers": [(b"content-type", b"application/json")],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
        }
        await app(scope, receive, send)
        return sent[0]["status"], json.loads(b"".join(m.get("body", b"") for m in sent[1:]))

    status, doc = asyncio.run(ask())
    assert (status, doc) == (
        503,
        {
            "error": f"{cite}: {size - 4} bytes on disk, {size} when it was opened: changed "
            "under the server while the question was read"
        },
    )


def test_kg_serve_starts_a_worker_per_usable_core_by_default() -> None:
    """Without --workers, one worker per core the process may run on (its CPU affinity):
    a `kg serve` pinned to one core starts one; --workers still says how many."""
    from kg_platform.cli import build_parser
    from kg_platform.commands.serve import workers_of

    parser = build_parser("serve")
    before = os.sched_getaffinity(0)
    assert workers_of(parser.parse_args(["serve"])) == len(before)
    assert workers_of(parser.parse_args(["serve", "--workers", "3"])) == 3
    os.sched_setaffinity(0, {min(before)})
    try:
        assert workers_of(parser.parse_args(["serve"])) == 1
    finally:
        os.sched_setaffinity(0, before)


def test_a_burst_of_keep_alive_connections_is_spread_over_the_workers(server) -> None:
    """16 clients that connect at once and keep their connections (as benchmarks/serve.py's
    do) reach both workers: each worker accepts on a socket of its own (SO_REUSEPORT), so
    the first to wake cannot accept the whole burst and leave the other idle. Each pid
    answers on the connection it accepted, request after request."""
    import http.client
    from urllib.parse import urlsplit

    host, port = urlsplit(server[0]).hostname, urlsplit(server[0]).port
    connections = [http.client.HTTPConnection(host, port, timeout=60) for _ in range(16)]
    for connection in connections:
        connection.connect()
    pids = []
    for _ in range(2):
        for connection in connections:
            connection.request("GET", "/status")
            response = connection.getresponse()
            assert response.status == 200
            pids.append(json.loads(response.read())["worker_pid"])
    for connection in connections:
        connection.close()
    assert pids[:16] == pids[16:]  # keep-alive: the same worker on each connection
    assert len(set(pids)) == 2, pids  # both workers took part of the burst
