"""proved_valid: one query proves that a frame passes its pandera model, and never proves
it where pandera's validation fails (the file run's schema check then asks pandera)."""

from __future__ import annotations

import pandera.errors
import polars as pl
import pytest

from kg_platform.pubmed.parse import parse_file
from kg_platform.schemas import MESH_TABLES, PUBMED_TABLES
from kg_platform.schemas.one_pass import proved_valid
from kg_platform_tests.conftest import require_reference


@pytest.fixture(scope="module")
def frames() -> dict[str, pl.DataFrame]:
    # every one of the seven tables has rows in this file (30 articles, 6 deletions)
    tables = parse_file(require_reference("pubmed", "mirror/updatefiles/pubmed26n1335.xml.gz"))
    return {name: pl.from_arrow(t) for name, t in tables.items()}


def pandera_passes(model, frame: pl.DataFrame) -> bool:
    try:
        model.validate(frame, lazy=True)
    except (pandera.errors.SchemaErrors, pandera.errors.SchemaError):
        return False
    return True


def first_row_set(frame: pl.DataFrame, column: str, value) -> pl.DataFrame:
    """The frame with ``column`` of its first row set to ``value`` (its dtype kept)."""
    first = pl.int_range(pl.len()) == 0
    return frame.with_columns(
        pl.when(first)
        .then(pl.lit(value, dtype=frame.schema[column]))
        .otherwise(pl.col(column))
        .alias(column)
    )


def test_every_pubmed_table_of_a_real_file_is_proved(frames) -> None:
    for name, model in PUBMED_TABLES.items():
        assert frames[name].height > 0, name
        assert proved_valid(model, frames[name]), name
        assert pandera_passes(model, frames[name]), name
        # no rows: nothing to disprove
        assert proved_valid(model, frames[name].clear()), name


# (table, what breaks the model), each one condition pandera checks
BROKEN = {
    "articles: pmid 0 (gt 0)": ("articles", lambda f: first_row_set(f, "pmid", 0)),
    "articles: version 0 (ge 1)": ("articles", lambda f: first_row_set(f, "version", 0)),
    "articles: year 999": ("articles", lambda f: first_row_set(f, "year", 999)),
    "articles: year 2101": ("articles", lambda f: first_row_set(f, "year", 2101)),
    "articles: n_pubtypes -1": ("articles", lambda f: first_row_set(f, "n_pubtypes", -1)),
    "articles: a null file": ("articles", lambda f: first_row_set(f, "file", None)),
    "articles: a null has_abstract": (
        "articles",
        lambda f: first_row_set(f, "has_abstract", None),
    ),
    "articles: (pmid, version) twice": ("articles", lambda f: pl.concat([f, f.head(1)])),
    "articles: a column beyond the model": (
        "articles",
        lambda f: f.with_columns(pl.lit(1).alias("extra")),
    ),
    "articles: a column missing": ("articles", lambda f: f.drop("language")),
    "articles: pmid as Int32": (
        "articles",
        lambda f: f.with_columns(pl.col("pmid").cast(pl.Int32)),
    ),
    "articles: year as Int64": (
        "articles",
        lambda f: f.with_columns(pl.col("year").cast(pl.Int64)),
    ),
    "mesh_edges: descriptor X000001": (
        "mesh_edges",
        lambda f: first_row_set(f, "descriptor_ui", "X000001"),
    ),
    "mesh_edges: descriptor of 5 digits": (
        "mesh_edges",
        lambda f: first_row_set(f, "descriptor_ui", "D12345"),
    ),
    "mesh_edges: descriptor of 10 digits": (
        "mesh_edges",
        lambda f: first_row_set(f, "descriptor_ui", "D0123456789"),
    ),
    "mesh_edges: descriptor with a space after": (
        "mesh_edges",
        lambda f: first_row_set(f, "descriptor_ui", "D000001 "),
    ),
    "mesh_edges: qualifier Q1": ("mesh_edges", lambda f: first_row_set(f, "qualifier_ui", "Q1")),
    "mesh_edges: a null descriptor_major": (
        "mesh_edges",
        lambda f: first_row_set(f, "descriptor_major", None),
    ),
    "citations: cited_pmid 0": ("citations", lambda f: first_row_set(f, "cited_pmid", 0)),
    "citations: a null citing_pmid": (
        "citations",
        lambda f: first_row_set(f, "citing_pmid", None),
    ),
    "corrections: ref_pmid 0 (nullable, gt 0)": (
        "corrections",
        lambda f: first_row_set(f, "ref_pmid", 0),
    ),
    "corrections: a null ref_type": ("corrections", lambda f: first_row_set(f, "ref_type", None)),
    "chemicals: a null substance_name": (
        "chemicals",
        lambda f: first_row_set(f, "substance_name", None),
    ),
    "pubtypes: version -1": ("pubtypes", lambda f: first_row_set(f, "version", -1)),
    "deletions: a pmid twice": ("deletions", lambda f: pl.concat([f, f.head(1)])),
    "deletions: pmid -5": ("deletions", lambda f: first_row_set(f, "pmid", -5)),
}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_frame_pandera_fails_is_never_proved(frames, broken: str) -> None:
    table, breaking = BROKEN[broken]
    frame = breaking(frames[table])
    model = PUBMED_TABLES[table]
    assert not pandera_passes(model, frame)
    assert not proved_valid(model, frame)


def test_nulls_in_nullable_columns_pass_their_checks_as_in_pandera(frames) -> None:
    for table, column in (
        ("articles", "year"),
        ("mesh_edges", "qualifier_ui"),
        ("corrections", "ref_pmid"),
        ("pubtypes", "pubtype_ui"),
    ):
        frame = first_row_set(frames[table], column, None)
        model = PUBMED_TABLES[table]
        assert pandera_passes(model, frame), (table, column)
        assert proved_valid(model, frame), (table, column)


def test_a_model_with_checks_it_does_not_read_is_never_proved() -> None:
    # MeshDescriptors: a list column and a str_length check; pandera alone judges it
    model = MESH_TABLES["descriptors"]
    frame = pl.DataFrame(
        {
            "ui": ["D000001"],
            "name": ["Calcimycin"],
            "categories": [["D"]],
            "min_depth": [3],
            "n_trees": [1],
        },
        schema={
            "ui": pl.String,
            "name": pl.String,
            "categories": pl.List(pl.String),
            "min_depth": pl.Int32,
            "n_trees": pl.Int32,
        },
    )
    assert pandera_passes(model, frame)
    assert not proved_valid(model, frame)
