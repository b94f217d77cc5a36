"""`kg eval refusal --pubmedqa FILE [--json] [--lake DIR] [--release R --mesh-year Y]
[--min-paths K] [--seed S] [--per-class N] [--verifier DIR [--verifier-tau T]]
[--agent [--hops N]]`."""

from __future__ import annotations

import argparse
import json
import sys

from kg_platform.answer.agent import DEFAULT_HOPS
from kg_platform.answer.api import AskConfig, KnowledgeGraph
from kg_platform.answer.ladder import LadderConfig
from kg_platform.answer.readers.base import load_pubmedqa
from kg_platform.commands.ask import gate_tau, open_verifier
from kg_platform.commands.partition_args import add_partition_args, scoped_lake
from kg_platform.evaluation.refusal.agent import evaluate_agent, render_agent
from kg_platform.evaluation.refusal.evaluation import (
    evaluate_refusal,
    render_report,
    with_min_paths,
)


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
    parser.add_argument(
        "--min-paths", type=int, default=None, help="k for the headline figures (default: 1)"
    )
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
        help="a local verifier folder (kg eval scifact --save, a verifier_model, an NLI "
        "model): gate 7 on, so the ablation's verifier-NOINFO class is built and measured",
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


def run_eval_refusal(args: argparse.Namespace) -> int:
    try:
        questions = [(q.qid, q.question) for q in load_pubmedqa(args.pubmedqa)]
        if args.per_class < 1:
            raise ValueError(f"--per-class {args.per_class}: must be at least 1")
        if args.verifier_tau is not None and args.verifier is None:
            raise ValueError(f"--verifier-tau {args.verifier_tau}: needs --verifier")
        verifier = open_verifier(args.verifier)
        tau = gate_tau(args.verifier_tau, verifier)
        config = AskConfig(ladder=LadderConfig(verifier_tau=tau))
        lake, build = scoped_lake(args, quiet=args.json)
        kg = KnowledgeGraph.open(lake, config, verifier=verifier)
        if args.hops < 0:
            raise ValueError(f"--hops {args.hops}: must be at least 0")
        report = evaluate_refusal(kg, questions, args.min_paths, args.seed, args.per_class)
        agent = None
        if args.agent:
            graph = with_min_paths(kg, report.controls.min_paths)
            agent = evaluate_agent(graph, questions, args.hops, args.seed).to_json()
    except (OSError, ValueError) as error:
        print(f"kg eval refusal: {error}", file=sys.stderr)
        return 2
    gate = None
    if verifier is not None:
        gate = {"folder": str(args.verifier), "verifier": verifier.name, "tau": tau}
    if args.json:
        doc = {**report.to_json(), "partition": build, "verifier": gate}
        print(json.dumps(doc if agent is None else {**doc, "agent": agent}))
    else:
        print(render_report(report, args.pubmedqa), end="")
        if agent is not None:
            print("\n".join(render_agent(agent)))
        if gate is not None:
            print(f"  gate 7: {gate['verifier']} from {gate['folder']}, tau {gate['tau']}")
    return 0
