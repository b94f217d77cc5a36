from __future__ import annotations

import polars as pl
import pytest

from kg_platform.grounding.grounder import Grounder
from kg_platform_tests.conftest import require_reference


@pytest.fixture(scope="session")
def mesh_frames() -> dict[str, pl.DataFrame]:
    """The real MeSH 2024 tables, built by kg_platform.mesh from the reference TSVs."""
    from kg_platform.mesh.tables import build_mesh_tables

    tables = build_mesh_tables(str(require_reference("mesh", "tsv")))
    return {t: pl.from_arrow(tables[t]) for t in ("descriptors", "tree", "terms")}


@pytest.fixture(scope="session")
def grounder(mesh_frames) -> Grounder:
    return Grounder.from_terms(mesh_frames["terms"], mesh_frames["descriptors"])


@pytest.fixture(scope="session")
def unguarded(mesh_frames) -> Grounder:
    return Grounder.from_terms(mesh_frames["terms"], mesh_frames["descriptors"], common_words=())


@pytest.fixture(scope="session")
def dev_questions():
    from kg_platform.evaluation.grounding_eval import load_pubmedqa

    questions = load_pubmedqa(require_reference("pubmedqa", "pqal_dev400.json"))
    return {q.pmid: q for q in questions}
