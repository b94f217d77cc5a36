"""A `kg build` killed outright (SIGKILL to its whole process group: the CLI, its code server
and its runs) during a download, during a parse and during the fold: `kg status` says which
partitions lost their process, and the next `kg build` recovers and goes on, and the last one
finishes and leaves the lake exactly as a clean build does (no staging, no temporary file,
the same bytes).

The three kills happen in turn on one home: the build after the download is killed is the
one killed during the parse, and the build after that is killed during the fold, so each
build after a kill is seen to recover and get further than the point it was killed at. The
source is a synthetic release in NLM's format served over HTTP by a real server that can
hold a download half sent; its files are big enough that a parse and the fold take a while."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kg_platform_tests.conftest import require_reference, use_kg_home
from kg_platform_tests.sources.mirror_server import serve_mirror
from kg_platform_tests.support.build import BUILD_TIMEOUT_S, SELECT, kg_env
from kg_platform_tests.support.launcher import in_process_runs

RECORDS = 24_000
FIRST = "pubmed26n0001"
RAW_FIRST = f"raw/pubmed/26/baseline/{FIRST}.xml.gz"
FILES = (FIRST, "pubmed26n0002", "pubmed26n0003")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from kg_platform.pubmed.synthetic import write_synthetic_release

    folder = tmp_path_factory.mktemp("release")
    write_synthetic_release(folder, RECORDS, n_baseline_files=2, n_update_files=1)
    with serve_mirror(folder) as (url, state):
        yield url, state


def kg(
    home: Path, url: str, command: str = "build", env: dict[str, str] | None = None, **popen
) -> subprocess.Popen:
    args = [sys.executable, "-m", "kg_platform.cli", command]
    if command == "build":
        args += ["--pubmed-source", url, "--mesh-source", str(require_reference("mesh"))]
        args += ["--select", SELECT, "--jobs", "2"]
    return subprocess.Popen(
        args,
        # unbuffered: a killed build's lines so far are in its pipe
        env={**kg_env(home), "PYTHONUNBUFFERED": "1", **(env or {})},
        cwd=home.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def finished(process: subprocess.Popen) -> tuple[int, str]:
    # a bound on waiting for a real build, not a figure the test asserts
    out, err = process.communicate(timeout=BUILD_TIMEOUT_S)
    return process.returncode, out + err


def lake_files(lake: Path) -> dict[str, str]:
    """relative path -> sha256 of every file in the lake (staging and temporaries included).
    The fold's manifest names each per-file table by its size and modification time, which
    differ between two builds of the same bytes: its stamps are compared by file name only."""

    def digest(path: Path) -> str:
        if path.name == "manifest.json" and path.parent.name == "fold":
            manifest = json.loads(path.read_text())
            manifest["stamps"] = sorted(manifest["stamps"])
            return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()
        return hashlib.sha256(path.read_bytes()).hexdigest()

    return {str(p.relative_to(lake)): digest(p) for p in sorted(lake.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def clean_lake(served, tmp_path_factory) -> dict[str, str]:
    """The lake of one clean build: the reference the recovered lake must equal. Its runs run
    in the build's process and parse there (support/launcher.py, KG_PARSE_WORKERS=1): the
    builds killed and recovered below are the ones with a process per run and a parse pool."""
    url, _ = served
    home = tmp_path_factory.mktemp("clean") / "kg"
    in_process_runs(home)
    code, output = finished(kg(home, url, env={"KG_PARSE_WORKERS": "1"}))
    assert code == 0, output
    files = lake_files(home / "lake")
    # each table a part per bucket holding the release's PMIDs (the synthetic PMIDs all fall
    # in one bucket of 250,000)
    assert {f for f in files if f.startswith("corpus/")} == {
        f"corpus/pubmed26/{t}/part-{b:05d}.parquet"
        for t in ("articles", "mesh_edges", "citations", "corrections", "chemicals", "pubtypes")
        for b in (120,)
    } | {"corpus/pubmed26/fold/manifest.json", "corpus/pubmed26/fold/deletions.parquet"}
    return files


def during_download(lake: Path, state) -> bool:
    return state.holding.is_set()


def during_parse(lake: Path, state) -> bool:
    # the file is downloaded and verified; its tables are not published yet
    return (lake / RAW_FIRST).exists() and not (lake / f"tables/articles/{FIRST}.parquet").exists()


def during_fold(lake: Path, state) -> bool:
    # the fold's scratch folder (named by its process) exists while it folds
    staging = lake / ".staging"
    return staging.is_dir() and any(p.name.startswith("~") for p in staging.iterdir())


def killed_at(build: subprocess.Popen, point: str, when: Callable, lake: Path, state) -> str:
    """Wait for ``point``, SIGKILL the build's process group, and return what it printed."""
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    while not when(lake, state):
        assert build.poll() is None, f"the build ended before the {point}: {finished(build)}"
        assert time.monotonic() < deadline, f"no {point} within {BUILD_TIMEOUT_S} s"
        time.sleep(0.01)
    os.killpg(build.pid, signal.SIGKILL)
    out, err = build.communicate(timeout=60)
    # the session's other processes go with the signal; wait until the kernel has them all
    while time.monotonic() < deadline:
        try:
            os.killpg(build.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.01)
    return out + err


