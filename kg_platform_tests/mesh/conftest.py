"""MeSH fixtures: the reference MeSH (TSVs + allowable CSV) is built once per test run, for
both xdist workers (kg_platform_tests/support/shared.py)."""

from __future__ import annotations

import polars as pl
import pytest

from kg_platform.mesh.source import MeshSourceSpec, resolve_mesh_source
from kg_platform.mesh.tables import MeshBuild
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.support.shared import reference_mesh_build


@pytest.fixture(scope="session")
def reference_mesh_spec() -> MeshSourceSpec:
    # the parent of xml/ and tsv/: resolution picks the TSVs and the allowable CSV
    return resolve_mesh_source(str(require_reference("mesh")))


@pytest.fixture(scope="session")
def reference_build(tmp_path_factory) -> MeshBuild:
    """``build_mesh`` of ``reference_mesh_spec``'s folder."""
    return reference_mesh_build(tmp_path_factory)


@pytest.fixture(scope="session")
def reference_frames(reference_build: MeshBuild) -> dict[str, pl.DataFrame]:
    return {name: pl.from_arrow(table) for name, table in reference_build.tables.items()}


@pytest.fixture(scope="session")
def xml_sample_dir():
    return require_reference("mesh", "xml")
