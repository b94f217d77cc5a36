from __future__ import annotations

import polars as pl
import pytest

from kg_platform.grounding.grounder import Grounder
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.support.shared import reference_mesh_build


@pytest.fixture(scope="session")
def mesh_frames(tmp_path_factory) -> dict[str, pl.DataFrame]:
    """The real MeSH 2024 tables, built by kg_platform.mesh from the reference TSVs and the
    thesaurus terms table (the parent folder: every concept's terms), once per test run for
    both workers: the same build as mesh/conftest's ``reference_build``."""
    tables = reference_mesh_build(tmp_path_factory).tables
    return {t: pl.from_arrow(tables[t]) for t in ("descriptors", "tree", "terms")}


@pytest.fixture(scope="session")
def surface_table(mesh_frames) -> pl.DataFrame:
    """``build_surface_table`` of the real MeSH terms (what ``Grounder.from_terms`` builds),
    once per session: the grounders below and the load-ready index share it."""
    from kg_platform.grounding.grounder import build_surface_table

    return build_surface_table(mesh_frames["terms"])


def _names(mesh_frames) -> dict[str, str]:
    descriptors = mesh_frames["descriptors"]
    return dict(zip(descriptors["ui"].to_list(), descriptors["name"].to_list(), strict=True))


@pytest.fixture(scope="session")
def grounder(mesh_frames, surface_table) -> Grounder:
    return Grounder(surface_table, _names(mesh_frames))  # Grounder.from_terms, table shared


@pytest.fixture(scope="session")
def unguarded(mesh_frames, surface_table) -> Grounder:
    return Grounder(surface_table, _names(mesh_frames), common_words=())


@pytest.fixture(scope="session")
def dev_questions():
    from kg_platform.evaluation.grounding.evaluation import load_pubmedqa

    questions = load_pubmedqa(require_reference("pubmedqa", "pqal_dev400.json"))
    return {q.pmid: q for q in questions}


@pytest.fixture(scope="session")
def roles(mesh_frames) -> dict[str, str]:
    """Descriptor UI -> role from MeSH structure alone (no graph), default RoleConfig."""
    from kg_platform.grounding.roles import assign_roles

    frame = assign_roles(mesh_frames["descriptors"], mesh_frames["tree"])
    return dict(zip(frame["ui"].to_list(), frame["role"].to_list(), strict=True))


@pytest.fixture(scope="session")
def headings(mesh_frames) -> dict[str, str]:
    from kg_platform.evaluation.grounding.evaluation import heading_index

    return heading_index(mesh_frames["terms"])


@pytest.fixture(scope="session")
def gold_of(dev_questions, headings) -> dict[str, set[str]]:
    """Question PMID -> descriptor UIs of the article's own MeSH headings."""
    from kg_platform.text.normalise import normalise

    return {
        pmid: {headings[normalise(h)] for h in q.headings if normalise(h) in headings}
        for pmid, q in dev_questions.items()
    }


@pytest.fixture(scope="session")
def dev_groundings(grounder, dev_questions) -> dict[str, list]:
    """Question PMID -> the grounder's groundings of that question, computed once."""
    return {pmid: grounder.ground(q.question) for pmid, q in dev_questions.items()}
