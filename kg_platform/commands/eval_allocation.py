"""`kg eval allocation --hotpotqa PATH [--json] [--lake DIR] [--out DIR]`: flat vs
relational allocation at matched object and token ceilings, with paired statistics,
materialising allocation_report (the question set x matched_ceilings) through the persistent
Dagster instance, as `kg eval pubmedqa` does, so the run and its checks show in the UI."""

from __future__ import annotations

import argparse
import json
import sys

from kg_platform.evaluation.common.contracts import ALLOCATION_CONFIGURATIONS

# the allocation_report configuration the command runs: the study's object ceilings
CONFIGURATION = ALLOCATION_CONFIGURATIONS[0]


def add_eval_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "allocation",
        help="dual-bounded relational recall on a HotpotQA distractor file",
        description=(
            "Rank every paragraph with BM25, allocate flat / relational / random-neighbour / "
            "shuffled-graph under an object ceiling K (2 and 4) and a token ceiling T = K x "
            "median paragraph tokens, and compare complete supporting-evidence recovery."
        ),
    )
    parser.add_argument("--hotpotqa", required=True, help="HotpotQA distractor-format JSON file")
    parser.add_argument(
        "--json", action="store_true", help="print the per-budget summary as one JSON object"
    )
    parser.add_argument("--lake", default=None, help="lake to register and write into")
    parser.add_argument(
        "--out", help="also copy report.md, recovery.png and the JSON files to this folder or URL"
    )
    # accepted like every kg eval; the study builds its own graph from HotpotQA paragraphs
    parser.add_argument("--release", help="ignored: the allocation study reads no PubMed graph")
    parser.add_argument("--mesh-year", help="ignored: the allocation study reads no MeSH")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from kg_platform.assets.allocation import REPORT_PREFIX
    from kg_platform.evaluation.allocation.hotpotqa import load_hotpotqa
    from kg_platform.evaluation.common.question_sets import register_question_set
    from kg_platform.settings import Settings
    from kg_platform.storage.lake import Lake
    from kg_platform.storage.scope import Scope

    settings = Settings.load()
    lake = Lake(args.lake or settings.lake)
    try:
        load_hotpotqa(args.hotpotqa)  # a file that is no HotpotQA set is named here
        question_set = register_question_set(lake, "hotpotqa", args.hotpotqa)
    except (OSError, ValueError) as exc:
        print(f"kg eval allocation: {exc}", file=sys.stderr)
        return 2
    failure = materialise(settings, lake, question_set)
    if failure:
        print(f"kg eval allocation: {failure}", file=sys.stderr)
        return 1
    report = lake.scoped(Scope(report=f"{question_set}/{CONFIGURATION}"))
    if args.out:
        out = Lake(args.out)
        for key in report.list(REPORT_PREFIX):
            out.write_bytes(key.removeprefix(f"{REPORT_PREFIX}/"), report.read_bytes(key))
    if args.json:
        summary = json.loads(report.read_bytes(f"{REPORT_PREFIX}/summary.json"))
        partition = {"question_set": question_set, "configuration": CONFIGURATION}
        print(json.dumps({**summary, "partition": partition}))
    else:
        print(report.read_bytes(f"{REPORT_PREFIX}/report.md").decode())
    return 0


def materialise(settings, lake, question_set: str) -> str:
    """allocation_report of (question set, matched_ceilings) on the persistent instance; its
    failure in one line, or ""."""
    from kg_platform.assets import allocation
    from kg_platform.assets.partitions import hotpotqa_sets
    from kg_platform.orchestration.materialise import materialise as run
    from kg_platform.resources.lake import LakeResource

    steps = [("allocation_report", {"question_set": question_set, "configuration": CONFIGURATION})]
    partitions, lake_resource = {hotpotqa_sets: [question_set]}, LakeResource(root=lake.root)
    return run(
        settings, allocation.defs.assets, partitions, steps, "eval allocation", lake=lake_resource
    )
