"""`kg eval grounding --pubmedqa PATH [--json] [--lake DIR | --mesh-source PATH]`."""

from __future__ import annotations

import argparse
import json
import sys

import polars as pl

from kg_platform.commands.partition_args import add_partition_args, may_hold_graph, scoped_lake
from kg_platform.evaluation.grounding.evaluation import (
    evaluate_with_mesh,
    graph_linkable,
    load_pubmedqa,
    render_report,
)
from kg_platform.graph.store import KGStore
from kg_platform.storage.lake import Lake


def add_eval_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "grounding",
        help="precision, recall and coverage of BRIDGE groundings against PubMedQA headings",
    )
    parser.add_argument("--pubmedqa", required=True, help="PubMedQA JSON (pqal_*.json)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--lake", default=None, help="lake holding mesh/ (and graph/)")
    source.add_argument("--mesh-source", help="MeSH folder/URL to build the tables from")
    add_partition_args(parser)
    parser.set_defaults(func=run_eval_grounding)


def mesh_frames(
    args: argparse.Namespace,
) -> tuple[dict[str, pl.DataFrame], Lake | None, dict[str, str | None]]:
    """The MeSH frames to evaluate with, the lake they came from (None: a MeSH source) and
    the graph build / MeSH year used."""
    if args.mesh_source:
        from kg_platform.mesh.source import mesh_year, resolve_mesh_source
        from kg_platform.mesh.tables import build_mesh_tables

        year = mesh_year(resolve_mesh_source(args.mesh_source))
        tables = build_mesh_tables(args.mesh_source)
        frames = {t: pl.from_arrow(tables[t]) for t in ("descriptors", "tree", "terms")}
        return frames, None, {"release": None, "mesh_year": year}
    lake, build = scoped_lake(args, quiet=args.json, need_graph=False)
    frames = {}
    for table in ("descriptors", "tree", "terms"):
        key = f"mesh/{table}.parquet"
        if not lake.exists(key):
            raise FileNotFoundError(
                f"{lake.path(key)}: no MeSH tables in lake {args.lake}; materialise "
                "`mesh_tables` or pass --mesh-source"
            )
        frames[table] = pl.from_arrow(lake.read_parquet(key))
    return frames, lake, build


def run_eval_grounding(args: argparse.Namespace) -> int:
    try:
        questions = load_pubmedqa(args.pubmedqa)
        frames, lake, build = mesh_frames(args)
    except (OSError, ValueError) as error:
        print(f"kg eval grounding: {error}", file=sys.stderr)
        return 2
    counts, n_articles, linkable = None, None, None
    if lake is not None and may_hold_graph(lake):
        try:
            from kg_platform.answer.api import graph_article_counts

            store = KGStore.open(lake)
            counts, n_articles = graph_article_counts(store), store.n_articles
            linkable = graph_linkable(store)
        except FileNotFoundError:
            pass  # no graph built yet: roles come from MeSH structure alone
    result = evaluate_with_mesh(
        questions,
        frames["descriptors"],
        frames["tree"],
        frames["terms"],
        article_counts=counts,
        n_articles=n_articles,
        linkable=linkable,
    )
    if args.json:
        print(json.dumps({**result.to_json(), "partition": build}))
    else:
        print(render_report(result, args.pubmedqa), end="")
    return 0
