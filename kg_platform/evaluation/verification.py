"""The verification study (`kg eval verification`): the SciFact verifier, trained and scored
by evaluation/scifact, as gate 7 of the refusal ladder of evaluation/refusal. It stands on both
studies, so it sits above them: the options checked and registered, and the figures read back."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kg_platform.settings import reference_data_dir


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
