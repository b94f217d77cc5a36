"""The raw MeSH records every source reader produces, before the loader rules apply.

XML and TSV readers both end in a `MeshRecords`, so the table build (`tables.py`) has one
input shape whatever the source was.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

DESCRIPTOR_SCHEMA = {"ui": pl.Utf8, "name": pl.Utf8}
TREE_SCHEMA = {"ui": pl.Utf8, "tree_number": pl.Utf8}
ENTRY_SCHEMA = {
    "ui": pl.Utf8,
    "term": pl.Utf8,
    "concept_ui": pl.Utf8,
    "term_ui": pl.Utf8,
    "concept_preferred": pl.Boolean,
    "permuted": pl.Boolean,
    "lexical_tag": pl.Utf8,
    "record_preferred": pl.Boolean,
}
# what a term source may not know (the descriptors TSV lists bare strings)
TERM_DETAIL_COLUMNS = ("concept_ui", "term_ui", "concept_preferred", "permuted", "lexical_tag")
ALLOWABLE_SCHEMA = {"descriptor_ui": pl.Utf8, "qualifier_ui": pl.Utf8}
QUALIFIER_SCHEMA = {"ui": pl.Utf8, "name": pl.Utf8, "abbreviation": pl.Utf8}
SCR_SURFACE_SCHEMA = {"scr_ui": pl.Utf8, "surface": pl.Utf8}
SCR_HEADING_SCHEMA = {"scr_ui": pl.Utf8, "heading_ui": pl.Utf8}


@dataclass(frozen=True)
class MeshRecords:
    """MeSH as read from one source, one frame per kind of fact.

    - descriptors: ui, name (one row per descriptor record)
    - tree: ui, tree_number
    - entries: ui, term, concept_ui, term_ui, concept_preferred, permuted, lexical_tag,
      record_preferred: the terms of every concept. A concept-level source (NLM XML, the
      thesaurus table) also gives the record-preferred term (``record_preferred``), whose
      details the descriptor's name row takes; the descriptors TSV gives only entry terms,
      their details null.
    - allowable: descriptor_ui, qualifier_ui
    - qualifiers: ui, name, abbreviation (null where the source does not give one)
    - scr_surfaces: scr_ui, surface (the record's name and its synonyms)
    - scr_headings: scr_ui, heading_ui (HeadingMappedTo descriptors, `*` stripped)
    - n_supplementary: how many supplementary records the source held
    """

    descriptors: pl.DataFrame
    tree: pl.DataFrame
    entries: pl.DataFrame
    allowable: pl.DataFrame
    qualifiers: pl.DataFrame
    scr_surfaces: pl.DataFrame
    scr_headings: pl.DataFrame
    n_supplementary: int


def empty(schema: dict[str, pl.DataType]) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def frame(rows: list[tuple], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=schema, orient="row")
