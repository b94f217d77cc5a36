"""From raw MeSH records to the seven `mesh/<table>.parquet` tables, applying the loader rules.

Loader rules (each counted in `LoaderRuleStats`, reported in the asset's metadata):
- de-inversion: an inverted term ("Circumcision, Male") also gives its natural order
  ("Male Circumcision") when that form is not already a term of the same descriptor;
- supplementary aliases shorter than 8 characters are dropped (short chemical codes and
  abbreviations collide with ordinary words);
- supplementary aliases that any descriptor already claims as a term are dropped (one such
  alias mapped "pediatric" onto a sulfonamide);
- supplementary mappings to descriptors this MeSH version does not have are dropped and
  counted as dangling.
`terms.normalised` is `kg_platform.text.normalise.normalise` of the term, so the
grounder matches on exactly the same form.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import polars as pl
import pyarrow as pa

from kg_platform.mesh.records import TERM_DETAIL_COLUMNS, MeshRecords
from kg_platform.mesh.source import MeshSourceSpec, load_mesh_records, resolve_mesh_source
from kg_platform.schemas import MESH_TABLE_NAMES, MeshTerms
from kg_platform.storage.lake import Lake
from kg_platform.storage.mesh import MESH_MANIFEST, mesh_key
from kg_platform.text.normalise import normalise

MIN_SCR_ALIAS_CHARS = 8
# the terms table's columns, in the order its pandera model declares them
TERM_TABLE_COLUMNS = tuple(MeshTerms.to_schema().columns)
# chemical names carry commas too ("Benzoxazole, 5-(methylamino)-"): only plain words
# de-invert, and only when the part after the comma reads as a modifier: "Health Care,
# Failures to Rescue" is a topic and its parts, not an inversion
_DEINVERTIBLE = r"^[^,\d()\[\]]+, [^,\d()\[\]]+$"
_NOT_A_MODIFIER = r"(?i), (.* )?(of|to|in|and|for|with|by|on|the|or|as|at|from)( |$)"


@dataclass(frozen=True)
class LoaderRuleStats:
    """How many surfaces each loader rule added or removed."""

    deinversion_candidates: int  # name/entry terms of the form "Head, Modifier"
    deinversion_added: int  # natural-order forms that were new for their descriptor
    empty_terms_removed: int  # terms that normalise to nothing
    scr_alias_candidates: int  # (scr, surface, heading) rows before the rules
    scr_short_removed: int  # surfaces under MIN_SCR_ALIAS_CHARS characters
    scr_claimed_removed: int  # surfaces a descriptor already claims as a term
    scr_empty_removed: int  # surfaces that normalise to nothing
    scr_dangling_mappings: int  # (scr, heading) pairs naming an unknown descriptor
    scr_aliases_kept: int  # rows of scr_aliases
    scr_alias_terms_added: int  # rows of terms with kind scr_alias (distinct per descriptor)
    allowable_unknown_descriptor_removed: int  # pairs naming a descriptor not in this MeSH

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class MeshBuild:
    """The tables of one MeSH build, the rule counts, and where it came from."""

    tables: dict[str, pa.Table]
    stats: LoaderRuleStats
    n_supplementary: int
    source_description: str

    def row_counts(self) -> dict[str, int]:
        return {name: table.num_rows for name, table in self.tables.items()}


def build_mesh(source: MeshSourceSpec | MeshRecords | str) -> MeshBuild:
    """Read a MeSH source (a spec, a location, or records already read) and build the tables."""
    if isinstance(source, str):
        source = resolve_mesh_source(source)
    if isinstance(source, MeshSourceSpec):
        description = source.describe()
        records = load_mesh_records(source)
    else:
        description = "MeSH records given in memory"
        records = source
    frames, stats = build_mesh_frames(records)
    tables = {
        name: frames[name].to_arrow(compat_level=pl.CompatLevel.oldest())
        for name in MESH_TABLE_NAMES
    }
    return MeshBuild(
        tables=tables,
        stats=stats,
        n_supplementary=records.n_supplementary,
        source_description=description,
    )


def build_mesh_tables(source: MeshSourceSpec | MeshRecords | str) -> dict[str, pa.Table]:
    """The seven MeSH tables, keyed by table name (see `build_mesh` for the rule counts)."""
    return build_mesh(source).tables


def build_mesh_frames(records: MeshRecords) -> tuple[dict[str, pl.DataFrame], LoaderRuleStats]:
    descriptors = records.descriptors.with_columns(pl.col("name").str.strip_chars())
    known = descriptors.select("ui")
    tree = records.tree.unique(maintain_order=True).sort("tree_number")

    descriptors_out = descriptor_table(descriptors, tree)
    broader = _broader(tree)

    allowable_all = records.allowable.unique()
    allowable = allowable_all.join(known, left_on="descriptor_ui", right_on="ui", how="semi").sort(
        "descriptor_ui", "qualifier_ui"
    )
    qualifiers = records.qualifiers.unique(subset="ui", keep="first").sort("ui")

    descriptor_terms, deinversion_candidates, deinversion_added, empty_terms = _descriptor_terms(
        descriptors, records.entries
    )

    # supplementary aliases: one row per (scr, surface, mapped heading)
    headings = records.scr_headings.unique()
    known_headings = headings.join(known, left_on="heading_ui", right_on="ui", how="semi")
    dangling = headings.height - known_headings.height
    candidates = records.scr_surfaces.join(known_headings, on="scr_ui", how="inner")
    long_enough = candidates.filter(pl.col("surface").str.len_chars() >= MIN_SCR_ALIAS_CHARS)
    with_norm = _with_normalised(long_enough, "surface")
    non_empty = with_norm.filter(pl.col("normalised") != "")
    claimed = descriptor_terms.select("normalised").unique()
    unclaimed = non_empty.join(claimed, on="normalised", how="anti")
    scr_aliases = (
        unclaimed.select("scr_ui", "surface", "heading_ui")
        .unique()
        .sort("scr_ui", "heading_ui", "surface")
    )
    alias_terms = (
        unclaimed.sort("heading_ui", "scr_ui", "surface")
        .unique(subset=["heading_ui", "normalised"], keep="first", maintain_order=True)
        .select(
            pl.col("heading_ui").alias("ui"),
            pl.col("surface").alias("term"),
            "normalised",
            pl.lit("scr_alias").alias("kind"),
        )
    )
    terms = (
        pl.concat([descriptor_terms, alias_terms], how="diagonal")
        .sort("ui", maintain_order=True)
        .select(TERM_TABLE_COLUMNS)
    )

    stats = LoaderRuleStats(
        deinversion_candidates=deinversion_candidates,
        deinversion_added=deinversion_added,
        empty_terms_removed=empty_terms,
        scr_alias_candidates=candidates.height,
        scr_short_removed=candidates.height - long_enough.height,
        scr_claimed_removed=non_empty.height - unclaimed.height,
        scr_empty_removed=with_norm.height - non_empty.height,
        scr_dangling_mappings=dangling,
        scr_aliases_kept=scr_aliases.height,
        scr_alias_terms_added=alias_terms.height,
        allowable_unknown_descriptor_removed=allowable_all.height - allowable.height,
    )
    frames = {
        "descriptors": descriptors_out,
        "tree": tree,
        "broader": broader,
        "allowable": allowable,
        "terms": terms,
        "qualifiers": qualifiers,
        "scr_aliases": scr_aliases,
    }
    return frames, stats


def descriptor_table(descriptors: pl.DataFrame, tree: pl.DataFrame) -> pl.DataFrame:
    """mesh/descriptors from (ui, name) and the tree: tree categories, shallowest depth and
    number of tree numbers per descriptor (none for a descriptor without tree numbers)."""
    per_ui = tree.group_by("ui").agg(
        pl.col("tree_number").str.slice(0, 1).unique().sort().alias("categories"),
        (pl.col("tree_number").str.count_matches(".", literal=True) + 1)
        .min()
        .cast(pl.Int32)
        .alias("min_depth"),
        pl.len().cast(pl.Int32).alias("n_trees"),
    )
    return (
        descriptors.join(per_ui, on="ui", how="left")
        .with_columns(
            pl.col("categories").fill_null(pl.lit([], dtype=pl.List(pl.Utf8))),
            pl.col("n_trees").fill_null(0),
        )
        .select("ui", "name", "categories", "min_depth", "n_trees")
        .sort("ui")
    )


def parent_tree_number(tree_number: pl.Expr) -> pl.Expr:
    """`C14.280.647` -> `C14.280`; null for a category root such as `C14`."""
    return (
        pl.when(tree_number.str.contains(".", literal=True))
        .then(tree_number.str.replace(r"\.[^.]*$", ""))
        .otherwise(None)
    )


def _broader(tree: pl.DataFrame) -> pl.DataFrame:
    with_parent = tree.with_columns(parent_tree_number(pl.col("tree_number")).alias("parent_tree"))
    return (
        with_parent.join(
            tree.rename({"ui": "parent_ui", "tree_number": "parent_tree"}),
            on="parent_tree",
            how="inner",
        )
        .select(pl.col("ui").alias("child_ui"), "parent_ui")
        .unique()
        .sort("child_ui", "parent_ui")
    )


def normalised_column(texts: pl.Expr) -> pl.Expr:
    """`normalise` as a Polars expression, for ASCII text only (where `normalise` is lower
    case, every run of characters other than [0-9a-z] one space, then stripped); null for
    text with any other character, which `normalise` itself takes (NFKD first)."""
    return (
        pl.when(texts.str.contains(r"^[\x00-\x7f]*$"))
        .then(texts.str.to_lowercase().str.replace_all(r"[^0-9a-z]+", " ").str.strip_chars(" "))
        .otherwise(None)
    )


def _with_normalised(frame: pl.DataFrame, column: str) -> pl.DataFrame:
    """Add `normalised`: the shared `normalise` of each distinct string, vectorised for ASCII
    strings (all but ~1 in 100), called per string for the rest."""
    distinct = frame.select(pl.col(column).unique())
    lookup = distinct.with_columns(normalised_column(pl.col(column)).alias("normalised"))
    rest = lookup.filter(pl.col("normalised").is_null() & pl.col(column).is_not_null())
    if rest.height:
        texts = rest.get_column(column).to_list()
        done = pl.DataFrame(
            {column: texts, "normalised": [normalise(text) for text in texts]},
            schema={column: pl.Utf8, "normalised": pl.Utf8},
        )
        lookup = pl.concat([lookup.filter(pl.col("normalised").is_not_null()), done])
    return frame.join(lookup, on=column, how="left")


def deinvert(term: pl.Expr) -> pl.Expr:
    """ "Circumcision, Male" -> "Male Circumcision"; null when the term is not inverted."""
    parts = term.str.split_exact(", ", 1)
    return (
        pl.when(term.str.contains(_DEINVERTIBLE) & ~term.str.contains(_NOT_A_MODIFIER))
        .then(parts.struct.field("field_1") + pl.lit(" ") + parts.struct.field("field_0"))
        .otherwise(None)
    )


def _descriptor_terms(
    descriptors: pl.DataFrame, entries: pl.DataFrame
) -> tuple[pl.DataFrame, int, int, int]:
    details = list(TERM_DETAIL_COLUMNS)
    # the name row takes the record-preferred term's concept, term UI and flags
    preferred = entries.filter(pl.col("record_preferred")).unique(
        "ui", keep="first", maintain_order=True
    )
    names = descriptors.join(preferred.select("ui", *details), on="ui", how="left").select(
        "ui", pl.col("name").alias("term"), pl.lit("name").alias("kind"), *details
    )
    # a term source naming a descriptor the descriptor file lacks keeps that name row, so
    # the checks see it (and block the write) rather than it vanishing here
    orphan_names = preferred.join(descriptors.select("ui"), on="ui", how="anti").select(
        "ui", "term", pl.lit("name").alias("kind"), *details
    )
    given = pl.concat(
        [
            names,
            orphan_names,
            entries.filter(~pl.col("record_preferred")).select(
                "ui", pl.col("term").str.strip_chars(), pl.lit("entry").alias("kind"), *details
            ),
        ]
    ).filter(pl.col("term") != "")
    # a de-inverted form is the loader's, not NLM's: it keeps its term's concept, term UI
    # and lexical tag, and leaves the preferred and permuted flags unset
    inverted = (
        given.select(
            "ui",
            deinvert(pl.col("term")).alias("term"),
            "concept_ui",
            "term_ui",
            pl.lit(None, dtype=pl.Boolean).alias("concept_preferred"),
            pl.lit(None, dtype=pl.Boolean).alias("permuted"),
            "lexical_tag",
        )
        .drop_nulls("term")
        .unique(["ui", "term"], keep="first", maintain_order=True)
    )
    all_terms = _with_normalised(
        pl.concat(
            [given, inverted.with_columns(pl.lit("deinverted").alias("kind"))],
            how="diagonal",
        ),
        "term",
    )
    empty_terms = all_terms.filter(pl.col("normalised") == "").height
    all_terms = all_terms.filter(pl.col("normalised") != "")
    existing = all_terms.filter(pl.col("kind") != "deinverted")
    added = (
        all_terms.filter(pl.col("kind") == "deinverted")
        .join(existing.select("ui", "normalised"), on=["ui", "normalised"], how="anti")
        .unique(subset=["ui", "normalised"], keep="first", maintain_order=True)
    )
    terms = pl.concat([existing, added]).select(TERM_TABLE_COLUMNS)
    return terms, inverted.height, added.height, empty_terms


def write_mesh_tables(lake: Lake, build: MeshBuild) -> dict[str, int]:
    """Write `mesh/<table>.parquet` for the seven tables, each atomically (temporary name,
    then rename or a single put), then `mesh/manifest.json` naming the set; bytes per table."""
    sizes = {
        name: lake.write_parquet(mesh_key(name), build.tables[name]) for name in MESH_TABLE_NAMES
    }
    manifest = {
        "tables": {name: mesh_key(name) for name in MESH_TABLE_NAMES},
        "rows": build.row_counts(),
        "loader_rules": build.stats.as_dict(),
        "supplementary_records": build.n_supplementary,
        "source": build.source_description,
    }
    lake.write_bytes(MESH_MANIFEST, json.dumps(manifest, indent=2).encode())
    return sizes
