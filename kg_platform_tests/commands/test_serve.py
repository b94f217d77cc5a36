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
from pathlib import Path

import pytest

from kg_platform.graph import layout
from kg_platform.grounding.index import build_grounding_index
from kg_platform.storage.lake import Lake
from kg_platform_tests.answer.graph_fixture import build_question_graph
from kg_platform_tests.e2e.platform import browser_page

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


@pytest.fixture(scope="module")
def server(lake, tmp_path_factory):
    port = _free_port()
    home = tmp_path_factory.mktemp("home")
    log = open(home / "serve.log", "w")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kg_platform.cli",
            "serve",
            "--lake",
            lake.root,
            "--port",
            str(port),
            "--workers",
            "2",  # two processes: /reload in one must reach the other
            "--heavy-candidates",
            "1",  # the aspirin pair (4 candidates) goes through the heavy lane, heparin's not
        ],
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
    yield base, home
    process.terminate()
    process.wait(timeout=30)
    log.close()


def _request(url: str, data: bytes | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
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
        ({"question": 7}, 422, "question: expected text, got int"),
        ({}, 422, "question: missing"),
        ({"question": ANSWERED, "top_k": 0}, 422, "top_k: 0 is outside 1..100"),
        ({"question": ANSWERED, "as_of": "2001"}, 422, "as_of: expected an integer, got str"),
        ({"question": ANSWERED, "path": "/etc"}, 422, "body: unknown fields ['path']"),
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
    request = urllib.request.Request(base + "/ask", data=b"{not json", method="POST")
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=60)
    assert raised.value.code == 400
    assert json.loads(raised.value.read())["error"].startswith("body: not JSON")
    assert _get(base + "/search?q=")[1] == {"error": "q: empty"}
    assert _get(base + "/search?q=aspirin&k=0")[0] == 422
    # the question graph has no embedding index: a clear 503, never a traceback
    status, doc = _get(base + "/search?q=aspirin")
    assert status == 503 and "materialise embedding_index" in doc["error"]


def test_status_health_and_openapi(server, lake) -> None:
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
    schema = _get(base + "/openapi.json")[1]
    assert set(schema["paths"]) == {"/ask", "/search", "/status", "/healthz", "/reload"}
    assert set(schema["paths"]["/ask"]["post"]["responses"]) == {"200", "400", "422"}


def test_page_in_headless_chromium(server) -> None:
    from playwright.sync_api import expect

    base = server[0]
    with browser_page("serve_failure.png") as page:
        page.goto(base + "/")
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
