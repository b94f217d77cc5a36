"""The raw MeSH records every source reader produces, before the loader rules apply.

XML and TSV readers both end in a `MeshRecords`, so the table build (`tables.py`) has one
input shape whatever the source was.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

DESCRIPTOR_SCHEMA = {"ui": pl.Utf8, "name": pl.Utf8}
TREE_SCHEMA = {"ui": pl.Utf8, "tree_number": pl.Utf8}
ENTRY_SCHEMA = {"ui": pl.Utf8, "term": pl.Utf8}
ALLOWABLE_SCHEMA = {"descriptor_ui": pl.Utf8, "qualifier_ui": pl.Utf8}
QUALIFIER_SCHEMA = {"ui": pl.Utf8, "name": pl.Utf8, "abbreviation": pl.Utf8}
SCR_SURFACE_SCHEMA = {"scr_ui": pl.Utf8, "surface": pl.Utf8}
SCR_HEADING_SCHEMA = {"scr_ui": pl.Utf8, "heading_ui": pl.Utf8}


@dataclass(frozen=True)
class MeshRecords:
    """MeSH as read from one source, one frame per kind of fact.

    - descriptors: ui, name (one row per descriptor record)
    - tree: ui, tree_number
    - entries: ui, term (entry terms; the record's preferred name is not repeated here)
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
