"""The grounding index: the surface lookup table (orthography applied, derived surfaces
added, clashes resolved), precomputed from mesh/terms, and its load-ready form
(``surface_index``, one memory-mapped file) that ``kg ask`` and ``kg serve`` open in
milliseconds instead of rebuilding a dict from the table."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import polars as pl

from kg_platform.checks import CheckOutcome
from kg_platform.grounding.common_words import COMMON_WORD_GUARD
from kg_platform.grounding.grounder import Grounder, build_surface_table
from kg_platform.grounding.orthography import ORTHOGRAPHY_RULES
from kg_platform.grounding.surface_index import (
    INDEX_KEY,
    GroundingIndexError,
    SurfaceIndex,
    index_file_problem,
    index_sections,
    read_header,
    round_trip_mismatches,
    surface_hashes,
    write_index,
)
from kg_platform.storage.grounding import MANIFEST_KEY, SURFACES_KEY
from kg_platform.storage.lake import Lake
from kg_platform.storage.mesh import read_mesh

if TYPE_CHECKING:
    import numpy as np

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


def build_grounding_index(lake: Lake) -> tuple[GroundingIndexStats, list[CheckOutcome]]:
    """Read mesh/terms, descriptors and tree; write grounding/surfaces.parquet, the
    load-ready grounding/index.kgi, then the manifest (last: it records both files' sizes
    and hashes); check the surfaces and the index against the table (contracts.CHECKS)."""
    frames = {t: pl.from_arrow(read_mesh(lake, t)) for t in ("terms", "descriptors", "tree")}
    terms = frames["terms"]
    surfaces = build_surface_table(terms)
    by_kind = dict(surfaces.group_by("kind").len().sort("kind").iter_rows())
    lake.write_parquet(SURFACES_KEY, surfaces.to_arrow())
    hashes = surface_hashes(surfaces["key"])  # once: the index sorts by them, the check finds
    sections, fields = index_sections(surfaces, frames["descriptors"], frames["tree"], hashes)
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
    checks = [
        surfaces_mapped(surfaces, frames["descriptors"]),
        *index_checks(lake, surfaces, frames["descriptors"], hashes),
    ]
    manifest = {**asdict(stats), "files": published_files(lake, surfaces.height)}
    lake.write_bytes(MANIFEST_KEY, json.dumps(manifest, indent=1).encode())
    return stats, checks


def surfaces_mapped(surfaces: pl.DataFrame, descriptors: pl.DataFrame) -> CheckOutcome:
    """``every_surface_unique_and_mapped``: each surface key stands once (one descriptor),
    names a descriptor of mesh/descriptors, and every descriptor with a name has a surface."""
    problems = []
    if surfaces.is_empty():
        problems.append("no surfaces")
    repeated = surfaces.height - surfaces["key"].n_unique()
    if repeated:
        problems.append(f"{repeated} surface key(s) stand more than once")
    unknown = surfaces.filter(~pl.col("ui").is_in(descriptors["ui"].implode()))["ui"].unique()
    if unknown.len():
        problems.append(f"{unknown.len()} UI(s) not in mesh/descriptors, e.g. {unknown.min()}")
    named = descriptors.filter(pl.col("name").str.len_chars() > 0)["ui"]
    unreachable = named.filter(~named.is_in(surfaces["ui"].implode()))
    if unreachable.len():
        problems.append(
            f"{unreachable.len()} named descriptor(s) without a surface, e.g. {unreachable.min()}"
        )
    return CheckOutcome(
        "every_surface_unique_and_mapped",
        not problems,
        "; ".join(problems)
        or f"{surfaces.height} surfaces, each of one of the {named.len()} named descriptors, "
        "all reachable",
    )


def published_files(lake: Lake, surfaces: int) -> dict[str, dict]:
    """What the manifest records of each file it lists, for `kg status` and `kg build` to
    compare: the surface table's rows, size and sha256; the index's size and the sha256 of
    its data (as its header records it)."""
    from kg_platform.storage.digest import file_sha256

    with lake.open(INDEX_KEY) as f:
        header = read_header(f, lake.size(INDEX_KEY), lake.path(INDEX_KEY))[0]
    with lake.open(SURFACES_KEY) as f:
        surfaces_sha256 = file_sha256(f)
    return {
        SURFACES_KEY: {
            "rows": surfaces,
            "size": lake.size(SURFACES_KEY),
            "sha256": surfaces_sha256,
        },
        INDEX_KEY: {"size": lake.size(INDEX_KEY), "sha256": header["sha256"]},
    }


def _recorded_files(lake: Lake) -> dict[str, dict]:
    """The files the published manifest lists ({} for a manifest from before they were)."""
    try:
        manifest = json.loads(lake.read_bytes(MANIFEST_KEY))
        files = manifest.get("files", {})
        return {
            str(k): {"size": int(v["size"]), "sha256": str(v["sha256"])} for k, v in files.items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{lake.path(MANIFEST_KEY)}: not a grounding manifest ({exc})") from exc


def published_problem(lake: Lake) -> str | None:
    """Why the published grounding index of this (scoped) lake does not match its manifest:
    a file missing or not of the size the manifest records, an index file that does not
    match its own header; None when it matches or none is published. Cheap: one listing
    and the index's header."""
    if not lake.exists(MANIFEST_KEY):
        return None
    try:
        recorded = _recorded_files(lake)
    except ValueError as exc:
        return str(exc)
    found = lake.sizes("grounding")
    for key in (SURFACES_KEY, INDEX_KEY):
        size = found.get(key.rsplit("/", 1)[1])
        if size is None:
            return f"{lake.path(key)}: missing (the grounding manifest lists it)"
        if key in recorded and size != recorded[key]["size"]:
            return (
                f"{lake.path(key)}: {size} bytes, the grounding manifest says "
                f"{recorded[key]['size']} bytes; rebuild grounding_index"
            )
    return index_file_problem(lake)


