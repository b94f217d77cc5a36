"""`kg eval scifact --claims FILE [--corpus FILE] [--json] [--kind minilm|probe] [--save DIR]
[--folds 5] [--seed 0] [--epochs 3] [--max-length L] [--max-claims N] [--baseline-only]
[--device auto]`, or `--train FILE --test FILE` instead of `--claims`: train on one claim set
(tau on its out-of-fold scores) and score the other once (``evaluation/scifact/transfer.py``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from kg_platform.settings import reference_data_dir

KINDS = ("minilm", "probe")


def add_eval_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "scifact",
        help="the evidence verifier by K-fold CV on SciFact claims: NOINFO AUROC, macro-F1, "
        "and the untrained-encoder baseline",
    )
    parser.add_argument("--claims", default=None, help="SciFact claims CSV (claims_train.csv)")
    parser.add_argument(
        "--train",
        default=None,
        metavar="FILE",
        help="train on this claims CSV (verifier, tau and baseline) and score --test once",
    )
    parser.add_argument(
        "--test", default=None, metavar="FILE", help="the claims CSV scored (no shared claim id)"
    )
    parser.add_argument(
        "--corpus",
        default=None,
        help="SciFact corpus (default: <reference data>/scifact/corpus.csv.gz)",
    )
    parser.add_argument("--json", action="store_true", help="the figures as one JSON line")
    parser.add_argument(
        "--kind",
        choices=KINDS,
        default="minilm",
        help="minilm: the encoder fine-tuned as a 3-way classifier; probe: the encoder frozen, "
        "a logistic regression on [c, t, c*t, |c-t|] (default: minilm)",
    )
    parser.add_argument(
        "--save",
        default=None,
        metavar="DIR",
        help="also train the verifier on every claim and save it in DIR (new or empty) with "
        "tau, fitted on the out-of-fold scores, in DIR/verifier.json: kg ask --verifier DIR",
    )
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="tokens per pair (minilm, default 256) or per text (probe, default: the encoder's)",
    )
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument(
        "--max-claims", type=int, default=None, help="only the first N claims by id (a short run)"
    )
    parser.add_argument("--baseline-only", action="store_true", help="skip the fine-tuning")
    parser.add_argument("--base-model", default="", help="encoder folder (default: packaged)")
    parser.add_argument("--device", default="auto")
    parser.set_defaults(func=run_eval_scifact)


def verifier_recipe(args: argparse.Namespace) -> dict:
    """The ``VerifierConfig.recipe`` of ``--kind``: the options that differ from the kind's
    recipe defaults, so the same model has the same configuration key here as registered
    with `kg eval verification --recipe` (and the same saved bytes)."""
    from kg_platform.answer.readers.classifier import ClassifierRecipe
    from kg_platform.answer.verifier import VerifierProbeRecipe

    given = {"base_model": args.base_model, "max_length": args.max_length}
    if args.kind == "minilm":
        given |= {"epochs": args.epochs, "batch_size": args.batch_size}
    kind = VerifierProbeRecipe if args.kind == "probe" else ClassifierRecipe
    defaults = {f.name: f.default for f in dataclasses.fields(kind)}
    return {k: v for k, v in given.items() if v is not None and v != defaults[k]}


def run_eval_scifact(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kg_platform.embeddings.encoder import Encoder
    from kg_platform.evaluation.scifact.evaluation import evaluate_scifact
    from kg_platform.evaluation.scifact.verifier_training import (
        VerifierConfig,
        claim_set_from_files,
        train_config_verifier,
        write_verifier_folder,
    )

    started = time.perf_counter()
    saved = None
    try:
        if (args.train is None) != (args.test is None):
            raise ValueError("--train and --test: give both, or neither")
        if (args.claims is None) == (args.train is None):
            raise ValueError("give --claims FILE, or --train FILE --test FILE")
        if args.train is not None:
            return run_transfer(args, started)
        if args.save and (args.baseline_only or args.max_claims is not None):
            raise ValueError(
                f"--save {args.save}: trains on every claim of --claims; not with "
                "--baseline-only or --max-claims"
            )
        if args.save and Path(args.save).exists() and any(Path(args.save).iterdir()):
            raise ValueError(f"--save {args.save}: not empty; give a new or empty folder")
        corpus_path = args.corpus or reference_data_dir() / "scifact" / "corpus.csv.gz"
        claim_set = claim_set_from_files(args.claims, corpus_path)
        if args.max_claims is not None:
            claim_set = dataclasses.replace(claim_set, claims=claim_set.claims[: args.max_claims])
        config = VerifierConfig(
            args.kind,
            claim_set.key,
            claim_set.corpus_key,
            recipe=verifier_recipe(args),
            seed=args.seed,
            folds=args.folds,
        )
        pairs = claim_set.pairs(args.seed)
        recipe = None if args.baseline_only else config.recipe_object()
        progress = lambda f: print(f"fold {f} done", file=sys.stderr)  # noqa: E731
        scores = features = None
        if recipe is not None and (args.save or args.kind == "probe"):
            trained = train_config_verifier(config, claim_set, progress, args.device)
            scores, features = trained.oof, trained.features
            if args.save:
                digest, _ = write_verifier_folder(Path(args.save), config, claim_set, trained)
                saved = {
                    "folder": str(args.save),
                    "model": digest,
                    "verifier": trained.verifier.name,
                    "tau": trained.tau,
                    "verifier_config": config.key,
                }
        # a probe's own features are the baseline's: the baseline is the probe on the folds
        embed = None if features is not None else Encoder(args.base_model, args.device).encode
        report = evaluate_scifact(
            pairs, args.folds, args.seed, recipe, embed, progress, scores, features
        )
    except (OSError, ValueError) as error:
        print(f"kg eval scifact: {error}", file=sys.stderr)
        return 2
    doc = {
        **report.to_json(),
        "kind": None if recipe is None else args.kind,
        "saved": saved,
        "seconds": round(time.perf_counter() - started, 1),
    }
    if args.json:
        print(json.dumps(doc))
    else:
        b = doc["baseline"]
        c = doc["controls"]["baseline_shuffled_labels"]
        print(
            f"scifact: {doc['n_claims']} claims, {doc['n_pairs']} pairs {doc['pair_sources']}, "
            f"{doc['folds']}-fold CV by claim\n"
            f"  verifier ({doc['kind']}): NOINFO AUROC {doc['noinfo_auroc']}, macro-F1 "
            f"{doc['macro_f1']}, tau {doc['tau']}\n  confusion {doc['confusion']}\n"
            f"  untrained-encoder baseline: NOINFO AUROC {b['noinfo_auroc']}, "
            f"macro-F1 {b['macro_f1']}\n"
            f"  control, the baseline fitted on shuffled labels: NOINFO AUROC "
            f"{c['noinfo_auroc']}, macro-F1 {c['macro_f1']}"
        )
        if saved:
            print(f"  saved: {saved['folder']} (model {saved['model'][:16]}, tau {saved['tau']})")
    return 0


def run_transfer(args: argparse.Namespace, started: float) -> int:
    """``--train FILE --test FILE``: the verifier and its tau from the one, scored on the
    other (errors are raised to ``run_eval_scifact``'s handler)."""
    from pathlib import Path

    from kg_platform.evaluation.scifact.transfer import check_disjoint, evaluate_transfer
    from kg_platform.evaluation.scifact.verifier_training import (
        VerifierConfig,
        claim_set_from_files,
        train_config_verifier,
        write_verifier_folder,
    )

    if args.baseline_only or args.max_claims is not None:
        raise ValueError("--train/--test: not with --baseline-only or --max-claims")
    if args.save and Path(args.save).exists() and any(Path(args.save).iterdir()):
        raise ValueError(f"--save {args.save}: not empty; give a new or empty folder")
    corpus_path = args.corpus or reference_data_dir() / "scifact" / "corpus.csv.gz"
    train = claim_set_from_files(args.train, corpus_path)
    test = claim_set_from_files(args.test, corpus_path)
    check_disjoint(train, test)
    config = VerifierConfig(
        args.kind,
        train.key,
        train.corpus_key,
        recipe=verifier_recipe(args),
        seed=args.seed,
        folds=args.folds,
    )
    trained = train_config_verifier(config, train, None, args.device)
    report = evaluate_transfer(config, train, test, args.device, trained)
    saved = None
    if args.save:
        digest, _ = write_verifier_folder(Path(args.save), config, train, trained)
        saved = {"folder": str(args.save), "model": digest, "tau": trained.tau}
    doc = {
        **report.to_json(),
        "verifier_config": config.key,
        "saved": saved,
        "seconds": round(time.perf_counter() - started, 1),
    }
    if args.json:
        print(json.dumps(doc))
        return 0
    t, b = doc["test"], doc["baseline"]
    c = doc["controls"]["baseline_shuffled_labels"]
    print(
        f"scifact: trained on {doc['train']['key']} ({doc['train']['n_claims']} claims), "
        f"scored on {t['key']} ({t['n_claims']} claims, {t['n_pairs']} pairs)\n"
        f"  tau {doc['tau']} (train, out of fold); train OOF NOINFO AUROC "
        f"{doc['train_out_of_fold']['noinfo_auroc']}\n"
        f"  test ({doc['kind']}): NOINFO AUROC {t['noinfo_auroc']}, macro-F1 {t['macro_f1']}, "
        f"balanced accuracy at tau {doc['test_at_tau']['balanced_accuracy']}\n"
        f"  untrained-encoder baseline: NOINFO AUROC {b['noinfo_auroc']}, "
        f"macro-F1 {b['macro_f1']}\n"
        f"  control, the baseline fitted on shuffled labels: NOINFO AUROC "
        f"{c['noinfo_auroc']}, macro-F1 {c['macro_f1']}"
    )
    return 0
