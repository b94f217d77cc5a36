"""`--release` and `--mesh-year` for every reading command: which graph build to read."""

from __future__ import annotations

import argparse
import sys

from kg_platform.graph.layout import CURRENT_POINTER, choose_pair, published_pairs
from kg_platform.storage.lake import Lake


def add_partition_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--release", help="PubMed release, e.g. pubmed26 (default: newest built)")
    parser.add_argument("--mesh-year", help="MeSH year, e.g. 2024 (default: newest built)")


def scoped_lake(
    args: argparse.Namespace, quiet: bool = False, need_graph: bool = True
) -> tuple[Lake, dict[str, str | None]]:
    """The lake seen from the chosen (release, MeSH year), and that pair; says which pair
    was used on stderr unless ``quiet``. Without ``need_graph``, a lake holding MeSH tables
    but no graph yet gives its newest MeSH year and no release."""
    root = Lake(args.lake)
    unpartitioned = not args.release and not args.mesh_year and root.exists(CURRENT_POINTER)
    if unpartitioned and not published_pairs(root):
        # a lake written by the domain functions directly (a notebook, a test): one graph
        return root, {"release": None, "mesh_year": None}
    try:
        release, year = choose_pair(root, args.release, args.mesh_year)
    except FileNotFoundError:
        years = [
            k.rsplit("/", 1)[1] for k in root.list("mesh") if root.exists(f"{k}/manifest.json")
        ]
        if not need_graph and not years and root.exists("mesh/descriptors.parquet"):
            return root, {"release": None, "mesh_year": None}  # unpartitioned MeSH tables
        if need_graph or args.release or not years:
            raise
        year = args.mesh_year or max(years)
        if not quiet:
            print(f"MeSH {year} (no graph built)", file=sys.stderr)
        return root.scoped(mesh_year=year), {"release": None, "mesh_year": year}
    if not quiet:
        print(f"graph build: release {release}, MeSH {year}", file=sys.stderr)
    return root.scoped(release=release, mesh_year=year), {"release": release, "mesh_year": year}


def may_hold_graph(lake: Lake) -> bool:
    """Whether a graph build can be read through this view: an unpartitioned lake, or one
    scoped to a release (a MeSH-only scope has no graph)."""
    return lake.scope.empty or lake.scope.release is not None
