"""The pandera models are the one declaration of each table's columns: the parser's Arrow
schemas and the Dagster column metadata derived from them must match what is written."""

from __future__ import annotations

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kg_platform.assets.table_metadata import table_metadata
from kg_platform.pubmed import parse
from kg_platform.pubmed.parse import parse_file
from kg_platform.schemas import (
    ARROW_SCHEMAS,
    CORPUS_MODELS,
    MESH_TABLES,
    PUBMED_TABLES,
    Articles,
    MeshDescriptors,
    arrow_schema,
    columns,
)
from kg_platform_tests.conftest import require_reference

# what the parser has always written (the hand-written schemas the models replaced)
EXPECTED_ARROW: dict[str, pa.Schema] = {
    "articles": pa.schema(
        [
            ("pmid", pa.int64()),
            ("version", pa.int32()),
            ("file", pa.string()),
            ("title", pa.string()),
            ("abstract", pa.string()),
            ("has_abstract", pa.bool_()),
            ("year", pa.int32()),
            ("journal", pa.string()),
            ("language", pa.string()),
            ("n_pubtypes", pa.int32()),
        ]
    ),
    "mesh_edges": pa.schema(
        [
            ("pmid", pa.int64()),
            ("version", pa.int32()),
            ("descriptor_ui", pa.string()),
            ("descriptor_major", pa.bool_()),
            ("qualifier_ui", pa.string()),
            ("qualifier_major", pa.bool_()),
        ]
    ),
    "citations": pa.schema(
        [("citing_pmid", pa.int64()), ("version", pa.int32()), ("cited_pmid", pa.int64())]
    ),
    "corrections": pa.schema(
        [
            ("pmid", pa.int64()),
            ("version", pa.int32()),
            ("ref_type", pa.string()),
            ("ref_pmid", pa.int64()),
        ]
    ),
    "chemicals": pa.schema(
        [
            ("pmid", pa.int64()),
            ("version", pa.int32()),
            ("registry_number", pa.string()),
            ("substance_ui", pa.string()),
            ("substance_name", pa.string()),
        ]
    ),
    "pubtypes": pa.schema(
        [
            ("pmid", pa.int64()),
            ("version", pa.int32()),
            ("pubtype_ui", pa.string()),
            ("name", pa.string()),
        ]
    ),
    "deletions": pa.schema([("pmid", pa.int64())]),
}


def test_arrow_schemas_are_derived_and_exact() -> None:
    assert list(ARROW_SCHEMAS) == list(PUBMED_TABLES)
    assert parse.SCHEMAS is ARROW_SCHEMAS
    assert tuple(PUBMED_TABLES) == parse.TABLE_NAMES
    for name, model in PUBMED_TABLES.items():
        derived = arrow_schema(model)
        assert derived.equals(EXPECTED_ARROW[name], check_metadata=True), name
        assert ARROW_SCHEMAS[name].equals(derived, check_metadata=True), name
        assert derived.metadata is None
        # nullable everywhere, as the parser has always written (Arrow's default)
        assert all(field.nullable for field in derived), name


def test_arrow_schema_maps_lists() -> None:
    assert arrow_schema(MeshDescriptors) == pa.schema(
        [
            ("ui", pa.string()),
            ("name", pa.string()),
            ("categories", pa.list_(pa.string())),
            ("min_depth", pa.int32()),
            ("n_trees", pa.int32()),
        ]
    )


@pytest.mark.parametrize(
    "relative",
    [
        "mirror/baseline/pubmed26n1334.xml.gz",
        "mirror/updatefiles/pubmed26n1335.xml.gz",  # carries deletions
        "legacy/medline16n0902.xml.gz",
        "efetch/tipplerow_pubmed_sample.xml",
    ],
)
def test_parser_writes_the_derived_schemas(relative: str, tmp_path) -> None:
    path = require_reference("pubmed", *relative.split("/"))
    tables = parse_file(path)
    assert list(tables) == list(PUBMED_TABLES)
    for name, table in tables.items():
        assert table.schema.equals(arrow_schema(PUBMED_TABLES[name]), check_metadata=True), name
        # and the Parquet file reads back with the same columns and types
        out = tmp_path / f"{name}.parquet"
        pq.write_table(table, out)
        assert pq.read_schema(out).remove_metadata().equals(ARROW_SCHEMAS[name]), name


def test_parser_rows_on_baseline_file() -> None:
    path = require_reference("pubmed", "mirror", "baseline", "pubmed26n1334.xml.gz")
    tables = parse_file(path)
    rows = {name: table.num_rows for name, table in tables.items()}
    assert rows == {
        "articles": 30,
        "mesh_edges": 112,
        "citations": 286,
        "corrections": 2,
        "chemicals": 9,
        "pubtypes": 37,
        "deletions": 0,
    }
    assert set(tables["articles"].column("file").to_pylist()) == {"pubmed26n1334"}


def test_columns_of_articles() -> None:
    assert [(name, type_name) for name, type_name, _ in columns(Articles)] == [
        ("pmid", "int64"),
        ("version", "int32"),
        ("file", "string"),
        ("title", "string"),
        ("abstract", "string"),
        ("has_abstract", "bool"),
        ("year", "int32"),
        ("journal", "string"),
        ("language", "string"),
        ("n_pubtypes", "int32"),
    ]
    assert columns(Articles)[0] == ("pmid", "int64", "PubMed identifier of the record")
    assert ("categories", "list<string>") in [(n, t) for n, t, _ in columns(MeshDescriptors)]


@pytest.mark.parametrize(
    "model",
    sorted(
        {*PUBMED_TABLES.values(), *CORPUS_MODELS.values(), *MESH_TABLES.values()},
        key=lambda m: m.__name__,
    ),
    ids=lambda m: m.__name__,
)
def test_every_column_is_described(model) -> None:
    cols = columns(model)
    assert [name for name, _, _ in cols] == [f.name for f in arrow_schema(model)]
    for name, _, description in cols:
        assert description.strip(), f"{model.__name__}.{name} has no description"


def test_table_metadata_for_articles() -> None:
    metadata = table_metadata(Articles, rows=30)
    assert set(metadata) == {"dagster/column_schema", "dagster/row_count"}
    assert metadata["dagster/row_count"] == 30
    schema = metadata["dagster/column_schema"]
    assert isinstance(schema, dg.TableSchema)
    assert [(c.name, c.type) for c in schema.columns] == [
        ("pmid", "int64"),
        ("version", "int32"),
        ("file", "string"),
        ("title", "string"),
        ("abstract", "string"),
        ("has_abstract", "bool"),
        ("year", "int32"),
        ("journal", "string"),
        ("language", "string"),
        ("n_pubtypes", "int32"),
    ]
    by_name = {c.name: c.description for c in schema.columns}
    assert by_name["pmid"] == "PubMed identifier of the record"
    assert by_name["has_abstract"] == "True when abstract is not null"
    # the dict is valid asset metadata as Dagster sees it
    dg.MaterializeResult(metadata=metadata)


def test_the_corpus_models_cover_the_tables_the_fold_writes():
    from kg_platform.pubmed.fold import CORPUS_TABLES

    assert (
        list(CORPUS_MODELS)
        == list(CORPUS_TABLES)
        == [
            "articles",
            "mesh_edges",
            "citations",
            "corrections",
            "chemicals",
            "pubtypes",
        ]
    )
