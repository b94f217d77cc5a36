"""Readers on PubMedQA DEV, oracle setting: out-of-fold accuracy of the MiniLM cross-encoder
and the cue reader, with the controls that say what they add.

Each question is read against its own abstract (the oracle context) and scored by the
model of the one fold that did not train on it (K-fold cross-fitting). Controls:
majority (training-fold prior), blind (the same fold models given the question only) and
shuffled-label (the same recipe trained on permuted labels, N seeds, scored against the
true labels; it must sit at chance, i.e. no better than majority). The last line printed
is one JSON object; progress goes to stderr.

    python benchmarks/readers.py                                  # the full recipe
    python benchmarks/readers.py --max-length 128 --epochs 2      # a CPU-sized run
    python benchmarks/readers.py --skip-classifier --probe        # the probe's variants
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kg_platform.answer.readers import (  # noqa: E402
    LABELS,
    accuracy,
    cross_fit_posteriors,
    load_pubmedqa,
    macro_f1,
)
from kg_platform.answer.readers.classifier import ClassifierRecipe  # noqa: E402
from kg_platform.answer.readers.controls import MajorityRecipe  # noqa: E402
from kg_platform.answer.readers.crossfit import shuffled_label_cross_fit  # noqa: E402
from kg_platform.answer.readers.cues import CueRecipe  # noqa: E402
from kg_platform.answer.readers.probe import ProbeRecipe, frozen_encoder  # noqa: E402
from kg_platform.settings import reference_data_dir  # noqa: E402


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def scores(posteriors: np.ndarray, examples) -> dict:
    predicted = np.bincount(posteriors.argmax(axis=1), minlength=3)
    return {
        "accuracy": round(accuracy(posteriors, examples), 4),
        "macro_f1": round(macro_f1(posteriors, examples), 4),
        "predicted": dict(zip(LABELS, predicted.tolist(), strict=True)),
    }


def shuffled(examples, k, seeds, recipe, candidates_fn) -> dict:
    runs = shuffled_label_cross_fit(examples, k, seeds, recipe, candidates_fn)
    per_seed = [scores(run.cross_fit.first(), examples) for run in runs]
    return {
        "n": len(runs),
        "seeds": list(seeds),
        "accuracy": [s["accuracy"] for s in per_seed],
        "best_accuracy": max(s["accuracy"] for s in per_seed) if per_seed else None,
        "macro_f1": [s["macro_f1"] for s in per_seed],
    }


def probe_sweep(examples, k: int, seed: int, shuffled_seeds: list[int], args) -> dict:
    """Out-of-fold DEV accuracy of every probe variant (pooling x features x C x class
    weight); the best by DEV accuracy (then macro-F1) gets its blind and shuffled-label
    controls. The encoder's vectors are cached once per process, so only the first variant
    of each pooling embeds."""
    variants = []
    encoder = frozen_encoder("")
    for pooling in args.probe_pooling:
        start, embedded = time.perf_counter(), encoder.embedded
        for features in args.probe_features:
            for c in args.probe_c:
                for class_weight in args.probe_class_weight:
                    recipe = ProbeRecipe(
                        pooling=pooling,
                        features=tuple(features.split(",")),
                        C=c,
                        class_weight=class_weight,
                        truncation_chars=args.truncation,
                    )
                    fits = cross_fit_posteriors(examples, k, seed, recipe, lambda ex: [ex.context])
                    variants.append({"recipe": recipe.to_dict(), **scores(fits.first(), examples)})
                    log(f"probe {pooling} {features} C={c} {class_weight or '-'}: {variants[-1]}")
        log(
            f"probe {pooling}: {encoder.embedded - embedded} windows embedded, "
            f"{time.perf_counter() - start:.0f}s"
        )
    best = max(variants, key=lambda v: (v["accuracy"], v["macro_f1"]))
    recipe = ProbeRecipe(**best["recipe"])
    blind = cross_fit_posteriors(examples, k, seed, recipe, lambda ex: [""])
    return {
        "variants": variants,
        "best": best,
        "blind": scores(blind.first(), examples),
        "shuffled_label": shuffled(examples, k, shuffled_seeds, recipe, lambda ex: [ex.context]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None, help="PubMedQA DEV json")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=0, help="first N questions only (0: all)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--truncation", type=int, default=3000, help="characters")
    parser.add_argument("--shuffled-seeds", type=int, default=3, help="cue reader controls")
    parser.add_argument(
        "--classifier-shuffled-seeds", type=int, default=3, help="classifier controls"
    )
    parser.add_argument("--cue-c", type=float, default=1.0, help="inverse L2 strength")
    parser.add_argument("--skip-classifier", action="store_true")
    parser.add_argument(
        "--probe", action="store_true", help="sweep the probe reader's variants (frozen MiniLM)"
    )
    parser.add_argument("--probe-pooling", nargs="+", default=["first", "windows", "sentences"])
    parser.add_argument(
        "--probe-features",
        nargs="+",
        default=["q,t,prod,diff", "t,prod,diff", "prod,diff"],
        help="comma-separated parts of q, t, prod, diff, cos",
    )
    parser.add_argument(
        "--probe-c", type=float, nargs="+", default=[0.003, 0.01, 0.03, 0.1, 0.3, 1.0]
    )
    parser.add_argument("--probe-class-weight", nargs="+", default=["", "balanced"])
    args = parser.parse_args()

    path = args.data or reference_data_dir() / "pubmedqa" / "pqal_dev400.json"
    examples = load_pubmedqa(path)
    if args.limit:
        examples = examples[: args.limit]
    gold = {label: sum(ex.label == label for ex in examples) for label in LABELS}
    k, seed = args.folds, args.seed
    shuffled_seeds = [1000 + s for s in range(args.shuffled_seeds)]
    result: dict = {
        "benchmark": "readers",
        "data": path.name,
        "setting": "oracle",
        "n": len(examples),
        "gold": gold,
        "folds": k,
        "seed": seed,
    }

    majority = cross_fit_posteriors(examples, k, seed, MajorityRecipe(), lambda ex: [""])
    result["majority"] = scores(majority.first(), examples)
    log(f"majority {result['majority']}")

    cue_recipe = CueRecipe(truncation_chars=args.truncation, C=args.cue_c)
    start = time.perf_counter()
    cues = cross_fit_posteriors(
        examples, k, seed, cue_recipe, lambda ex: [ex.text(cue_recipe.text_field), ""]
    )
    cue_seconds = time.perf_counter() - start
    result["cues"] = {
        "recipe": cue_recipe.to_dict(),
        **scores(np.stack([p[0] for p in cues.posteriors]), examples),
        "blind": scores(np.stack([p[1] for p in cues.posteriors]), examples),
        "cross_fit_seconds": round(cue_seconds, 2),
        "shuffled_label": shuffled(
            examples, k, shuffled_seeds, cue_recipe, lambda ex: [ex.text(cue_recipe.text_field)]
        ),
    }
    log(f"cues {result['cues']}")

    if args.probe:
        result["probe"] = probe_sweep(examples, k, seed, shuffled_seeds, args)

    if not args.skip_classifier:
        recipe = ClassifierRecipe(
            epochs=args.epochs,
            learning_rate=args.lr,
            batch_size=args.batch_size,
            max_length=args.max_length,
            truncation_chars=args.truncation,
        )
        timings: dict[str, float] = {}
        last = {"time": time.perf_counter(), "reader": None}

        def on_fold(fold, reader) -> None:
            now = time.perf_counter()
            timings[f"fold{fold}"] = now - last["time"]
            last.update(time=now, reader=reader)
            log(f"classifier fold {fold}: trained and scored in {timings[f'fold{fold}']:.0f}s")

        start = time.perf_counter()
        fits = cross_fit_posteriors(
            examples, k, seed, recipe, lambda ex: [ex.context, ""], on_fold=on_fold
        )
        total = time.perf_counter() - start
        # throughput: the last fold's model reads up to 64 (question, own abstract) pairs
        probe = examples[: min(64, len(examples))]
        start = time.perf_counter()
        last["reader"].score_pairs([ex.question for ex in probe], [ex.context for ex in probe])
        per_second = len(probe) / (time.perf_counter() - start)
        result["classifier"] = {
            "recipe": recipe.to_dict(),
            **scores(np.stack([p[0] for p in fits.posteriors]), examples),
            "blind": scores(np.stack([p[1] for p in fits.posteriors]), examples),
            "cross_fit_seconds": round(total, 1),
            "fold_seconds": {key: round(v, 1) for key, v in timings.items()},
            "posteriors_per_second": round(per_second, 2),
        }
        log(f"classifier {result['classifier']}")
        classifier_seeds = [1000 + s for s in range(args.classifier_shuffled_seeds)]
        if classifier_seeds:
            start = time.perf_counter()
            result["classifier"]["shuffled_label"] = shuffled(
                examples, k, classifier_seeds, recipe, lambda ex: [ex.context]
            )
            result["classifier"]["shuffled_label"]["seconds"] = round(
                time.perf_counter() - start, 1
            )
            log(f"classifier shuffled {result['classifier']['shuffled_label']}")

    import torch

    result["torch_threads"] = torch.get_num_threads()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
