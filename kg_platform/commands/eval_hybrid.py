"""`kg eval hybrid --pubmedqa PATH [--thresholds T ...] [--json] [--lake DIR | --mesh-source PATH]
[--cache DIR] [--report-dir DIR] [--model PATH] [--device D]`."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from kg_platform.commands.eval_grounding import mesh_frames
from kg_platform.commands.partition_args import add_partition_args, may_hold_graph
from kg_platform.evaluation.grounding.evaluation import heading_index, load_pubmedqa
from kg_platform.evaluation.grounding.hybrid import (
    DEFAULT_THRESHOLDS,
    evaluate_hybrid,
    provide_concept_index,
    render_report,
)
from kg_platform.graph.store import KGStore
from kg_platform.grounding.grounder import Grounder
from kg_platform.grounding.hybrid import HybridGrounder
from kg_platform.grounding.roles import RoleConfig, assign_roles


def add_eval_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "hybrid",
        help="lexical vs hybrid (dense span links) grounding against PubMedQA headings",
    )
    parser.add_argument("--pubmedqa", required=True, help="PubMedQA JSON (pqal_*.json)")
    parser.add_argument(
        "--thresholds",
        type=float,
        nargs="+",
        default=list(DEFAULT_THRESHOLDS),
        help="dense-link cosine thresholds to compare with lexical grounding",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--lake", default=None, help="lake holding mesh/ (and graph/)")
    source.add_argument("--mesh-source", help="MeSH folder/URL to build the tables from")
    parser.add_argument(
        "--cache",
        default=None,
        help="where a concept index embedded here is kept for the next run "
        "(used when the lake has no concept_index of the same model; "
        "default $KG_HOME/cache/concept_index)",
    )
    parser.add_argument(
        "--report-dir", help="also write report.md and report.json here (a folder or lake URL)"
    )
    parser.add_argument("--model", default="", help="local model folder (default: packaged)")
    parser.add_argument("--device", default="auto")
    add_partition_args(parser)
    parser.set_defaults(func=run_eval_hybrid)


def run_eval_hybrid(args: argparse.Namespace) -> int:
    try:
        bad = [t for t in args.thresholds if not 0.0 < t <= 1.0]
        if bad:
            raise ValueError(f"--thresholds {bad}: each must be in (0, 1]")
        questions = load_pubmedqa(args.pubmedqa)
        frames, lake, build = mesh_frames(args)
    except (OSError, ValueError) as error:
        print(f"kg eval hybrid: {error}", file=sys.stderr)
        return 2
    store, counts, n_articles = None, None, None
    if lake is not None and may_hold_graph(lake):
        try:
            from kg_platform.answer.api import graph_article_counts

            store = KGStore.open(lake)
            counts, n_articles = graph_article_counts(store), store.n_articles
        except FileNotFoundError:
            pass  # no graph: roles from MeSH structure alone, pair selection not measured
    from kg_platform.embeddings.encoder import Encoder
    from kg_platform.settings import kg_home

    encoder = Encoder(args.model, device=args.device)
    cache = args.cache or str(kg_home() / "cache" / "concept_index")
    concepts, info = provide_concept_index(frames["terms"], encoder, lake, cache)
    descriptors, tree, terms = frames["descriptors"], frames["tree"], frames["terms"]
    roles = assign_roles(descriptors, tree, RoleConfig(), counts, n_articles)
    role_of = dict(zip(roles["ui"].to_list(), roles["role"].to_list(), strict=True))
    hybrid = HybridGrounder(Grounder.from_terms(terms, descriptors), encoder, concepts)
    result = evaluate_hybrid(
        questions, hybrid, role_of, heading_index(terms), args.thresholds, store
    )
    result = replace(result, concept_index=info)
    report = render_report(result, args.pubmedqa)
    if args.report_dir:
        from kg_platform.storage.lake import Lake

        # through the lake: a folder or s3://bucket/prefix, each file written atomically
        folder = Lake(args.report_dir)
        folder.write_bytes("report.md", report.encode())
        folder.write_bytes("report.json", json.dumps(result.to_json(), indent=1).encode())
    payload = {**result.to_json(), "partition": build}
    print(json.dumps(payload) if args.json else report, end="\n" if args.json else "")
    return 0
