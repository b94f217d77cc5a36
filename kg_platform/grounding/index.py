"""The grounding index: the surface lookup table (orthography applied, derived surfaces
added, clashes resolved), precomputed from mesh/terms, and its load-ready form
(``surface_index``, one memory-mapped file) that ``kg ask`` and ``kg serve`` open in
milliseconds instead of rebuilding a dict from the table."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import polars as pl

from kg_platform.grounding.common_words import COMMON_WORD_GUARD
from kg_platform.grounding.grounder import Grounder, build_surface_table
from kg_platform.grounding.orthography import ORTHOGRAPHY_RULES
from kg_platform.grounding.surface_index import (
    INDEX_KEY,
    SurfaceIndex,
    index_sections,
    round_trip_mismatches,
    write_index,
)
from kg_platform.storage.lake import Lake

SURFACES_KEY = "grounding/surfaces.parquet"
MANIFEST_KEY = "grounding/manifest.json"
MESH_KEYS = {t: f"mesh/{t}.parquet" for t in ("terms", "descriptors", "tree")}
# questions made from every SAMPLE_EVERY-th surface for the same-groundings check
SAMPLE_EVERY = 500


@dataclass(frozen=True)
class GroundingIndexStats:
    terms: int
    surfaces: int
    surfaces_by_kind: dict[str, int]
    descriptors_reachable: int
    orthography_rules: int
    common_words: int
    index_bytes: int = 0


@dataclass(frozen=True)
class IndexCheck:
    """The load-ready index against the table it was made from."""

    name: str
    passed: bool
    details: str


def build_grounding_index(lake: Lake) -> tuple[GroundingIndexStats, list[IndexCheck]]:
    """Read mesh/terms, descriptors and tree; write grounding/surfaces.parquet, the
    load-ready grounding/index.kgi, then the manifest (last); check the index against the
    table (``index_checks``)."""
    frames = {}
    for table, key in MESH_KEYS.items():
        if not lake.exists(key):
            raise FileNotFoundError(f"{lake.path(key)}: materialise `mesh_tables` first")
        frames[table] = pl.from_arrow(lake.read_parquet(key))
    terms = frames["terms"]
    surfaces = build_surface_table(terms)
    by_kind = dict(surfaces.group_by("kind").len().sort("kind").iter_rows())
    lake.write_parquet(SURFACES_KEY, surfaces.to_arrow())
    sections, fields = index_sections(surfaces, frames["descriptors"], frames["tree"])
    size = write_index(lake, INDEX_KEY, sections, fields)
    stats = GroundingIndexStats(
        terms=terms.height,
        surfaces=surfaces.height,
        surfaces_by_kind={k: int(v) for k, v in by_kind.items()},
        descriptors_reachable=int(surfaces["ui"].n_unique()),
        orthography_rules=len(ORTHOGRAPHY_RULES),
        common_words=len(COMMON_WORD_GUARD),
        index_bytes=size,
    )
    checks = index_checks(lake, surfaces, frames["descriptors"])
    lake.write_bytes(MANIFEST_KEY, json.dumps(asdict(stats), indent=1).encode())
    return stats, checks


def sample_questions(surfaces: pl.DataFrame, every: int = SAMPLE_EVERY) -> list[str]:
    """Questions that name two surfaces each, from every ``every``-th term of the table:
    the same-groundings check grounds them with both grounders."""
    terms = surfaces["term"].to_list()[::every]
    return [f"Does {a} affect {b}?" for a, b in zip(terms[::2], terms[1::2], strict=False)]


def same_groundings(index_grounder: Grounder, table_grounder: Grounder, questions: list[str]):
    """The questions the two grounders ground differently (empty: identical)."""
    return [q for q in questions if index_grounder.ground(q) != table_grounder.ground(q)]


def index_checks(lake: Lake, surfaces: pl.DataFrame, descriptors: pl.DataFrame) -> list[IndexCheck]:
    """``index_round_trips``: the file hashes to its header and every surface of the table
    comes back from it (and nothing else); ``index_grounds_as_table``: a grounder over the
    index and one over the table give the same groundings on questions made from the
    surfaces (the tests do the same on the 400 DEV questions and every test question)."""
    try:
        index = SurfaceIndex.open(lake)
        index.verify()
    except ValueError as error:
        return [
            IndexCheck("index_round_trips", False, str(error)),
            IndexCheck("index_grounds_as_table", False, str(error)),
        ]
    problems = round_trip_mismatches(index, surfaces)
    names = dict(zip(descriptors["ui"].to_list(), descriptors["name"].to_list(), strict=True))
    if dict(index.names.items()) != names:
        problems.append("descriptor names differ from mesh/descriptors")
    round_trip = IndexCheck(
        "index_round_trips",
        not problems,
        "; ".join(problems[:5]) or f"{len(index)} surfaces and {len(names)} names round-trip",
    )
    questions = sample_questions(surfaces)
    differ = same_groundings(Grounder(index, index.names), Grounder(surfaces, names), questions)
    grounds = IndexCheck(
        "index_grounds_as_table",
        not differ,
        f"{len(questions) - len(differ)} of {len(questions)} sample questions ground the same"
        + (f"; first differing: {differ[0]!r}" if differ else ""),
    )
    return [round_trip, grounds]
