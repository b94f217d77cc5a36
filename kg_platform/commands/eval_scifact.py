"""`kg eval scifact --claims FILE [--corpus FILE] [--json] [--folds 5] [--seed 0]
[--epochs 3] [--max-length 256] [--max-claims N] [--baseline-only] [--device auto]`."""

from __future__ import annotations

import argparse
import json
import sys
import time

from kg_platform.settings import reference_data_dir


def add_eval_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "scifact",
        help="the evidence verifier by K-fold CV on SciFact claims: NOINFO AUROC, macro-F1, "
        "and the untrained-encoder baseline",
    )
    parser.add_argument("--claims", required=True, help="SciFact claims CSV (claims_train.csv)")
    parser.add_argument(
        "--corpus",
        default=None,
        help="SciFact corpus (default: <reference data>/scifact/corpus.csv.gz)",
    )
    parser.add_argument("--json", action="store_true", help="the figures as one JSON line")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=256, help="tokens per pair")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument(
        "--max-claims", type=int, default=None, help="only the first N claims by id (a short run)"
    )
    parser.add_argument("--baseline-only", action="store_true", help="skip the fine-tuning")
    parser.add_argument("--base-model", default="", help="encoder folder (default: packaged)")
    parser.add_argument("--device", default="auto")
    parser.set_defaults(func=run_eval_scifact)


def run_eval_scifact(args: argparse.Namespace) -> int:
    from kg_platform.answer.readers.classifier import ClassifierRecipe
    from kg_platform.answer.verifier import read_claims, read_corpus, scifact_pairs
    from kg_platform.embeddings.encoder import Encoder
    from kg_platform.evaluation.scifact_eval import evaluate_scifact

    started = time.perf_counter()
    try:
        corpus_path = args.corpus or reference_data_dir() / "scifact" / "corpus.csv.gz"
        claims = read_claims(args.claims)
        if args.max_claims is not None:
            claims = claims[: args.max_claims]
        pairs = scifact_pairs(claims, read_corpus(corpus_path), seed=args.seed)
        recipe = None
        if not args.baseline_only:
            recipe = ClassifierRecipe(
                base_model=args.base_model,
                epochs=args.epochs,
                max_length=args.max_length,
                batch_size=args.batch_size,
                truncation_side="right",  # the claim is whole; the abstract's end is cut
            )
        encoder = Encoder(args.base_model, device=args.device)
        report = evaluate_scifact(
            pairs,
            args.folds,
            args.seed,
            recipe,
            encoder.encode,
            on_fold=lambda f: print(f"fold {f} done", file=sys.stderr),
        )
    except (OSError, ValueError) as error:
        print(f"kg eval scifact: {error}", file=sys.stderr)
        return 2
    doc = {**report.to_json(), "seconds": round(time.perf_counter() - started, 1)}
    if args.json:
        print(json.dumps(doc))
    else:
        b = doc["baseline"]
        c = doc["controls"]["baseline_shuffled_labels"]
        print(
            f"scifact: {doc['n_claims']} claims, {doc['n_pairs']} pairs {doc['pair_sources']}, "
            f"{doc['folds']}-fold CV by claim\n"
            f"  verifier: NOINFO AUROC {doc['noinfo_auroc']}, macro-F1 {doc['macro_f1']}, "
            f"tau {doc['tau']}\n  confusion {doc['confusion']}\n"
            f"  untrained-encoder baseline: NOINFO AUROC {b['noinfo_auroc']}, "
            f"macro-F1 {b['macro_f1']}\n"
            f"  control, the baseline fitted on shuffled labels: NOINFO AUROC "
            f"{c['noinfo_auroc']}, macro-F1 {c['macro_f1']}"
        )
    return 0
