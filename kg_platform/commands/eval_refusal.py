"""`kg eval refusal --pubmedqa FILE [--json] [--lake DIR] [--release R --mesh-year Y]
[--min-paths K] [--seed S] [--per-class N]`."""

from __future__ import annotations

import argparse
import json
import sys

from kg_platform.answer.api import KnowledgeGraph
from kg_platform.answer.readers.base import load_pubmedqa
from kg_platform.commands.partition_args import add_partition_args, scoped_lake
from kg_platform.evaluation.refusal_eval import evaluate_refusal, render_report


def add_eval_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "refusal",
        help="control-question leak, the min_paths sweep and the T0-T3 refusal ablation",
    )
    parser.add_argument("--pubmedqa", required=True, help="PubMedQA JSON (pqal_*.json)")
    parser.add_argument("--json", action="store_true", help="the figures as one JSON line")
    parser.add_argument("--lake", default=None)
    add_partition_args(parser)
    parser.add_argument(
        "--min-paths", type=int, default=None, help="k for the headline figures (default: 1)"
    )
    parser.add_argument("--seed", type=int, default=0, help="control swaps, sets, bootstrap")
    parser.add_argument(
        "--per-class", type=int, default=50, help="built questions per ablation failure class"
    )
    parser.set_defaults(func=run_eval_refusal)


def run_eval_refusal(args: argparse.Namespace) -> int:
    try:
        questions = [(q.qid, q.question) for q in load_pubmedqa(args.pubmedqa)]
        if args.per_class < 1:
            raise ValueError(f"--per-class {args.per_class}: must be at least 1")
        lake, build = scoped_lake(args, quiet=args.json)
        kg = KnowledgeGraph.open(lake)
        report = evaluate_refusal(kg, questions, args.min_paths, args.seed, args.per_class)
    except (OSError, ValueError) as error:
        print(f"kg eval refusal: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**report.to_json(), "partition": build}))
    else:
        print(render_report(report, args.pubmedqa), end="")
    return 0
