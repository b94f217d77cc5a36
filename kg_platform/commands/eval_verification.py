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

from kg_platform.commands.partition_args import add_partition_args

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


def run_eval_verification(args: argparse.Namespace) -> int:
    from kg_platform.evaluation.verification import configurations, read_reports
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
    from kg_platform.assets import answering, verification
    from kg_platform.assets import partitions as p
    from kg_platform.orchestration.materialise import materialise as run
    from kg_platform.resources.lake import LakeResource

    config, claims = keys["verifier_config"], keys["claim_set"]
    partitions = {p.verifier_configs: [config], p.scifact_claim_sets: [claims]}
    steps: list = [("verifier_model", config), ("scifact_report", claims)]
    if "heldout_set" in keys:
        partitions[p.scifact_heldout_sets] = [keys["heldout_set"]]
        steps.append(("scifact_heldout_report", keys["heldout_set"]))
    if "ladder_config" in keys:
        partitions |= {p.pubmedqa_sets: [keys["question_set"]]}
        partitions |= {p.ladder_configs: [keys["ladder_config"]]}
        pair = {"question_set": keys["question_set"], "ladder_config": keys["ladder_config"]}
        steps.append(("refusal_report", pair))
    assets = [*answering.defs.assets, *verification.defs.assets]
    lake_resource = LakeResource(root=lake.root)
    return run(settings, assets, partitions, steps, "eval verification", lake=lake_resource)


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
