"""`kg eval pubmedqa [--dev FILE] [--test FILE] [--reader NAME] [--json]`: train a reader on
DEV, cache its posteriors on DEV (cross-fitted) and TEST, select on DEV and score TEST once,
materialising reader_model, posterior_cache and pubmedqa_report through the persistent
Dagster instance, so the runs and their checks show in the UI. Without --test, a stratified,
reproducible part of DEV (--held-out questions, --seed) is held out as TEST and the reader
trains and selects on the rest; the reader's saved folder is printed, for `kg ask --reader`.
DEV defaults to the reference data's <KG_REFERENCE_DATA>/pubmedqa/pqal_dev400.json."""

from __future__ import annotations

import argparse
import json
import sys

from kg_platform.evaluation.pubmedqa.candidates import MAX_CANDIDATES, TRUNCATIONS
from kg_platform.evaluation.pubmedqa.reader_configs import ReaderConfig

HELD_OUT = 100


def add_eval_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "pubmedqa",
        help="train a reader on DEV, select on DEV, score TEST (or a held-out part of DEV) once",
        description=" ".join(__doc__.split("`: ", 1)[1].split()).replace("``", "`"),
    )
    parser.add_argument(
        "--dev",
        default=None,
        help="PubMedQA JSON the reader trains on (default: the reference data's "
        "pubmedqa/pqal_dev400.json, under KG_REFERENCE_DATA)",
    )
    parser.add_argument(
        "--test",
        default=None,
        help="PubMedQA JSON scored once (default: --held-out questions of DEV, kept out of "
        "training and selection)",
    )
    parser.add_argument(
        "--held-out",
        type=int,
        default=HELD_OUT,
        metavar="N",
        help=f"without --test: DEV questions held out, stratified by label (default {HELD_OUT})",
    )
    parser.add_argument(
        "--reader",
        default="cues",
        help="cues (n-gram cue model, fast), minilm (cross-encoder on the packaged MiniLM), "
        "probe (logistic regression on the frozen MiniLM's vectors) "
        "or a folder holding a saved reader (default: cues)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    parser.add_argument("--lake", default=None, help="lake to register and write into")
    parser.add_argument(
        "--recipe",
        default="{}",
        metavar="JSON",
        help="recipe fields overriding the reader's defaults, e.g. '{\"epochs\": 2}'",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--folds", type=int, default=5, help="cross-fitting folds on DEV")
    parser.add_argument(
        "--shuffled-seeds", type=int, default=3, help="shuffled-label control seeds (default 3)"
    )
    parser.add_argument(
        "--candidates", type=int, default=MAX_CANDIDATES, help="candidates per question"
    )
    parser.add_argument(
        "--truncations",
        type=int,
        nargs="+",
        default=list(TRUNCATIONS),
        metavar="CHARS",
        help="candidate truncations swept (default: 1100 2000 3000 4000)",
    )
    parser.set_defaults(func=run_eval_pubmedqa)
    return parser


def run_eval_pubmedqa(args: argparse.Namespace) -> int:
    from kg_platform.assets.build_keys import PUBMEDQA_DEV
    from kg_platform.evaluation.pubmedqa.split import configuration
    from kg_platform.settings import Settings, reference_data_dir
    from kg_platform.storage.lake import Lake

    settings = Settings.load()
    if args.dev is None:
        args.dev = str(reference_data_dir() / PUBMEDQA_DEV)
    say = None if args.json else lambda line: print(line, flush=True)
    try:
        dev, test, config = configuration(args, settings.home / "questions", say)
    except (OSError, ValueError) as error:
        print(f"kg eval pubmedqa: {error}", file=sys.stderr)
        return 2
    lake = Lake(args.lake or settings.lake)
    failure, report = materialise(settings, lake, config, str(dev), str(test))
    if failure:
        print(f"kg eval pubmedqa: {failure}", file=sys.stderr)
        return 1
    print_report(report, args.json, held_out=args.test is None)
    return 0


def materialise(settings, lake, config: ReaderConfig, dev: str, test: str) -> tuple[str, dict]:
    """Register the sets and configuration, then run reader_model, the DEV and TEST caches
    and the report on the persistent instance; (first failure or "", the report)."""
    from kg_platform.assets import answering
    from kg_platform.assets.partitions import pubmedqa_sets, reader_configs
    from kg_platform.evaluation.common.question_sets import register_question_set
    from kg_platform.evaluation.pubmedqa.answering import published_report
    from kg_platform.evaluation.pubmedqa.reader_configs import register_reader_config
    from kg_platform.orchestration.materialise import materialise as run
    from kg_platform.resources.lake import LakeResource

    dev_key, test_key = (register_question_set(lake, "pubmedqa", f) for f in (dev, test))
    key = register_reader_config(lake, config)
    dev_pair, test_pair = ({"reader_config": key, "question_set": s} for s in (dev_key, test_key))
    steps = [("reader_model", key), *(("posterior_cache", p) for p in (dev_pair, test_pair))]
    partitions = {pubmedqa_sets: [dev_key, test_key], reader_configs: [key]}
    error = run(
        settings,
        answering.defs.assets,
        partitions,
        [*steps, ("pubmedqa_report", test_pair)],
        "eval pubmedqa",
        lake=LakeResource(root=lake.root),
    )
    return (error, {}) if error else ("", published_report(lake, dev_key, test_key, key))


def print_report(report: dict, as_json: bool, held_out: bool = False) -> None:
    from kg_platform.evaluation.pubmedqa.answering import render_summary, report_summary

    summary = report_summary(report) | {k: report[k] for k in ("partition", "reader_folder")}
    print(json.dumps(summary) if as_json else render_summary(summary, held_out))
