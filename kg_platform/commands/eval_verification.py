"""`kg eval verification --claims FILE [--test FILE] [--corpus FILE] [--kind probe|minilm]
[--recipe JSON] [--pubmedqa FILE] [--lake DIR] [--release R --mesh-year Y] [--min-paths K]
[--json]`: register
the SciFact claim set, its corpus and a verifier configuration (and, with ``--pubmedqa``, the
question set and a ladder configuration whose gate 7 is that verifier), then materialise
verifier_model, scifact_report and refusal_report through the persistent Dagster instance,
so the runs and their checks show in the UI (as `kg eval pubmedqa` does for the reader).
With ``--test``, that claim set too, and scifact_heldout_report scores it once with every
verifier trained on another claim set (``evaluation/scifact/transfer.py``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kg_platform.commands.partition_args import add_partition_args
from kg_platform.settings import reference_data_dir

KINDS = ("probe", "minilm")


def add_eval_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "verification",
        help="train and report the evidence verifier on SciFact claims, and the refusal report "
        "with it as gate 7, through the Dagster instance",
        description=" ".join(__doc__.split("`: ", 1)[1].split()).replace("``", "`"),
    )
    parser.add_argument("--claims", required=True, help="SciFact claims CSV the verifier trains on")
    parser.add_argument(
        "--test",
        default=None,
        metavar="FILE",
        help="a SciFact claims CSV sharing no claim id with --claims: scored once by the "
        "verifier trained on --claims (scifact_heldout_report)",
    )
    parser.add_argument(
        "--corpus",
        default=None,
        help="SciFact corpus (default: <reference data>/scifact/corpus.csv.gz)",
    )
    parser.add_argument(
        "--kind",
        choices=KINDS,
        default="probe",
        help="probe: the packaged encoder frozen with a logistic regression on [c, t, c*t, "
        "|c-t|]; minilm: the encoder fine-tuned (default: probe)",
    )
    parser.add_argument(
        "--recipe",
        default="{}",
        metavar="JSON",
        help="recipe fields overriding the kind's defaults, e.g. '{\"epochs\": 2}'",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--folds", type=int, default=5, help="folds of the out-of-fold scores")
    parser.add_argument(
        "--pubmedqa",
        default=None,
        help="PubMedQA JSON: also the refusal report on the lake's graph with gate 7 on",
    )
    parser.add_argument("--lake", default=None, help="lake to register and write into")
    add_partition_args(parser)
    parser.add_argument("--min-paths", type=int, default=1, help="k of the refusal headline")
    parser.add_argument(
        "--per-class",
        type=int,
        default=50,
        help="built questions per gate-class table failure class",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    parser.set_defaults(func=run_eval_verification)
    return parser


def configurations(args: argparse.Namespace, lake) -> dict:
    """Check every option, then register the files and configurations; the partition keys.
    A ValueError (or OSError) names a bad option before anything is registered."""
    from kg_platform.answer.readers.base import load_pubmedqa
    from kg_platform.evaluation.common.question_sets import question_set_key, register_question_set
    from kg_platform.evaluation.refusal.report import LadderEvalConfig, register_ladder_config
    from kg_platform.evaluation.scifact.verifier_training import (
        VerifierConfig,
        register_verifier_config,
    )

    try:
        recipe = json.loads(args.recipe)
    except json.JSONDecodeError as error:
        raise ValueError(f"--recipe {args.recipe}: not JSON ({error})") from None
    if not isinstance(recipe, dict):
        raise ValueError(f"--recipe {args.recipe}: not a JSON object")
    corpus = args.corpus or reference_data_dir() / "scifact" / "corpus.csv.gz"
    files = {"claims": args.claims, "corpus": corpus}
    if args.pubmedqa is not None:
        files["pubmedqa"] = args.pubmedqa
    if args.test is not None:
        files["test"] = args.test
    for option, path in files.items():
        if not Path(path).is_file():
            raise ValueError(f"--{option} {path}: no such file")
    if args.pubmedqa is not None:
        load_pubmedqa(args.pubmedqa)  # a file that is no PubMedQA set is named here
    if args.test is not None:
        from kg_platform.evaluation.scifact.transfer import check_disjoint
        from kg_platform.evaluation.scifact.verifier_training import claim_set_from_files

        check_disjoint(
            claim_set_from_files(args.claims, corpus), claim_set_from_files(args.test, corpus)
        )
    config = VerifierConfig(
        args.kind,
        question_set_key(args.claims),
        question_set_key(corpus),
        recipe=recipe,
        seed=args.seed,
        folds=args.folds,
    )
    ladder = LadderEvalConfig(
        min_paths=args.min_paths,
        seed=args.seed,
        per_class=args.per_class,
        release=args.release,
        mesh_year=args.mesh_year,
        verifier_config=config.key,
    )
    keys = {
        "claim_set": register_question_set(lake, "scifact", args.claims),
        "corpus": register_question_set(lake, "scifact_corpus", corpus),
        "verifier_config": register_verifier_config(lake, config),
    }
    if args.test is not None:
        keys["heldout_set"] = register_question_set(lake, "scifact", args.test)
    if args.pubmedqa is not None:
        keys["question_set"] = register_question_set(lake, "pubmedqa", args.pubmedqa)
        keys["ladder_config"] = register_ladder_config(lake, ladder)
    return keys


def run_eval_verification(args: argparse.Namespace) -> int:
    from kg_platform.settings import Settings
    from kg_platform.storage.lake import Lake

    settings = Settings.load()
    lake = Lake(args.lake or settings.lake)
    try:
        keys = configurations(args, lake)
    except (OSError, ValueError) as error:
        print(f"kg eval verification: {error}", file=sys.stderr)
        return 2
    failure = materialise(settings, lake, keys)
    if failure:
        print(f"kg eval verification: {failure}", file=sys.stderr)
        return 1
    print_report(read_reports(lake, keys), args.json)
    return 0


def materialise(settings, lake, keys: dict) -> str:
    """verifier_model, scifact_report and (with a question set) refusal_report on the
    persistent instance, in that order; the first failure, or ""."""
    import dagster as dg

    from kg_platform.assets import answering, verification
    from kg_platform.assets.partitions import (
        ladder_configs,
        pubmedqa_sets,
        scifact_claim_sets,
        scifact_heldout_sets,
        verifier_configs,
    )
    from kg_platform.orchestration.instance import prepare_instance
    from kg_platform.orchestration.runs import materialise_in_order
    from kg_platform.resources.lake import LakeResource

    instance = prepare_instance(settings)
    instance.add_dynamic_partitions(verifier_configs.name, [keys["verifier_config"]])
    instance.add_dynamic_partitions(scifact_claim_sets.name, [keys["claim_set"]])
    steps: list[tuple[str, object]] = [
        ("verifier_model", keys["verifier_config"]),
        ("scifact_report", keys["claim_set"]),
    ]
    if "heldout_set" in keys:
        instance.add_dynamic_partitions(scifact_heldout_sets.name, [keys["heldout_set"]])
        steps.append(("scifact_heldout_report", keys["heldout_set"]))
    if "ladder_config" in keys:
        instance.add_dynamic_partitions(pubmedqa_sets.name, [keys["question_set"]])
        instance.add_dynamic_partitions(ladder_configs.name, [keys["ladder_config"]])
        pair = {"question_set": keys["question_set"], "ladder_config": keys["ladder_config"]}
        steps.append(("refusal_report", dg.MultiPartitionKey(pair)))
    assets = [*answering.defs.assets, *verification.defs.assets]
    return materialise_in_order(
        assets, steps, instance, LakeResource(root=lake.root), "eval verification"
    )


def read_reports(lake, keys: dict) -> dict:
    """The trained verifier's record, its row of the SciFact report and the refusal report's
    figures, as the assets published them."""
    from kg_platform.evaluation.common.trained import read_trained_verifier
    from kg_platform.evaluation.refusal.report import published_figures
    from kg_platform.evaluation.scifact.report import verifier_row
    from kg_platform.evaluation.scifact.transfer import heldout_row

    config = keys["verifier_config"]
    record = read_trained_verifier(lake, config)
    return {
        "verifier_model": {
            "model": record["model"],
            "path": lake.path(record["model_prefix"]),
            "verifier": record["verifier"],
            "tau": record["tau"],
            "pairs": record["pairs"],
        },
        "scifact": verifier_row(lake, keys["claim_set"], config),
        "refusal": published_figures(lake, keys["question_set"], keys["ladder_config"])
        if "ladder_config" in keys
        else None,
        "heldout": heldout_row(lake, keys["heldout_set"], config)
        if "heldout_set" in keys
        else None,
        "partition": dict(keys),
    }


def print_report(report: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report))
        return
    model, row = report["verifier_model"], report["scifact"]
    base, control = row["baseline"], row["controls"]["baseline_shuffled_labels"]
    print(f"verifier_model: {model['verifier']} at {model['path']} (tau {model['tau']})")
    print(
        f"scifact_report: {row['n_claims']} claims, {row['n_pairs']} pairs, "
        f"{row['folds']}-fold out of fold: NOINFO AUROC {row['noinfo_auroc']}, macro-F1 "
        f"{row['macro_f1']}; untrained-encoder baseline {base['noinfo_auroc']} / "
        f"{base['macro_f1']}; the baseline on shuffled labels {control['noinfo_auroc']} / "
        f"{control['macro_f1']}"
    )
    held = report.get("heldout")
    if held is not None:
        print(
            f"scifact_heldout_report: {held['test']['n_claims']} held-out claims, scored once: "
            f"NOINFO AUROC {held['test']['noinfo_auroc']}, macro-F1 {held['test']['macro_f1']}, "
            f"balanced accuracy at tau {held['test_at_tau']['balanced_accuracy']}"
        )
    refusal = report["refusal"]
    if refusal is not None:
        print(
            f"refusal_report: {refusal['n']} questions at min_paths {refusal['min_paths']}: "
            f"real answered {refusal['real_answered']}, controls {refusal['control_answered']}"
        )
        print(f"  gate-class sets {refusal['ablation_sets']}")
        for tier in refusal["ablation_tiers"]:
            print(f"  {tier['tier']} refused {tier['refusal_rate']}, per class {tier['per_class']}")
        deletion = refusal.get("evidence_deletion")
        if deletion and deletion["tiers"]:
            rates = [t["refusal_rate"] for t in deletion["tiers"]]
            print(f"  evidence deletion T0-T3 refused {rates} over {deletion['n']} questions")
