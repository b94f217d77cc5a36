"""What one test run builds once for all its xdist workers: the first worker to ask builds it
under a file lock in the run's shared temporary folder and saves it there; every other asker
(another worker, or a later session fixture of the same worker) loads that copy.

The shared folder is the parent of the worker's base temporary folder (``pytest-N`` under
xdist, whose ``popen-gwK`` children are the workers'), or the base temporary folder itself
without xdist: a new one for each test run, so nothing survives into the next run."""

from __future__ import annotations

import fcntl
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every worker of this test run sees."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"
    folder.mkdir(exist_ok=True)
    return folder


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[], Any]):
    """``build()`` once per test run, across workers; its value pickled under ``name``."""
    folder = shared_dir(tmp_path_factory)
    path = folder / f"{name}.pickle"
    with (folder / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other worker waits here while one builds
        try:
            if path.exists():
                return pickle.loads(path.read_bytes())
            value = build()
            partial = path.with_suffix(".partial")
            partial.write_bytes(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
            partial.rename(path)
            return value
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def reference_mesh_build(tmp_path_factory: pytest.TempPathFactory):
    """``build_mesh`` of the reference MeSH (the TSVs, the thesaurus's terms and the allowable
    CSV: the parent folder of xml/ and tsv/), once per test run."""
    from kg_platform.mesh.source import resolve_mesh_source
    from kg_platform.mesh.tables import build_mesh
    from kg_platform_tests.conftest import require_reference

    location = str(require_reference("mesh"))
    return built_once(
        tmp_path_factory, "reference-mesh", lambda: build_mesh(resolve_mesh_source(location))
    )
