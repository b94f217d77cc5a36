"""Shared fixtures. Reference data is read in place from KG_REFERENCE_DATA (default
../shared/data beside the repository); tests that need it skip when it is absent and fail
under CI=true, so CI can never pass by skipping."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# `kg build` parses a run's files in a pool of spawned processes as wide as the cores over
# the runs at once, unless KG_PARSE_WORKERS says otherwise. A test build's run holds two or
# three small files, where two fresh interpreters cost more than the parse: the suite's
# builds parse in the run's own process (TablesPool of width 1). The pool itself runs in
# commands/test_build.py's first build, the UI's and the Celery workers' runs (they unset
# this), in builds the tests start as subprocesses (their environment drops KG_*) and in
# pubmed/test_tables_pool.py.
os.environ.setdefault("KG_PARSE_WORKERS", "1")


def reference_data_dir() -> Path:
    # resolved in one place, kg_platform.settings
    from kg_platform.settings import reference_data_dir as resolved

    return resolved()


def require_reference(*parts: str) -> Path:
    """Path under the reference data; skip (or fail under CI=true) when it is missing."""
    path = reference_data_dir().joinpath(*parts)
    if not path.exists():
        message = f"reference data not found: {path} (set KG_REFERENCE_DATA)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def use_kg_home(monkeypatch: pytest.MonkeyPatch, home: Path) -> Path:
    """Point the platform's settings at ``home`` only: no lake, source or instance from the
    environment leaks in."""
    monkeypatch.setenv("KG_HOME", str(home))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    for var in ("KG_LAKE", "KG_CATALOG", "KG_PUBMED_SOURCE", "KG_MESH_SOURCE", "KG_READER"):
        monkeypatch.delenv(var, raising=False)
    return home


def _without_current_defs_state_storage():
    # A Dagster instance used as a context manager makes its defs-state storage the
    # process's current one (a ContextVar); an instance left entered and then collected
    # leaves a dead one behind, and every later Definitions load in this process fails with
    # "Attempted to resolve undefined DagsterInstance weakref". Each module and each test
    # starts without one and puts back what it found.
    from dagster._core.storage.defs_state.base import set_defs_state_storage

    with set_defs_state_storage(None):
        yield


clean_defs_state_per_module = pytest.fixture(scope="module", autouse=True)(
    _without_current_defs_state_storage
)
clean_defs_state_per_test = pytest.fixture(autouse=True)(_without_current_defs_state_storage)


# The test files that take longest (a few `kg build`s or a UI each), longest first, from
# `--durations` of the whole suite. `make test` hands out whole files to its two workers in
# collection order (`--dist loadfile --no-loadscope-reorder`); these go first, so the suite
# does not end with one worker still in a long file while the other has nothing left.
SLOW_FIRST = (
    "assets/test_partitions.py",
    "storage/test_s3_end_to_end.py",
    "commands/test_build_integrity.py",
    "commands/test_build.py",
    "commands/test_build_recovery.py",
    "e2e/test_ui.py",
    "orchestration/test_celery.py",
    "e2e/test_backfill.py",
    "sources/test_pool.py",
    "answer/test_examples.py",
    "commands/test_build_lock.py",
    "grounding/test_index.py",
    "orchestration/test_freshness.py",
    "evaluation/grounding/test_hybrid.py",
    "assets/test_answering.py",
    "mesh/test_asset.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The SLOW_FIRST files first, in that order; the rest as collected."""
    root = Path(__file__).parent
    rank = {root / name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path, len(SLOW_FIRST)))  # stable: file order kept


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Collect the garbage of the whole session now, then freeze what is left.

    A pytest-xdist worker reports "finished" when this hook has run; the controller then
    closes the worker's channel and execnet gives the worker 5 s to end before it sends it
    SIGINT. What the worker still does after this hook is pytest's own gc.collect() at
    unconfigure, and on a heap holding a session's Dagster instances and SQLAlchemy engines
    that collection took longer than 5 s on a loaded machine: the SIGINT landed inside a
    weakref callback and `make test` ended with a KeyboardInterrupt traceback after [100%].
    Collected here (before "finished") and frozen, the later collection has nothing to walk."""
    gc.collect()
    gc.freeze()


@pytest.fixture
def kg_home(tmp_path, monkeypatch) -> Path:
    """A fresh KG_HOME (lake, instance, sources) for one test."""
    return use_kg_home(monkeypatch, tmp_path / "kg")


@pytest.fixture
def eval_home(tmp_path, monkeypatch) -> Path:
    """A fresh KG_HOME whose instance a `kg eval` command materialises into; DAGSTER_HOME,
    which prepare_instance sets for the process, is restored after the test."""
    home = use_kg_home(monkeypatch, tmp_path / "kg")
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    return home


@pytest.fixture(scope="session")
def s3_endpoint():
    """A real S3 server (moto) on 127.0.0.1 for the whole session."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_lake(s3_endpoint, monkeypatch):
    """An empty S3 lake in a fresh bucket, configured through the environment as a user would."""
    import uuid

    import boto3

    from kg_platform.storage.lake import Lake

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    bucket = f"lake-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    return Lake(f"s3://{bucket}/kg")


@pytest.fixture(scope="module")
def question_lake(tmp_path_factory):
    """The small real-MeSH question graph (kg_platform_tests/answer/graph_fixture.py), built
    once per module."""
    from kg_platform.storage.lake import Lake
    from kg_platform_tests.answer.graph_fixture import build_question_graph

    lake = Lake(str(tmp_path_factory.mktemp("answer") / "lake"))
    build_question_graph(lake)
    return lake


@pytest.fixture(scope="module")
def kg(question_lake):
    """The question graph opened for asking."""
    from kg_platform.answer.api import KnowledgeGraph

    return KnowledgeGraph.open(question_lake)


def materialised_partitions(instance, runs, asset: str) -> set[str]:
    """The partitions of ``asset`` that ``runs`` materialised, as the instance records them."""
    import dagster as dg

    return {
        e.dagster_event.partition
        for run in runs
        for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
        if e.dagster_event.asset_key == dg.AssetKey(asset)
    }
