"""A small hand-built corpus and MeSH tables written into a lake, with the arrays the build
must produce worked out by hand in the comments of ``tiny_corpus``."""

from __future__ import annotations

import polars as pl

from kg_platform.mesh.tables import descriptor_table
from kg_platform.schemas import CORPUS_MODELS, MeshDescriptors, MeshTree
from kg_platform.storage.corpus import write_corpus_table
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference

_SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    "articles": {
        "pmid": pl.Int64,
        "version": pl.Int32,
        "file": pl.Utf8,
        "title": pl.Utf8,
        "abstract": pl.Utf8,
        "has_abstract": pl.Boolean,
        "year": pl.Int32,
        "journal": pl.Utf8,
        "language": pl.Utf8,
        "n_pubtypes": pl.Int32,
    },
    "mesh_edges": {
        "pmid": pl.Int64,
        "version": pl.Int32,
        "descriptor_ui": pl.Utf8,
        "descriptor_major": pl.Boolean,
        "qualifier_ui": pl.Utf8,
        "qualifier_major": pl.Boolean,
    },
    "citations": {"citing_pmid": pl.Int64, "version": pl.Int32, "cited_pmid": pl.Int64},
    "corrections": {
        "pmid": pl.Int64,
        "version": pl.Int32,
        "ref_type": pl.Utf8,
        "ref_pmid": pl.Int64,
    },
    "chemicals": {
        "pmid": pl.Int64,
        "version": pl.Int32,
        "registry_number": pl.Utf8,
        "substance_ui": pl.Utf8,
        "substance_name": pl.Utf8,
    },
    "pubtypes": {"pmid": pl.Int64, "version": pl.Int32, "pubtype_ui": pl.Utf8, "name": pl.Utf8},
}


def corpus_frame(table: str, rows: list[tuple]) -> pl.DataFrame:
    """A frame with the columns of corpus/<table>; ``rows`` omit the version (always 1)."""
    schema = _SCHEMAS[table]
    names = [c for c in schema if c != "version"]
    frame = pl.DataFrame(rows, schema={c: schema[c] for c in names}, orient="row")
    frame = frame.with_columns(pl.lit(1, pl.Int32).alias("version")).select(list(schema))
    CORPUS_MODELS[table].validate(frame)
    return frame


def write_corpus(lake: Lake, tables: dict[str, list[tuple]]) -> None:
    """The tables as the corpus's parts, every bucket holding an article with a part in
    every table (kg_platform.storage.corpus)."""
    buckets = write_corpus_table(
        lake, "articles", corpus_frame("articles", tables["articles"]).to_arrow()
    )
    for table in _SCHEMAS:
        if table != "articles":
            frame = corpus_frame(table, tables.get(table, []))
            write_corpus_table(lake, table, frame.to_arrow(), buckets)


def write_mesh(lake: Lake, descriptors: list[str], tree: list[tuple[str, str]]) -> None:
    """mesh/descriptors and mesh/tree as mesh_tables writes them (validated by its models)."""
    trees = pl.DataFrame(tree, schema={"ui": pl.Utf8, "tree_number": pl.Utf8}, orient="row")
    names = pl.DataFrame({"ui": descriptors, "name": [f"name of {u}" for u in descriptors]})
    table = descriptor_table(names, trees)
    MeshDescriptors.validate(table)
    MeshTree.validate(trees)
    lake.write_parquet("mesh/descriptors.parquet", table.to_arrow())
    lake.write_parquet("mesh/tree.parquet", trees.to_arrow())


def _article(pmid: int, year: int | None, abstract: bool) -> tuple:
    text = "An abstract." if abstract else None
    return (pmid, "pubmed26n0001", f"Title {pmid}", text, abstract, year, "J", "eng", 1)


