"""The load-ready grounding index (grounding/index.kgi): written from the real MeSH 2024
tables, it holds exactly the surface table, grounds every DEV question and every question
the tests ground exactly as the table-built grounder, gives the roles ``assign_roles``
gives, and a corrupt or truncated file is one clear error naming it."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import polars as pl
import pytest

from kg_platform.grounding.grounder import Grounder
from kg_platform.grounding.index import build_grounding_index, sample_questions
from kg_platform.grounding.roles import RoleConfig, assign_roles
from kg_platform.grounding.surface_index import (
    INDEX_KEY,
    GroundingIndexError,
    IndexedRoles,
    SurfaceIndex,
    index_sections,
    round_trip_mismatches,
    surface_hash,
    surface_hashes,
    write_index,
)
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import REPO_ROOT


@pytest.fixture(scope="module")
def surfaces(surface_table) -> pl.DataFrame:
    return surface_table


@pytest.fixture(scope="module")
def index_lake(tmp_path_factory, mesh_frames, surfaces) -> Lake:
    lake = Lake(str(tmp_path_factory.mktemp("grounding_index") / "lake"))
    sections, fields = index_sections(surfaces, mesh_frames["descriptors"], mesh_frames["tree"])
    write_index(lake, INDEX_KEY, sections, fields)
    return lake


@pytest.fixture(scope="module")
def index(index_lake) -> SurfaceIndex:
    return SurfaceIndex.open(index_lake)


@pytest.fixture(scope="module")
def indexed(index) -> Grounder:
    return Grounder(index, index.names)


def test_every_surface_round_trips(index: SurfaceIndex, surfaces: pl.DataFrame) -> None:
    index.verify()
    assert len(index) == surfaces.height
    assert round_trip_mismatches(index, surfaces) == []
    # a word that is no surface is None, as in the dict
    assert index.get("zellweger syndromes of the moon") is None
    found = index.get("breast neoplasms")
    assert (found.ui, found.term, found.kind, found.as_written) == (
        "D001943",
        "Breast Neoplasms",
        "name",
        False,
    )


def test_round_trip_finds_every_difference(tmp_path: Path, surfaces, mesh_frames) -> None:
    """The check can fail: an index written from 40 surfaces, compared with a table where one
    surface changed kind, one is missing and one was added."""
    small = surfaces.sort("key").head(40)
    lake = Lake(str(tmp_path / "lake"))
    write_index(
        lake, INDEX_KEY, *index_sections(small, mesh_frames["descriptors"], mesh_frames["tree"])
    )
    index = SurfaceIndex.open(lake)
    assert round_trip_mismatches(index, small) == []
    first, second, third = small["key"][:3].to_list()
    changed = small.with_columns(
        kind=pl.when(pl.col("key") == first).then(pl.lit("derived")).otherwise(pl.col("kind"))
    )
    extra = small.filter(pl.col("key") == third).with_columns(key=pl.lit("no such surface"))
    table = pl.concat([changed.filter(pl.col("key") != second), extra])
    entry = {k: index.get(k) for k in (first, second, third)}
    assert round_trip_mismatches(index, table) == [
        f"{first!r}: index {entry[first]}, table {entry[first]._replace(kind='derived')}",
        f"'no such surface': index None, table {entry[third]}",
        f"{second!r}: only in the index as {entry[second]}",
    ]


def test_names_are_the_descriptor_table(index: SurfaceIndex, mesh_frames) -> None:
    descriptors = mesh_frames["descriptors"]
    expected = dict(zip(descriptors["ui"].to_list(), descriptors["name"].to_list(), strict=True))
    assert dict(index.names.items()) == expected
    assert index.names_dict() == expected
    assert index.names.get("D999999") is None


def test_dev_questions_ground_identically(indexed: Grounder, grounder: Grounder, dev_questions):
    assert len(dev_questions) == 400
    questions = [q.question for q in dev_questions.values()]
    assert [q for q in questions if indexed.ground(q) != grounder.ground(q)] == []


def _test_questions() -> list[str]:
    """Every question written in the test suite: each string literal of a test module that
    is a sentence ending in a question mark (found by parsing the modules)."""
    found: set[str] = set()
    for path in Path(REPO_ROOT, "kg_platform_tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value.strip()
                if " " in text and text.endswith("?") and len(text) < 1000:
                    found.add(text)
    return sorted(found)


def test_every_test_question_grounds_identically(indexed: Grounder, grounder: Grounder) -> None:
    questions = _test_questions()
    assert len(questions) >= 40  # the suite's own questions, found by parsing it
    assert [q for q in questions if indexed.ground(q) != grounder.ground(q)] == []


def test_roles_are_assign_roles(index: SurfaceIndex, mesh_frames) -> None:
    roles = assign_roles(mesh_frames["descriptors"], mesh_frames["tree"])
    expected = dict(
        zip(
            roles["ui"].to_list(),
            zip(roles["role"].to_list(), roles["reason"].to_list(), strict=True),
            strict=True,
        )
    )
    assert {ui: index.base_role(ui) for ui in expected} == expected
    assert index.base_role("D999999") is None


def test_graph_share_applies_as_in_assign_roles(question_lake) -> None:
    """On the question graph (8 articles), with shares counted from 1 article on and a 0.2
    cap: Myocardial Infarction (3 of 8) is too common, Humans (8 of 8) stays a check tag."""
    from kg_platform.graph.store import KGStore
    from kg_platform.grounding.loading import graph_article_counts

    build_grounding_index(question_lake)
    store = KGStore.open(question_lake)
    index = SurfaceIndex.open(question_lake)
    config = RoleConfig(min_articles_for_share=1, max_article_share=0.2)
    frames = {
        t: pl.from_arrow(question_lake.read_parquet(f"mesh/{t}.parquet"))
        for t in ("descriptors", "tree")
    }
    table = assign_roles(
        frames["descriptors"], frames["tree"], config, graph_article_counts(store), 8
    )
    expected = {
        u: (r, why) for u, r, why in zip(table["ui"], table["role"], table["reason"], strict=True)
    }
    got = dict(IndexedRoles(index, store, config).items())
    assert got == expected
    assert got["D009203"] == ("IGNORE", "too_common")
    assert got["D006801"] == ("IGNORE", "check_tag")


def test_asset_checks_pass_on_a_real_index(question_lake) -> None:
    stats, checks = build_grounding_index(question_lake)
    assert [(c.name, c.passed) for c in checks] == [
        ("every_surface_unique_and_mapped", True),
        ("index_round_trips", True),
        ("index_grounds_as_table", True),
    ]
    assert stats.index_bytes == question_lake.size(INDEX_KEY)
    assert sample_questions(pl.DataFrame({"term": ["a", "b", "c", "d"]}), every=1) == [
        "Does a affect b?",
        "Does c affect d?",
    ]


def test_a_named_descriptor_without_a_surface_fails_the_mapping_check(tmp_path: Path) -> None:
    from kg_platform_tests.answer.graph_fixture import STROKE, write_real_mesh

    lake = Lake(str(tmp_path / "lake"))
    write_real_mesh(lake)
    terms = pl.from_arrow(lake.read_parquet("mesh/terms.parquet"))
    lake.write_parquet("mesh/terms.parquet", terms.filter(pl.col("ui") != STROKE).to_arrow())
    [mapped, *_] = build_grounding_index(lake)[1]
    assert (mapped.name, mapped.passed, mapped.details) == (
        "every_surface_unique_and_mapped",
        False,
        f"1 named descriptor(s) without a surface, e.g. {STROKE}",
    )


def _copy(index_lake: Lake, tmp_path: Path) -> Path:
    target = tmp_path / "index.kgi"
    target.write_bytes(Path(index_lake.path(INDEX_KEY)).read_bytes())
    return target


def test_truncated_index_names_the_object(index_lake: Lake, tmp_path: Path) -> None:
    path = _copy(index_lake, tmp_path)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 1000)
    with pytest.raises(GroundingIndexError, match=rf"^{path}: .*truncated"):
        SurfaceIndex.open_file(str(path))


def test_corrupt_index_names_the_object(index_lake: Lake, tmp_path: Path) -> None:
    path = _copy(index_lake, tmp_path)
    data = bytearray(path.read_bytes())
    data[:8] = b"PAR1\0\0\0\0"
    path.write_bytes(bytes(data))
    with pytest.raises(GroundingIndexError, match=rf"^{path}: not a grounding index"):
        SurfaceIndex.open_file(str(path))
    # bytes flipped in the data: open stays O(1), the asset's verify finds it
    data = bytearray(Path(index_lake.path(INDEX_KEY)).read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(GroundingIndexError, match=rf"^{path}: content does not match"):
        SurfaceIndex.open_file(str(path)).verify()


def test_column_hashes_are_the_question_paths(surfaces: pl.DataFrame) -> None:
    """``surface_hashes`` (the index build's, a column at a time) is ``surface_hash`` (what a
    question's lookup computes) for every surface key, and for keys outside ASCII."""
    keys = surfaces["key"].to_list()
    assert surface_hashes(surfaces["key"]).tolist() == [surface_hash(k) for k in keys]
    odd = ["", "é", "a b", "\u00df"]
    assert surface_hashes(pl.Series(odd)).tolist() == [surface_hash(k) for k in odd]
    assert surface_hash("breast neoplasms") == 9896193548380787629


@pytest.mark.parametrize("strings", [[], ["", "é b", "a"], ["x", "x", "x"]])
def test_packed_column_is_packed_strings(strings: list[str]) -> None:
    """The index build packs a column's Arrow bytes as ``_pack`` packs Python strings."""
    from kg_platform.grounding.surface_index import _pack, _pack_column

    column = _pack_column(pl.Series(strings, dtype=pl.Utf8))
    listed = _pack(strings)
    assert [(a.dtype, a.tolist()) for a in column] == [(a.dtype, a.tolist()) for a in listed]
