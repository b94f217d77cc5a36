"""`kg eval allocation --hotpotqa PATH [--json] [--budgets K ...] [--out DIR]`: flat vs
relational allocation at matched object and token ceilings, with paired statistics."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kg_platform.evaluation.allocation.evaluation import (
    AllocationEvalConfig,
    render_markdown,
    run_allocation_eval,
    summary,
    write_report,
)
from kg_platform.storage.lake import Lake


def add_eval_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "allocation",
        help="dual-bounded relational recall on a HotpotQA distractor file",
        description=(
            "Rank every paragraph with BM25, allocate flat / relational / random-neighbour / "
            "shuffled-graph under an object ceiling K and a token ceiling T = K x median "
            "paragraph tokens, and compare complete supporting-evidence recovery."
        ),
    )
    parser.add_argument("--hotpotqa", required=True, help="HotpotQA distractor-format JSON file")
    parser.add_argument(
        "--json", action="store_true", help="print the per-budget summary as one JSON object"
    )
    parser.add_argument(
        "--budgets",
        type=int,
        nargs="+",
        default=list(AllocationEvalConfig().budgets),
        metavar="K",
        help="object ceilings to evaluate (default: 2 4)",
    )
    parser.add_argument(
        "--out", help="folder (or lake URL) to write report.md, recovery.png and the JSON files"
    )
    # accepted like every kg eval; the study builds its own graph from HotpotQA paragraphs
    parser.add_argument("--release", help="ignored: the allocation study reads no PubMed graph")
    parser.add_argument("--mesh-year", help="ignored: the allocation study reads no MeSH")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        config = AllocationEvalConfig(budgets=tuple(args.budgets))
        result = run_allocation_eval(Path(args.hotpotqa), config)
        if args.out:
            lake = Lake(args.out)
            write_report(result, lake.write_bytes)
    except ValueError as exc:
        print(f"kg eval allocation: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**summary(result), "partition": None}))
    else:
        print(render_markdown(result))
    return 0