def status_lines(capsys, code: int = 0) -> list[str]:
    """`kg status` run in this process, on the instance of KG_HOME, line by line (``code``:
    its exit status, 1 while a partition is failed)."""
    from kg_platform.cli import main

    assert main(["status"]) == code
    return capsys.readouterr().out.splitlines()


POINTS = [
    # (the point, when it is reached, the partition whose process is then gone)
    ("download", during_download, FIRST),
    ("parse", during_parse, FIRST),
    ("fold", during_fold, "pubmed26"),
]


def test_builds_killed_at_three_points_each_next_recovers_the_last_equals_a_clean_one(
    served, clean_lake, tmp_path, monkeypatch, capsys
) -> None:
    url, state = served
    home = use_kg_home(monkeypatch, tmp_path / "kg")
    lake = home / "lake"
    state.holding.clear()
    state.release.clear()
    state.faults[f"/baseline/{FIRST}.xml.gz"] = ["hold"]
    for n, (point, when, gone) in enumerate(POINTS):
        printed = killed_at(kg(home, url, start_new_session=True), point, when, lake, state)
        state.release.set()
        if n > 0:
            # this build began by failing the runs the previous kill left, then got further
            assert "recovered from a killed build: " in printed, printed
            assert "runs marked failed (process gone)" in printed, printed

        # what the kill left: the run that was working, and its staging
        assert not (lake / "corpus" / "pubmed26" / "articles.parquet").exists()
        if point == "download":
            assert not (lake / RAW_FIRST).exists()
        if point == "parse":
            assert (lake / RAW_FIRST).exists()
            assert not (lake / f"tables/articles/{FIRST}.parquet").exists()
        if point == "fold":
            assert all((lake / f"tables/articles/{f}.parquet").exists() for f in FILES)
        status = status_lines(capsys, code=1)
        assert not any("in progress" in line for line in status), status
        assert f"  {gone}: failed (process gone)" in status, status

    code, output = finished(kg(home, url))
    assert code == 0, output
    assert "recovered from a killed build: " in output
    assert "runs marked failed (process gone)" in output
    assert lake_files(lake) == clean_lake
    # and the instance agrees: nothing failed or running
    status = "\n".join(status_lines(capsys))
    assert "failed" not in status and "in progress" not in status, status
    assert "corpus: 1 fresh" in status, status


def held_run(home: Path, build: subprocess.Popen, state) -> tuple[str, int, float]:
    """Once the build's file run holds the first download: (its run id, its worker's pid,
    when that worker reported)."""
    import dagster as dg

    from kg_platform.orchestration.recovery import run_worker

    deadline = time.monotonic() + BUILD_TIMEOUT_S
    while not state.holding.is_set():
        assert build.poll() is None, f"the build ended before the download: {finished(build)}"
        assert time.monotonic() < deadline, f"no download within {BUILD_TIMEOUT_S} s"
        time.sleep(0.01)
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        started = dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])
        [record] = instance.get_run_records(started)
        pid, reported = run_worker(instance, record.dagster_run.run_id)
    return record.dagster_run.run_id, pid, reported


def test_a_killed_worker_is_named_and_a_cli_killed_alone_has_its_run_ended(
    served, tmp_path, monkeypatch, capsys
) -> None:
    """Issue 38: a run's worker killed alone is reported with its signal, its pid and the
    last event it logged (not "run failed (see the run in the UI)"); a build whose CLI alone
    is killed leaves its run writing, and the next build ends it before it plans, in a line
    naming the run, the killed build and the worker, then builds."""
    from kg_platform.settings.workers import process_alive

    url, state = served
    home = use_kg_home(monkeypatch, tmp_path / "kg")
    held = f"/baseline/{FIRST}.xml.gz"
    state.holding.clear()
    state.release.clear()
    state.faults[held] = ["hold"]
    build = kg(home, url)
    _, pid, _ = held_run(home, build, state)
    os.kill(pid, signal.SIGKILL)
    code, output = finished(build)
    assert code == 1, output
    killed = (
        f"  error: run worker (pid {pid}) was terminated by signal 9 (SIGKILL); its last "
        'event: Started execution of step "pubmed_file_batch".\n'
    )
    assert output.count(killed) == 3, output  # one per file of the run
    assert "see the run in the UI" not in output

    state.holding.clear()
    state.faults[held] = ["hold"]
    build = kg(home, url)
    run_id, pid, reported = held_run(home, build, state)
    build.kill()  # the CLI alone
    build.communicate(timeout=60)
    time.sleep(1)
    assert process_alive(pid, reported)  # its run goes on, with nobody to read it

    code, output = finished(kg(home, url))
    state.release.set()
    assert code == 0, output
    ended = re.search(
        rf"^ended run {run_id[:8]} \(pubmed_tables\+pubmed_xml \[{FIRST}\.\.pubmed26n0003\]\), "
        rf"left running by the killed kg build \(pid {build.pid}\): its worker pid {pid} "
        r"\((SIGTERM|SIGKILL after 10 s)\)$",
        output,
        re.MULTILINE,
    )
    assert ended is not None, output
    assert output.index(ended.group(0)) < output.index("asset partitions to materialise")
    assert not process_alive(pid, reported)
    assert "1 runs it left running ended" in output
    status = "\n".join(status_lines(capsys))
    assert "failed" not in status and "in progress" not in status, status