def tiny_corpus(lake: Lake) -> None:
    """Five articles (node ids by PMID: 10->0, 20->1, 30->2, 40->3, 50->4), written unsorted.

    citations: 10 rows, 2 dangling (999, 7), 1 duplicate -> 7 edges
      cite     indptr [0,0,1,3,5,7]  indices [0, 0,1, 0,2, 2,3]
      cited_by indptr [0,3,4,6,7,7]  indices [1,2,3, 2, 3,4, 4]
    MeSH: descriptors sorted D000001 D000002 D000003 D000068116 D999999 (the last is not in
    mesh/descriptors: kept as an unknown node)
      mesh2art indptr [0,2,4,5,5,6] indices [0,1, 0,4, 2, 2] major [T,F, F,T, T, F]
      art2mesh indptr [0,2,3,5,5,6] indices [0,1, 0, 2,4, 1]  major [T,F, F, T,F, T]
    flags: 10 -> 0, 20 -> Q, 30 -> Q|R (pubtype), 40 -> Q|R (RetractionIn), 50 -> C
    """
    write_corpus(
        lake,
        {
            "articles": [
                _article(30, 2001, True),
                _article(10, 1999, False),
                _article(20, None, True),
                _article(40, 2020, True),
                _article(50, 2021, False),
            ],
            "citations": [
                (30, 10),
                (30, 20),
                (30, 10),
                (30, 999),
                (40, 30),
                (40, 10),
                (50, 40),
                (50, 30),
                (50, 7),
                (20, 10),
            ],
            "mesh_edges": [
                (10, "D000002", False, None, None),
                (10, "D000001", False, "Q000001", True),
                (10, "D000001", False, "Q000002", False),
                (20, "D000001", False, None, None),
                (30, "D000003", True, None, None),
                (30, "D999999", False, None, None),
                (50, "D000002", True, "Q000003", False),
                (50, "D000002", False, "Q000004", None),
            ],
            "corrections": [
                (40, "RetractionIn", 41),
                (50, "ExpressionOfConcernIn", 51),
                (20, "ErratumIn", 21),
            ],
            "pubtypes": [
                (30, None, "Retracted Publication"),
                (30, None, "Journal Article"),
                (10, None, "Journal Article"),
            ],
        },
    )
    write_mesh(
        lake,
        ["D000003", "D000001", "D000002", "D000068116"],
        [
            ("D000001", "C04"),
            ("D000001", "C04.557"),
            ("D000002", "D02.705.400"),
            ("D000002", "A01.111"),
            ("D000003", "B01.050.150"),
            ("D000068116", "E05.318"),
        ],
    )


def write_mesh_2024(lake: Lake) -> None:
    """mesh/descriptors and mesh/tree from the MeSH 2024 descriptor TSV."""
    tsv = require_reference("mesh", "tsv", "mesh2024_descriptors.tsv.gz")
    mesh = pl.read_csv(
        tsv,
        separator="\t",
        has_header=False,
        quote_char=None,
        new_columns=["ui", "name", "terms", "trees", "taxa"],
        infer_schema=False,
    )
    lake.write_parquet("mesh/descriptors.parquet", mesh.select("ui", "name").to_arrow())
    tree = (
        mesh.select("ui", pl.col("trees").str.split("|").alias("tree_number"))
        .explode("tree_number")
        .drop_nulls()
    )
    lake.write_parquet("mesh/tree.parquet", tree.to_arrow())


def mirror_pair_lake(tmp_path) -> tuple:
    """A lake holding MeSH 2024 and the per-file tables of the mirror's baseline file and its
    update file (test_real_pubmed's pair), and the two files' names in that order."""
    from kg_platform.storage.lake import Lake
    from kg_platform_tests.conftest import require_reference
    from kg_platform_tests.support.fold import load_tables

    mirror = require_reference("pubmed", "mirror")
    lake = Lake(str(tmp_path / "lake"))
    write_mesh_2024(lake)
    names = load_tables(
        lake,
        [
            mirror / "baseline" / "pubmed26n1334.xml.gz",
            mirror / "updatefiles" / "pubmed26n1335.xml.gz",
        ],
    )
    return lake, names