def hash_problems(lake: Lake) -> list[str]:
    """Each published file whose content no longer hashes to what was recorded at
    publication, one line naming it (reads every byte; the sizes first): the surface table
    against the manifest's sha256, the index's sections against its header's."""
    from kg_platform.storage.digest import file_sha256

    problem = published_problem(lake)
    if problem is not None:
        return [problem]
    if not lake.exists(MANIFEST_KEY):
        return []
    problems = []
    recorded = _recorded_files(lake).get(SURFACES_KEY)
    if recorded is not None:
        with lake.open(SURFACES_KEY) as f:
            if file_sha256(f) != recorded["sha256"]:
                problems.append(
                    f"{lake.path(SURFACES_KEY)}: sha256 differs from the grounding manifest's "
                    f"({recorded['sha256'][:12]}…); rebuild grounding_index"
                )
    try:
        SurfaceIndex.open(lake).verify()
    except GroundingIndexError as exc:
        problems.append(f"{exc}; rebuild grounding_index")
    return problems


def sample_questions(surfaces: pl.DataFrame, every: int = SAMPLE_EVERY) -> list[str]:
    """Questions that name two surfaces each, from every ``every``-th term of the table:
    the same-groundings check grounds them with both grounders."""
    terms = surfaces["term"].to_list()[::every]
    return [f"Does {a} affect {b}?" for a, b in zip(terms[::2], terms[1::2], strict=False)]


def same_groundings(index_grounder: Grounder, table_grounder: Grounder, questions: list[str]):
    """The questions the two grounders ground differently (empty: identical)."""
    return [q for q in questions if index_grounder.ground(q) != table_grounder.ground(q)]


def index_checks(
    lake: Lake,
    surfaces: pl.DataFrame,
    descriptors: pl.DataFrame,
    hashes: np.ndarray | None = None,
) -> list[CheckOutcome]:
    """``index_round_trips``: the file hashes to its header and every surface of the table
    comes back from it (and nothing else); ``index_grounds_as_table``: a grounder over the
    index and one over the table give the same groundings on questions made from the
    surfaces (the tests do the same on the 400 DEV questions and every test question)."""
    try:
        index = SurfaceIndex.open(lake)
        index.verify()
    except ValueError as error:
        return [
            CheckOutcome("index_round_trips", False, str(error)),
            CheckOutcome("index_grounds_as_table", False, str(error)),
        ]
    problems = round_trip_mismatches(index, surfaces, hashes)
    names = dict(zip(descriptors["ui"].to_list(), descriptors["name"].to_list(), strict=True))
    if index.names_dict() != names:
        problems.append("descriptor names differ from mesh/descriptors")
    round_trip = CheckOutcome(
        "index_round_trips",
        not problems,
        "; ".join(problems[:5]) or f"{len(index)} surfaces and {len(names)} names round-trip",
    )
    questions = sample_questions(surfaces)
    differ = same_groundings(Grounder(index, index.names), Grounder(surfaces, names), questions)
    grounds = CheckOutcome(
        "index_grounds_as_table",
        not differ,
        f"{len(questions) - len(differ)} of {len(questions)} sample questions ground the same"
        + (f"; first differing: {differ[0]!r}" if differ else ""),
    )
    return [round_trip, grounds]
