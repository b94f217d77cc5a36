"""`--release` and `--mesh-year` for every reading command: which graph build to read; and
`--path-budget-ms`, as `kg ask` and `kg serve` take it."""

from __future__ import annotations

import argparse
import sys

from kg_platform.graph.layout import CURRENT_POINTER, choose_pair, published_pairs
from kg_platform.storage.lake import Lake
from kg_platform.storage.mesh import mesh_key


def add_partition_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--release", help="PubMed release, e.g. pubmed26 (default: newest built)")
    parser.add_argument("--mesh-year", help="MeSH year, e.g. 2024 (default: newest built)")


def add_path_budget_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--path-budget-ms",
        type=float,
        default=None,
        metavar="MS",
        help="stop a question's path search after MS milliseconds (structural ranker): the "
        "answer then says the search was cut (JSON `path_search`), and a refusal that only "
        "the cut caused is `path_search_cut` (default: no budget, every path read)",
    )


def check_path_budget(ms: float | None) -> float | None:
    """``--path-budget-ms`` refused by name unless a positive, finite number."""
    if ms is not None and not 0.0 < ms < float("inf"):
        raise ValueError(f"--path-budget-ms {ms:g}: must be a positive number of milliseconds")
    return ms


def scoped_lake(
    args: argparse.Namespace, quiet: bool = False, need_graph: bool = True
) -> tuple[Lake, dict[str, str | None]]:
    """The lake seen from the chosen (release, MeSH year), and that pair; says which pair
    was used on stderr unless ``quiet``. Without ``need_graph``, a lake holding MeSH tables
    but no graph yet gives its newest MeSH year and no release."""
    root = Lake(args.lake)
    asked = args.release or args.mesh_year
    if not asked and not published_pairs(root) and _unpartitioned(root, need_graph):
        # a lake written by the domain functions directly (a notebook, a test)
        return root, {"release": None, "mesh_year": None}
    try:
        release, year = choose_pair(root, args.release, args.mesh_year)
    except FileNotFoundError:
        years = [
            k.rsplit("/", 1)[1] for k in root.list("mesh") if root.exists(f"{k}/manifest.json")
        ]
        if need_graph or args.release or not years:
            raise
        release, year = None, args.mesh_year or years[-1]
    if not quiet:
        used = f"graph build: release {release}, MeSH {year}" if release else f"MeSH {year}"
        print(used if release else f"{used} (no graph built)", file=sys.stderr)
    return root.scoped(release=release, mesh_year=year), {"release": release, "mesh_year": year}


def _unpartitioned(root: Lake, need_graph: bool) -> bool:
    if root.exists(CURRENT_POINTER):
        return True
    return not need_graph and root.exists(mesh_key("descriptors"))


def may_hold_graph(lake: Lake) -> bool:
    """Whether a graph build can be read through this view: an unpartitioned lake, or one
    scoped to a release (a MeSH-only scope has no graph)."""
    return lake.scope.empty or lake.scope.release is not None
