"""`kg eval hybrid --pubmedqa PATH [--thresholds T ...] [--json] [--lake DIR] [--mesh-source PATH]
[--release R --mesh-year Y] [--cache DIR] [--report-dir DIR] [--model PATH] [--device D]`:
lexical vs hybrid grounding is grounding_report with ``hybrid_thresholds`` in its run config,
materialised through the persistent Dagster instance as `kg eval grounding` does; prints
reports/grounding/<question set>/<year>/hybrid/report.{md,json}."""

from __future__ import annotations

import argparse
import sys

from kg_platform.commands.eval_grounding import add_report_args, run_report
from kg_platform.evaluation.grounding.hybrid import DEFAULT_THRESHOLDS


def add_eval_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "hybrid",
        help="lexical vs hybrid (dense span links) grounding against PubMedQA headings",
    )
    add_report_args(parser)
    parser.add_argument(
        "--thresholds",
        type=float,
        nargs="+",
        default=list(DEFAULT_THRESHOLDS),
        help="dense-link cosine thresholds to compare with lexical grounding",
    )
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
    parser.set_defaults(func=run_eval_hybrid)


def run_eval_hybrid(args: argparse.Namespace) -> int:
    from kg_platform.resources.encoder import EncoderResource

    bad = [t for t in args.thresholds if not 0.0 < t <= 1.0]
    if bad:
        print(f"kg eval hybrid: --thresholds {bad}: each must be in (0, 1]", file=sys.stderr)
        return 2
    config = {"hybrid_thresholds": list(args.thresholds), "concept_cache": args.cache or ""}
    encoder = EncoderResource(model_path=args.model, device=args.device)
    return run_report(args, "hybrid", config, {"encoder": encoder})
