"""Roles of grounded descriptors: IGNORE, BRIDGE or FILTER.

- IGNORE: check tags (Humans, Male, Female, Animals, ...), age groups, and descriptors too
  broad to carry evidence (a top-level tree node, the subtrees that describe a disease's
  course or a study's timing rather than a topic, or, where the graph is representative,
  annotating too large a share of the corpus).
- BRIDGE: specific descriptors in the categories that name what a question is about
  (diseases, chemicals and drugs, ...), deep enough in the tree. The graph links these.
- FILTER: everything else; it narrows evidence but never picks the concept pair
  (anatomy, places, people, health care, ...).

Thresholds live in ``RoleConfig``; the defaults were chosen on the PubMedQA development
questions (see docs and ``kg eval grounding``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where the tables are used: `kg ask` reads roles from the index
    import polars as pl


class Role(StrEnum):
    IGNORE = "IGNORE"
    BRIDGE = "BRIDGE"
    FILTER = "FILTER"


# MeSH check tags and the organisms that are tagged like them on most articles.
CHECK_TAG_UIS: frozenset[str] = frozenset(
    {
        "D006801",  # Humans
        "D000818",  # Animals
        "D008297",  # Male
        "D005260",  # Female
        "D011247",  # Pregnancy
        "D051379",  # Mice
        "D051381",  # Rats
    }
)


@dataclass(frozen=True)
class RoleConfig:
    """Thresholds for role assignment."""

    check_tag_uis: frozenset[str] = CHECK_TAG_UIS
    # Age Groups (M01.060) are check tags in all but name.
    ignore_tree_prefixes: tuple[str, ...] = ("M01.060",)
    # Subtrees too broad to carry evidence: they say how or when, never what. A descriptor
    # is IGNOREd only when all its tree numbers lie in them.
    # - C23.550.291 Disease Attributes (Acute Disease, Chronic Disease, Disease
    #   Progression, Recurrence, Rare Diseases, ...): read like qualifiers; on the 400
    #   development questions 29 gold headings, 2 BRIDGE groundings of which 1 correct;
    # - G01.910 Time (Time Factors, ...): the single most frequent gold heading there
    #   (24 articles) and never named by a question (0 groundings).
    broad_tree_prefixes: tuple[str, ...] = ("C23.550.291", "G01.910")
    # A descriptor whose shallowest tree number has at most this many levels is too broad.
    ignore_max_depth: int = 1
    # Tree categories whose descriptors may bridge: C diseases, D chemicals and drugs,
    # E techniques, F psychiatry and psychology, G phenomena and processes. Z (places) only
    # narrows: a country is the setting of a question, not a concept to link. On the
    # development questions places are 121 gold headings (indexers take them from the
    # abstract's setting) and 9 groundings, 7 correct: as BRIDGE they would give recall
    # 0.199 instead of 0.207 and coverage 43.2% instead of 42.5%.
    bridge_categories: str = "CDEFG"
    # Categories that veto bridging even when a bridge category is also present.
    veto_categories: str = "HKLMNV"
    bridge_min_depth: int = 2
    # With a graph: a descriptor on more than this share of articles is IGNOREd ...
    max_article_share: float = 0.02
    # ... but only when the corpus is large enough for shares to mean anything.
    min_articles_for_share: int = 200_000


def assign_roles(
    descriptors: pl.DataFrame,
    tree: pl.DataFrame,
    config: RoleConfig = RoleConfig(),
    article_counts: pl.DataFrame | None = None,
    n_articles: int | None = None,
) -> pl.DataFrame:
    """One row per descriptor: ui, role, reason.

    ``descriptors`` has ui, categories, min_depth; ``tree`` has ui, tree_number;
    ``article_counts`` (optional, from the graph) has ui, n_articles."""
    import polars as pl

    for frame, cols, what in (
        (descriptors, ("ui", "categories", "min_depth"), "MeSH descriptors"),
        (tree, ("ui", "tree_number"), "MeSH tree"),
    ):
        missing = [c for c in cols if c not in frame.columns]
        if missing:
            raise ValueError(f"{what} table: missing columns {missing}")
    in_ignored_tree = _under(tree, config.ignore_tree_prefixes, include_root=False)
    in_broad_tree = _under(tree, config.broad_tree_prefixes, include_root=True, only=True)
    categories = pl.col("categories")
    if isinstance(descriptors.schema["categories"], pl.List):
        # mesh/descriptors holds the tree letters as a list; compare them as one string
        categories = categories.list.join("")
    frame = descriptors.select("ui", categories.alias("categories"), "min_depth")
    use_share = (
        article_counts is not None
        and n_articles is not None
        and n_articles >= config.min_articles_for_share
    )
    if use_share:
        frame = frame.join(article_counts.select("ui", "n_articles"), on="ui", how="left")
        share = pl.col("n_articles").fill_null(0) / n_articles
    else:
        share = pl.lit(0.0)
    cats = pl.col("categories").fill_null("")
    bridge_cat = (
        cats.str.contains(f"[{config.bridge_categories}]")
        if config.bridge_categories
        else pl.lit(False)
    )
    veto_cat = (
        cats.str.contains(f"[{config.veto_categories}]")
        if config.veto_categories
        else pl.lit(False)
    )
    return frame.select(
        "ui",
        pl.when(pl.col("ui").is_in(list(config.check_tag_uis)))
        .then(pl.lit("IGNORE:check_tag"))
        .when(pl.col("ui").is_in(in_ignored_tree.to_list()))
        .then(pl.lit("IGNORE:age_group"))
        .when(pl.col("ui").is_in(in_broad_tree.to_list()))
        .then(pl.lit("IGNORE:broad_subtree"))
        .when(pl.col("min_depth") <= config.ignore_max_depth)
        .then(pl.lit("IGNORE:top_of_tree"))
        .when(share > config.max_article_share)
        .then(pl.lit("IGNORE:too_common"))
        .when(bridge_cat & ~veto_cat & (pl.col("min_depth") >= config.bridge_min_depth))
        .then(pl.lit("BRIDGE:specific"))
        .when(veto_cat)
        .then(pl.lit("FILTER:non_topical_category"))
        .when(~bridge_cat)
        .then(pl.lit("FILTER:category"))
        .otherwise(pl.lit("FILTER:shallow"))
        .alias("_r"),
    ).select(
        "ui",
        pl.col("_r").str.split(":").list.get(0).alias("role"),
        pl.col("_r").str.split(":").list.get(1).alias("reason"),
    )


def _under(
    tree: pl.DataFrame, prefixes: tuple[str, ...], include_root: bool, only: bool = False
) -> pl.Series:
    """UIs with a tree number below one of ``prefixes``, and at it when ``include_root``
    (Age Groups itself keeps its role; Time itself is as broad as what lies below it).
    With ``only``, every tree number of the descriptor must be there: Hepatitis, Chronic
    sits under Chronic Disease but is a liver disease too, and keeps that role."""
    import polars as pl

    hit = pl.lit(False)
    for prefix in prefixes:
        hit = hit | pl.col("tree_number").str.starts_with(prefix + ".")
        if include_root:
            hit = hit | (pl.col("tree_number") == prefix)
    if not only:
        return tree.filter(hit)["ui"].unique()
    placed = tree.group_by("ui").agg(hit.all().alias("all_under"))
    return placed.filter(pl.col("all_under"))["ui"]
