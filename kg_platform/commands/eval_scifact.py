"""`kg eval scifact`: replaced by `kg eval verification`, the one path of the SciFact study
(verifier_model, scifact_report and, with ``--test``, scifact_heldout_report through the
Dagster instance). This alias takes any options and only says which command to use."""

from __future__ import annotations

import argparse
import sys

REPLACED = (
    "kg eval scifact: replaced by kg eval verification --claims FILE [--test FILE] "
    "[--kind probe|minilm] [--recipe JSON] [--folds K] [--json] (docs/OPERATING.md); the "
    "trained verifier's folder, for kg ask --verifier, is its JSON's verifier_model.path"
)


def add_eval_parser(subparsers: argparse._SubParsersAction) -> None:
    # "+" as the option prefix: every --option given is taken as a plain word, not refused
    parser = subparsers.add_parser(
        "scifact", help="replaced by kg eval verification", prefix_chars="+"
    )
    parser.add_argument("given", nargs="*")
    parser.set_defaults(func=lambda args: print(REPLACED, file=sys.stderr) or 2)
