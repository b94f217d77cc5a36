"""`kg ask "question" [--as-of YEAR] [--json] [--top-k N] [--lake DIR] [--hybrid THRESHOLD]
[--ranker auto|dense|structural] [--reader DIR] [--verifier DIR [--verifier-tau T]]
[--agent [--hops N]] [--path-budget-ms MS]`."""

from __future__ import annotations

import argparse
import json
import sys
import time

from kg_platform.answer import RANKERS
from kg_platform.answer.ladder import DEFAULT_VERIFIER_TAU
from kg_platform.commands.partition_args import (
    add_partition_args,
    add_path_budget_arg,
    check_path_budget,
)

# `kg <anything>` builds every parser: the question path loads only when a question is asked


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("ask", help="answer a question from the graph, or refuse")
    parser.add_argument("question")
    parser.add_argument("--as-of", type=int, default=None, help="only evidence up to this year")
    parser.add_argument("--json", action="store_true", help="the documented JSON schema")
    parser.add_argument(
        "--top-k", type=int, default=10, help="evidence paths shown (1..100, as the API's top_k)"
    )
    parser.add_argument("--lake", default=None)
    add_partition_args(parser)
    parser.add_argument(
        "--hybrid",
        type=float,
        default=None,
        metavar="THRESHOLD",
        help="also link question spans to MeSH by embedding cosine >= THRESHOLD "
        "(needs concept_index; default off)",
    )
    parser.add_argument(
        "--ranker",
        choices=RANKERS,
        default="auto",
        help="auto: dense when the lake has an embedding index, else structural",
    )
    parser.add_argument(
        "--reader",
        default=None,
        metavar="DIR",
        help="a local reader folder (cue reader, probe, sequence classifier or causal LM) that "
        "answers yes/no/maybe from the top evidence (default: KG_READER; none: evidence only)",
    )
    parser.add_argument(
        "--verifier",
        default=None,
        metavar="DIR",
        help="a local verifier folder (SUPPORT/CONTRADICT/NOINFO classifier or NLI model): "
        "gate 7 refuses when it finds no information in every top evidence article",
    )
    parser.add_argument(
        "--verifier-tau",
        type=float,
        default=None,
        metavar="T",
        help="gate 7 refuses when P(NOINFO) > T on every article read (default: the tau "
        f"fitted on SciFact training folds and saved with the verifier, else {DEFAULT_VERIFIER_TAU})",
    )
    parser.add_argument(
        "--agent",
        action="store_true",
        help="the agent loop (answer/agent.py: refine a refused question by broadening, "
        "dropping a concept, halving min_paths; a measured ablation, not the default); the "
        "JSON gains `agent` with the trace of every step",
    )
    parser.add_argument("--hops", type=int, default=3, help="the agent's hop budget")
    add_path_budget_arg(parser)
    parser.set_defaults(func=run_ask)


def run_ask(args: argparse.Namespace) -> int:
    from kg_platform.answer.api import AskConfig, KnowledgeGraph
    from kg_platform.answer.ladder import LadderConfig, gate_tau, open_verifier
    from kg_platform.answer.question import (
        QuestionError,
        render_text,
        validate_question,
        validate_top_k,
    )
    from kg_platform.answer.readers.loading import open_reader
    from kg_platform.commands.partition_args import scoped_lake
    from kg_platform.settings import reader_folder

    started = time.perf_counter()  # imports end here; opening the build starts

    try:
        # the bounds `kg serve`'s API checks, checked before anything is opened
        validate_question(args.question)
        validate_top_k(args.top_k, "--top-k")
        check_path_budget(args.path_budget_ms)
        if args.agent and args.path_budget_ms is not None:
            raise ValueError("--path-budget-ms: the agent loop (--agent) takes no budget")
        reader = open_reader(args.reader, reader_folder())
        verifier = open_verifier(args.verifier)
        config = AskConfig(
            ranker=args.ranker,
            hybrid_threshold=args.hybrid,
            ladder=LadderConfig(verifier_tau=gate_tau(args.verifier_tau, verifier)),
        )
        # the build line is printed once, with the answer (and in the JSON)
        lake, build = scoped_lake(args, quiet=True)
        kg = KnowledgeGraph.open(lake, config, reader=reader, verifier=verifier)
        opened = time.perf_counter()
        trace = None
        if args.agent:
            from kg_platform.answer.agent import AgentLoop

            result = AgentLoop(kg, args.hops).run(args.question, args.as_of, args.top_k)
            answer, trace = result.answer, result.to_json()["agent"]
        else:
            answer = kg.ask(
                args.question,
                as_of=args.as_of,
                top_k=args.top_k,
                path_budget_ms=args.path_budget_ms,
            )
    except (QuestionError, FileNotFoundError, ValueError) as error:
        from kg_platform.settings import home_hint

        print(f"kg ask: {error}{home_hint(error)}", file=sys.stderr)
        return 2
    answer = answer.with_start_up(
        {
            "imports": round((started - args.process_started) * 1000.0, 3)
            if getattr(args, "process_started", None)
            else None,
            "open": round((opened - started) * 1000.0, 3),
        }
    )
    payload = {**answer.to_json(), "partition": build}
    if trace is not None:
        payload["agent"] = trace
    text = f"Graph build: release {build['release']}, MeSH {build['mesh_year']}\n"
    if trace is not None and not args.json:
        text += "".join(
            f"Agent hop {t['hop']}: {t['step']} ({t['why'] or 'first pass'}) -> "
            f"{'answered' if t.get('answerable') else t.get('reason')} {t['changed'] or ''}\n"
            for t in trace["trace"]
        )
    print(json.dumps(payload, indent=1) if args.json else text + render_text(answer), end="")
    if args.json:
        print()
    return 0
