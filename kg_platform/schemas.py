"""Pandera (polars) models, one per table. They are the contract between stages.

Per-file tables (``tables/<table>/<file>.parquet``) and the folded corpus
(``corpus/<table>.parquet``) share the same columns. Child tables carry ``version`` so the
fold can keep exactly the rows of the record version that wins.
"""

from __future__ import annotations

import pandera.polars as pa
import polars as pl

UI_DESCRIPTOR = r"^D\d{6,9}$"
UI_QUALIFIER = r"^Q\d{6,9}$"
UI_SUPPLEMENTARY = r"^C\d{6,9}$"


class Articles(pa.DataFrameModel):
    pmid: pl.Int64 = pa.Field(gt=0)
    version: pl.Int32 = pa.Field(ge=1)
    file: pl.Utf8
    title: pl.Utf8 = pa.Field(nullable=True)
    abstract: pl.Utf8 = pa.Field(nullable=True)
    has_abstract: pl.Boolean
    year: pl.Int32 = pa.Field(nullable=True, ge=1000, le=2100)
    journal: pl.Utf8 = pa.Field(nullable=True)
    language: pl.Utf8 = pa.Field(nullable=True)
    n_pubtypes: pl.Int32 = pa.Field(ge=0)

    class Config:
        strict = True
        unique = ["pmid", "version"]


class MeshEdges(pa.DataFrameModel):
    pmid: pl.Int64 = pa.Field(gt=0)
    version: pl.Int32 = pa.Field(ge=1)
    descriptor_ui: pl.Utf8 = pa.Field(str_matches=UI_DESCRIPTOR)
    descriptor_major: pl.Boolean
    qualifier_ui: pl.Utf8 = pa.Field(nullable=True, str_matches=UI_QUALIFIER)
    qualifier_major: pl.Boolean = pa.Field(nullable=True)

    class Config:
        strict = True


class Citations(pa.DataFrameModel):
    citing_pmid: pl.Int64 = pa.Field(gt=0)
    version: pl.Int32 = pa.Field(ge=1)
    cited_pmid: pl.Int64 = pa.Field(gt=0)

    class Config:
        strict = True


class Corrections(pa.DataFrameModel):
    pmid: pl.Int64 = pa.Field(gt=0)
    version: pl.Int32 = pa.Field(ge=1)
    ref_type: pl.Utf8
    ref_pmid: pl.Int64 = pa.Field(nullable=True, gt=0)

    class Config:
        strict = True


class Chemicals(pa.DataFrameModel):
    pmid: pl.Int64 = pa.Field(gt=0)
    version: pl.Int32 = pa.Field(ge=1)
    registry_number: pl.Utf8 = pa.Field(nullable=True)
    substance_ui: pl.Utf8 = pa.Field(nullable=True)
    substance_name: pl.Utf8

    class Config:
        strict = True


class Pubtypes(pa.DataFrameModel):
    pmid: pl.Int64 = pa.Field(gt=0)
    version: pl.Int32 = pa.Field(ge=1)
    pubtype_ui: pl.Utf8 = pa.Field(nullable=True)
    name: pl.Utf8

    class Config:
        strict = True


class Deletions(pa.DataFrameModel):
    pmid: pl.Int64 = pa.Field(gt=0)

    class Config:
        strict = True
        unique = ["pmid"]


PUBMED_TABLES: dict[str, type[pa.DataFrameModel]] = {
    "articles": Articles,
    "mesh_edges": MeshEdges,
    "citations": Citations,
    "corrections": Corrections,
    "chemicals": Chemicals,
    "pubtypes": Pubtypes,
    "deletions": Deletions,
}

# the corpus holds the current state: the same tables minus deletions
CORPUS_TABLES: dict[str, type[pa.DataFrameModel]] = {
    k: v for k, v in PUBMED_TABLES.items() if k != "deletions"
}


# -- MeSH (mesh/<table>.parquet) ------------------------------------------------------------
MESH_TREE_NUMBER = r"^[A-Z]\d{2}(\.\d{3})*$"
MESH_TERM_KINDS = ["name", "entry", "deinverted", "scr_alias"]


class MeshDescriptors(pa.DataFrameModel):
    ui: pl.Utf8 = pa.Field(str_matches=UI_DESCRIPTOR, unique=True)
    name: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    # sorted distinct tree letters, e.g. ["C"] for Myocardial Infarction; empty without trees
    categories: pl.List(pl.Utf8)
    min_depth: pl.Int32 = pa.Field(nullable=True, ge=1)
    n_trees: pl.Int32 = pa.Field(ge=0)

    class Config:
        strict = True


class MeshTree(pa.DataFrameModel):
    ui: pl.Utf8 = pa.Field(str_matches=UI_DESCRIPTOR)
    tree_number: pl.Utf8 = pa.Field(str_matches=MESH_TREE_NUMBER, unique=True)

    class Config:
        strict = True


class MeshBroader(pa.DataFrameModel):
    child_ui: pl.Utf8 = pa.Field(str_matches=UI_DESCRIPTOR)
    parent_ui: pl.Utf8 = pa.Field(str_matches=UI_DESCRIPTOR)

    class Config:
        strict = True
        unique = ["child_ui", "parent_ui"]


class MeshAllowable(pa.DataFrameModel):
    descriptor_ui: pl.Utf8 = pa.Field(str_matches=UI_DESCRIPTOR)
    qualifier_ui: pl.Utf8 = pa.Field(str_matches=UI_QUALIFIER)

    class Config:
        strict = True
        unique = ["descriptor_ui", "qualifier_ui"]


class MeshTerms(pa.DataFrameModel):
    ui: pl.Utf8 = pa.Field(str_matches=UI_DESCRIPTOR)
    term: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    normalised: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    kind: pl.Utf8 = pa.Field(isin=MESH_TERM_KINDS)

    class Config:
        strict = True


class MeshQualifiers(pa.DataFrameModel):
    ui: pl.Utf8 = pa.Field(str_matches=UI_QUALIFIER, unique=True)
    name: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    abbreviation: pl.Utf8 = pa.Field(nullable=True, str_matches=r"^[A-Z]{2}$")

    class Config:
        strict = True


class MeshScrAliases(pa.DataFrameModel):
    scr_ui: pl.Utf8 = pa.Field(str_matches=UI_SUPPLEMENTARY)
    surface: pl.Utf8 = pa.Field(str_length={"min_value": 8})
    heading_ui: pl.Utf8 = pa.Field(str_matches=UI_DESCRIPTOR)

    class Config:
        strict = True
        unique = ["scr_ui", "surface", "heading_ui"]


MESH_TABLES: dict[str, type] = {
    "descriptors": MeshDescriptors,
    "tree": MeshTree,
    "broader": MeshBroader,
    "allowable": MeshAllowable,
    "terms": MeshTerms,
    "qualifiers": MeshQualifiers,
    "scr_aliases": MeshScrAliases,
}
