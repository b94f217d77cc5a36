"""A whole platform for end-to-end tests: a temporary Dagster instance, lake and KG home,
dagster-webserver on 127.0.0.1 and the daemon (backfills, run queue), driven over GraphQL."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import requests

# the checkout (kg_platform_tests/support/platform.py -> two folders up)
REPO_ROOT = Path(__file__).resolve().parents[2]

BIN = Path(sys.executable).parent
REPOSITORY = {"repositoryLocationName": "kg_platform", "repositoryName": "__repository__"}

# The backfill daemon wakes every 30 s; a test cannot wait minutes per step, so the daemon
# process used here wakes every 2 s. Nothing else about it changes.
DAEMON = (
    "import sys, dagster._daemon.controller as c; "
    "c.DEFAULT_DAEMON_INTERVAL_SECONDS = 2; from importlib.metadata import entry_points; "
    "sys.argv = ['dagster-daemon', 'run', '-w', 'workspace.yaml']; "
    "entry_points(group='console_scripts')['dagster-daemon'].load()()"
)


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# the UI tests' screenshots (and a failed page's): outside the checkout, in the temporary
# folder (KG_TEST_ARTIFACTS to keep them elsewhere, e.g. where a CI job collects them)
ARTIFACTS = Path(
    os.environ.get("KG_TEST_ARTIFACTS") or Path(tempfile.gettempdir()) / "kg-test-artifacts"
)
WAIT_MS = 60_000  # for pages and expectations alike: a loaded 2-core CI machine is slow
DONE = ("COMPLETED", "COMPLETED_SUCCESS")


@contextmanager
def browser_page(failure_png: str) -> Iterator[Any]:
    """A page of a headless Debian chromium (Playwright) that waits WAIT_MS for pages and
    expectations; what it showed when the block failed is kept as ARTIFACTS/failure_png."""
    from playwright.sync_api import expect, sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does this)")
    expect.set_options(timeout=WAIT_MS)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            page.set_default_timeout(WAIT_MS)
            yield page
        except BaseException:
            # for whoever reads the CI artefacts
            page.screenshot(path=str(ARTIFACTS / failure_png), full_page=True)
            raise
        finally:
            browser.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Platform:
    url: str
    env: dict[str, str]
    home: Path
    lake: Path
    logs: Path

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        response = requests.post(
            f"{self.url}/graphql", json={"query": query, "variables": variables or {}}, timeout=60
        )
        response.raise_for_status()
        body = response.json()
        assert "errors" not in body, json.dumps(body["errors"], indent=1)[:3000]
        return body["data"]

    def add_partitions(self, keys: list[str], definition: str = "pubmed_files") -> None:
        for key in keys:
            data = self.graphql(
                ADD_PARTITION, {"sel": REPOSITORY, "key": key, "definition": definition}
            )
            assert data["addDynamicPartition"]["__typename"] == "AddDynamicPartitionSuccess", data

    def set_nux_seen(self) -> None:
        self.graphql("mutation { setNuxSeen }")

    def backfill(self, assets: list[str], partitions: list[str], title: str = "") -> dict:
        """Launch a backfill of ``assets`` over ``partitions`` (as the UI's Materialize
        dialog does, over GraphQL) and wait for it: its id and final status."""
        params = {
            "partitionNames": partitions,
            "assetSelection": [{"path": [asset]} for asset in assets],
            **({"title": title} if title else {}),
        }
        launched = self.graphql(LAUNCH_BACKFILL, {"params": params})["launchPartitionBackfill"]
        assert launched["__typename"] == "LaunchBackfillSuccess", launched
        return {**launched, "status": self.wait_for_backfill(launched["backfillId"])}

    def wait_for_backfill(self, backfill_id: str, timeout_s: float = 300) -> str:
        deadline = time.monotonic() + timeout_s
        status = ""
        while time.monotonic() < deadline:
            data = self.graphql(BACKFILL_STATUS, {"id": backfill_id})["partitionBackfillOrError"]
            status = data["status"]
            if status in (
                "COMPLETED",
                "COMPLETED_SUCCESS",
                "COMPLETED_FAILED",
                "FAILED",
                "CANCELED",
            ):
                return status
            time.sleep(1)
        raise AssertionError(
            f"backfill {backfill_id} still {status} after {timeout_s} s\n{self.tail_logs()}"
        )

    def tail_logs(self) -> str:
        return "\n".join(
            f"== {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.logs.glob("*.log"))
        )


LAUNCH_BACKFILL = """
mutation Launch($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message stack }
    ... on InvalidSubsetError { message }
    ... on PartitionKeysNotFoundError { message }
  }
}"""

ADD_PARTITION = """
mutation Add($sel: RepositorySelector!, $key: String!, $definition: String!) {
  addDynamicPartition(repositorySelector: $sel, partitionsDefName: $definition,
                      partitionKey: $key) {
    __typename
    ... on PythonError { message }
  }
}"""

BACKFILL_STATUS = """
query Status($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill { status }
    ... on PythonError { message }
  }
}"""


def platform_env(root: Path, pubmed_source: str) -> dict[str, str]:
    dagster_home = root / "dagster"
    dagster_home.mkdir(parents=True)
    shutil.copy(REPO_ROOT / "dagster.yaml", dagster_home / "dagster.yaml")
    # create and migrate the SQLite storages once, here: the webserver, the daemon and the
    # code server starting together would otherwise race to stamp the same alembic table
    import dagster as dg

    dg.DagsterInstance.from_config(str(dagster_home)).dispose()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(dagster_home),
        "KG_HOME": str(root / "kg"),
        "KG_LAKE": str(root / "lake"),
        "KG_CATALOG": str(root / "kg" / "catalog.duckdb"),
        "KG_PUBMED_SOURCE": pubmed_source,
        "PYTHONUNBUFFERED": "1",
    }
    # the runs the daemon launches size their parse pools themselves, as deployed (the
    # suite's conftest sets KG_PARSE_WORKERS=1 for the builds it runs in process)
    env.pop("KG_PARSE_WORKERS", None)
    return env


@contextmanager
def running_platform(root: Path, pubmed_source: str) -> Iterator[Platform]:
    """dagster-webserver and the daemon over a fresh instance; both stopped on exit."""
    env = platform_env(root, pubmed_source)
    logs = root / "logs"
    logs.mkdir()
    port = free_port()
    processes: list[subprocess.Popen] = []

    def start(name: str, args: list[str]) -> None:
        log = open(logs / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        processes.append(
            subprocess.Popen(
                args,
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopped as one below
            )
        )

    start(
        "webserver",
        [
            str(BIN / "dagster-webserver"),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-w",
            "workspace.yaml",
        ],
    )
    start("daemon", [sys.executable, "-c", DAEMON])
    platform = Platform(f"http://127.0.0.1:{port}", env, root, Path(env["KG_LAKE"]), logs)
    try:
        wait_for_code_location(platform, processes)
        yield platform
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def wait_for_code_location(platform: Platform, processes: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        for process in processes:
            assert process.poll() is None, f"a platform process exited\n{platform.tail_logs()}"
        try:
            data = platform.graphql(
                "{ workspaceOrError { ... on Workspace { locationEntries { name "
                "loadStatus locationOrLoadError { __typename ... on PythonError { message } } } } } }"
            )
            entries = data["workspaceOrError"]["locationEntries"]
            if entries and entries[0]["loadStatus"] == "LOADED":
                error = entries[0]["locationOrLoadError"]
                assert error["__typename"] == "RepositoryLocation", error
                return
        except requests.ConnectionError:
            pass
        time.sleep(1)
    raise AssertionError(f"the webserver did not load the code location\n{platform.tail_logs()}")


def content_hashes(lake: Path) -> dict[str, str]:
    """Lake key -> hash of its content: rows and schema for Parquet, bytes for raw files."""
    hashes = {}
    for path in sorted(lake.rglob("*")):
        key = path.relative_to(lake).as_posix()
        if not path.is_file() or key.startswith(".") or "/." in key:
            continue
        if path.name == "manifest.json" and path.parent.name == "fold":
            # the fold's manifest names each per-file table by its size and modification
            # time, which differ between two builds of the same bytes: stamps by name only
            manifest = json.loads(path.read_text())
            manifest["stamps"] = sorted(manifest["stamps"])
            hashes[key] = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()
        elif path.suffix == ".parquet":
            table = pq.read_table(path)
            text = str(table.schema.remove_metadata()) + json.dumps(table.to_pylist(), default=str)
            hashes[key] = hashlib.sha256(text.encode()).hexdigest()
        else:
            hashes[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return hashes
