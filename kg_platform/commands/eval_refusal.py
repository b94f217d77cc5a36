"""`kg eval refusal --pubmedqa FILE [--json] [--lake DIR] [--release R --mesh-year Y]
[--min-paths K] [--seed S] [--per-class N] [--verifier DIR [--verifier-tau T]]
[--agent [--hops N]]`: register the question set and a ladder configuration holding these
options, then materialise refusal_report through the persistent Dagster instance (as
`kg eval verification` does), so the run and its checks show in the UI."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kg_platform.answer.agent import DEFAULT_HOPS
from kg_platform.commands.partition_args import add_partition_args


def add_eval_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "refusal",
        help="control-question leak, the min_paths sweep, refusal under evidence deletion "
        "(T0-T3) and the gate-class tables",
    )
    parser.add_argument("--pubmedqa", required=True, help="PubMedQA JSON (pqal_*.json)")
    parser.add_argument("--json", action="store_true", help="the figures as one JSON line")
    parser.add_argument("--lake", default=None)
    add_partition_args(parser)
    parser.add_argument("--min-paths", type=int, default=1, help="k for the headline figures")
    parser.add_argument("--seed", type=int, default=0, help="control swaps, sets, bootstrap")
    parser.add_argument(
        "--per-class",
        type=int,
        default=50,
        help="built questions per gate-class table failure class",
    )
    parser.add_argument(
        "--verifier",
        default=None,
        metavar="DIR",
        help="a local verifier folder (a verifier_model, an NLI model): gate 7 on, so the "
        "ablation's verifier-NOINFO class is built and measured",
    )
    parser.add_argument(
        "--verifier-tau",
        type=float,
        default=None,
        metavar="T",
        help="gate 7's tau (default: the one saved with the verifier, as kg ask)",
    )
    parser.add_argument(
        "--agent",
        action="store_true",
        help="also measure the agent loop (answer/agent.py) beside the one-pass pipeline on the "
        "same real and control questions, with the top-1 similarity veto",
    )
    parser.add_argument(
        "--hops", type=int, default=DEFAULT_HOPS, help="the agent's hop budget (with --agent)"
    )
    parser.set_defaults(func=run_eval_refusal)


def ladder_config(args: argparse.Namespace):
    """The ladder configuration of the options; a ValueError (or OSError) names a bad one
    before anything is registered."""
    from kg_platform.answer.ladder import LadderConfig, gate_tau, open_verifier
    from kg_platform.answer.readers.base import content_hash, load_pubmedqa
    from kg_platform.commands.partition_args import scoped_lake
    from kg_platform.evaluation.refusal.report import LadderEvalConfig

    load_pubmedqa(args.pubmedqa)  # a file that is no PubMedQA set is named here
    for option, value, least in (("per-class", args.per_class, 1), ("hops", args.hops, 0)):
        if value < least:
            raise ValueError(f"--{option} {value}: must be at least {least}")
    if args.verifier_tau is not None and args.verifier is None:
        raise ValueError(f"--verifier-tau {args.verifier_tau}: needs --verifier")
    LadderConfig(verifier_tau=gate_tau(args.verifier_tau, open_verifier(args.verifier)))
    scoped_lake(args, quiet=args.json)  # says which graph build is read; none is an error
    folder = str(Path(args.verifier).resolve()) if args.verifier else ""
    return LadderEvalConfig(
        min_paths=args.min_paths,
        seed=args.seed,
        per_class=args.per_class,
        release=args.release,
        mesh_year=args.mesh_year,
        verifier_folder=folder,
        verifier_model=content_hash(folder) if folder else "",
        verifier_tau=args.verifier_tau,
        agent=args.agent,
        hops=args.hops,
    )


def run_eval_refusal(args: argparse.Namespace) -> int:
    from kg_platform.evaluation.common.question_sets import register_question_set
    from kg_platform.evaluation.refusal import report as refusal
    from kg_platform.evaluation.refusal.agent import render_agent
    from kg_platform.evaluation.refusal.evaluation import render_report
    from kg_platform.settings import Settings
    from kg_platform.storage.lake import Lake

    settings = Settings.load()
    lake = Lake(args.lake or settings.lake)
    try:
        config = ladder_config(args)
        keys = {
            "question_set": register_question_set(lake, "pubmedqa", args.pubmedqa),
            "ladder_config": refusal.register_ladder_config(lake, config),
        }
    except (OSError, ValueError) as error:
        print(f"kg eval refusal: {error}", file=sys.stderr)
        return 2
    failure = materialise(settings, lake, keys)
    if failure:
        print(f"kg eval refusal: {failure}", file=sys.stderr)
        return 1
    folder = f"{refusal.REPORT_PREFIX}/{keys['question_set']}/{keys['ladder_config']}"
    doc = json.loads(lake.read_bytes(f"{folder}/report.json"))
    if args.json:
        print(json.dumps({**doc, "partition": doc["graph_build"]}))
        return 0
    print(render_report(doc, args.pubmedqa), end="")
    if doc["agent"] is not None:
        print("\n".join(render_agent(doc["agent"])))
    gate = doc["verifier"]
    if gate is not None:
        print(f"  gate 7: {gate['verifier']} from {gate['folder']}, tau {gate['tau']}")
    return 0


def materialise(settings, lake, keys: dict[str, str]) -> str:
    """refusal_report of (question set, ladder configuration) on the persistent instance;
    its failure in one line, or ""."""
    from kg_platform.assets import verification
    from kg_platform.assets.partitions import ladder_configs, pubmedqa_sets
    from kg_platform.orchestration.materialise import materialise as run
    from kg_platform.resources.lake import LakeResource

    partitions = {pubmedqa_sets: [keys["question_set"]], ladder_configs: [keys["ladder_config"]]}
    steps = [("refusal_report", keys)]
    lake_resource = LakeResource(root=lake.root)
    return run(
        settings, verification.defs.assets, partitions, steps, "eval refusal", lake=lake_resource
    )
