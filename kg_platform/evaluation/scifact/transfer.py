"""Train here, score there: the verifier trained on one SciFact claim set and scored once on
another whose claims it never saw.

Everything that is fitted is fitted on the training set only: the verifier (on every
training pair), gate 7's tau (on the training set's own K-fold out-of-fold scores, as
``verifier_model`` fits it) and the untrained-encoder baseline's head. The test set
is then scored once: NOINFO AUROC, macro-F1, the confusion matrix, and the decision
``P(NOINFO) > tau`` at the training tau (its balanced accuracy, NOINFO recall and the
other verdicts' specificity). Beside it, the control that cannot carry signal: the
baseline's head fitted on the training labels shuffled, scored on the same test pairs.

The two sets must not share a claim id (an error naming the shared ids); the report carries
both sets' keys and content hashes. A function of (files, recipe, seed): rerun, the same
figures bit for bit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from kg_platform.answer.verifier import (
    NOINFO,
    RANDOM,
    VERDICTS,
    VerifierPair,
    VerifierProbeRecipe,
    fit_probe_head,
)
from kg_platform.checks import CheckOutcome
from kg_platform.evaluation.common.report_files import write_report_files
from kg_platform.evaluation.common.trained import (
    load_trained_verifier,
    read_trained_verifier,
    verifier_trained_key,
)
from kg_platform.evaluation.scifact.evaluation import (
    VerdictMetrics,
    baseline_features,
    labels_of,
    verdict_metrics,
)
from kg_platform.evaluation.scifact.verifier_training import (
    ClaimSet,
    TrainedVerifier,
    VerifierConfig,
    file_sha256,
    open_claim_set,
    train_config_verifier,
    verifier_configs,
)
from kg_platform.storage.lake import Lake
from kg_platform.storage.reports import SCIFACT_HELDOUT as HELDOUT_PREFIX

MAX_NAMED_IDS = 10


def check_disjoint(train: ClaimSet, test: ClaimSet) -> None:
    """A clear error naming the claim ids both sets hold."""
    shared = sorted({c.claim_id for c in train.claims} & {c.claim_id for c in test.claims})
    if shared:
        named = ", ".join(str(i) for i in shared[:MAX_NAMED_IDS])
        more = f" and {len(shared) - MAX_NAMED_IDS} more" if len(shared) > MAX_NAMED_IDS else ""
        raise ValueError(
            f"--train {train.claims_path} and --test {test.claims_path} share "
            f"{len(shared)} claim id(s): {named}{more}"
        )


def set_record(claim_set: ClaimSet, pairs: list[VerifierPair]) -> dict:
    return {
        "claims": str(claim_set.claims_path),
        "key": claim_set.key,
        "sha256": file_sha256(claim_set.claims_path),
        "corpus": claim_set.corpus_key,
        "corpus_sha256": file_sha256(claim_set.corpus_path),
        "n_claims": len({p.claim_id for p in pairs}),
        "n_pairs": len(pairs),
    }


@dataclass(frozen=True)
class ThresholdMetrics:
    """The decision ``P(NOINFO) > tau`` on a set of pairs."""

    tau: float
    noinfo_recall: float
    other_specificity: float

    @property
    def balanced_accuracy(self) -> float:
        return (self.noinfo_recall + self.other_specificity) / 2

    def to_json(self) -> dict:
        return {
            "tau": self.tau,
            "noinfo_recall": round(self.noinfo_recall, 6),
            "other_specificity": round(self.other_specificity, 6),
            "balanced_accuracy": round(self.balanced_accuracy, 6),
        }


def at_tau(p_noinfo: np.ndarray, labels: np.ndarray, tau: float) -> ThresholdMetrics:
    above = np.asarray(p_noinfo, dtype=np.float64) > tau
    positive = labels == NOINFO
    recall = float(above[positive].mean()) if positive.any() else 0.0
    specificity = float((~above[~positive]).mean()) if (~positive).any() else 0.0
    return ThresholdMetrics(tau, recall, specificity)


@dataclass(frozen=True)
class TransferReport:
    train: dict
    test: dict
    kind: str
    seed: int
    folds: int
    tau: float
    train_out_of_fold: VerdictMetrics
    test_metrics: VerdictMetrics
    test_at_tau: ThresholdMetrics
    baseline: VerdictMetrics
    shuffled_control: VerdictMetrics
    recipe: dict[str, Any]

    def to_json(self) -> dict:
        return {
            "train": dict(self.train),
            "kind": self.kind,
            "seed": self.seed,
            "folds": self.folds,
            "tau": self.tau,
            "tau_fitted_on": "train, out of fold",
            "train_out_of_fold": self.train_out_of_fold.to_json(),
            "test": {**dict(self.test), **self.test_metrics.to_json()},
            "test_at_tau": self.test_at_tau.to_json(),
            "baseline": self.baseline.to_json(),
            "controls": {"baseline_shuffled_labels": self.shuffled_control.to_json()},
            "recipe": dict(self.recipe),
        }


def evaluate_transfer(
    config: VerifierConfig,
    train: ClaimSet,
    test: ClaimSet,
    device: str = "cpu",
    trained: TrainedVerifier | None = None,
) -> TransferReport:
    """Train ``config``'s verifier and its tau on ``train`` (``trained``: when already
    trained), score ``test`` once, beside the untrained-encoder baseline and its
    shuffled-label control (both fitted on ``train``)."""
    check_disjoint(train, test)
    if config.training_set != train.key:
        raise ValueError(f"verifier configuration {config.key}: trains on {config.training_set}")
    if trained is None:
        trained = train_config_verifier(config, train, device=device)
    test_pairs = test.pairs(config.seed)
    test_labels = labels_of(test_pairs)
    hard = np.array([p.source != RANDOM for p in test_pairs])
    claims, texts = [p.claim for p in test_pairs], [p.text for p in test_pairs]
    scores = np.asarray(trained.verifier.score_pairs(claims, texts), dtype=np.float32)
    # the baseline: the probe's head on the untrained encoder's features of both sets
    recipe = config.recipe_object()
    if config.verifier == "probe":
        encoder = trained.verifier.encoder
        train_features = trained.features
    else:
        encoder = VerifierProbeRecipe(base_model=config.baseline_model).encoder(device)
        train_features = None
    if train_features is None:  # not kept with a saved verifier: embedded again
        train_features = baseline_features(trained.pairs, encoder.encode)
    test_features = baseline_features(test_pairs, encoder.encode)
    train_labels = labels_of(trained.pairs)
    head = fit_probe_head(train_features, train_labels, config.seed)
    shuffled = np.random.default_rng(config.seed + 1).permutation(train_labels)
    control = fit_probe_head(train_features, shuffled, config.seed)
    oof = np.asarray(trained.oof, dtype=np.float32)
    return TransferReport(
        train=set_record(train, trained.pairs),
        test=set_record(test, test_pairs),
        kind=config.verifier,
        seed=config.seed,
        folds=config.folds,
        tau=trained.tau,
        train_out_of_fold=verdict_metrics(
            oof, train_labels, np.array([p.source != RANDOM for p in trained.pairs])
        ),
        test_metrics=verdict_metrics(scores, test_labels, hard),
        test_at_tau=at_tau(scores[:, NOINFO], test_labels, trained.tau),
        baseline=verdict_metrics(head.posteriors(test_features), test_labels, hard),
        shuffled_control=verdict_metrics(control.posteriors(test_features), test_labels, hard),
        recipe={"kind": config.verifier, **recipe.to_dict()} if recipe is not None else {},
    )


# -- the held-out report of a registered claim set (the scifact_heldout_report asset) -------


def trained_from_record(
    lake: Lake, config: VerifierConfig, record: dict, train: ClaimSet
) -> TrainedVerifier:
    """The verifier ``verifier_model`` saved for ``config``, with its out-of-fold scores
    and tau, as ``train_config_verifier`` returned it (features are not saved)."""
    table = lake.read_parquet(record["oof"])
    oof = np.column_stack([table[f"p_{v.lower()}"].to_numpy() for v in VERDICTS])
    return TrainedVerifier(
        load_trained_verifier(lake, record),
        train.pairs(config.seed),
        table["fold"].to_numpy(),
        oof.astype(np.float32),
        float(record["tau"]),
    )


def heldout_corpus(lake: Lake, claim_set: str) -> str:
    """The one corpus the trained verifiers pair their claims with (the held-out set is read
    with it)."""
    corpora = sorted(
        {c.corpus for c in verifier_configs(lake) if lake.exists(verifier_trained_key(c.key))}
    )
    if len(corpora) != 1:
        raise ValueError(
            f"claim set {claim_set}: the trained verifiers pair claims with {corpora}; "
            "exactly one corpus is needed (materialise verifier_model first)"
        )
    return corpora[0]


def heldout_report(lake: Lake, test: ClaimSet) -> tuple[dict, list[CheckOutcome]]:
    """Every registered verifier with a trained model, paired with the same corpus and
    trained on a claim set that shares no claim with ``test``, scored once on ``test``
    (``evaluate_transfer``), and the checks."""
    rows, overlaps, taus = [], [], []
    test_ids = {c.claim_id for c in test.claims}
    for config in verifier_configs(lake):
        if config.corpus != test.corpus_key or not lake.exists(verifier_trained_key(config.key)):
            continue
        if config.training_set == test.key:  # trained on this very set: not held out
            continue
        record = read_trained_verifier(lake, config.key)
        with open_claim_set(lake, config.training_set, config.corpus) as train:
            shared = sorted({c.claim_id for c in train.claims} & test_ids)
            if shared:  # the check fails, naming them; the verifier is not scored
                overlaps.append(f"{config.key} ({config.training_set}): {shared[:MAX_NAMED_IDS]}")
                continue
            trained = trained_from_record(lake, config, record, train)
            doc = evaluate_transfer(config, train, test, "cpu", trained).to_json()
        rows.append({"config": config.key, **doc})
        taus.append((config.key, doc["tau"], record["tau"]))
    if not rows and not overlaps:
        raise ValueError(
            f"claim set {test.key}: no verifier_model is trained on a claim set disjoint from "
            "it with the same corpus; register one and materialise verifier_model first"
        )
    report = {"claim_set": test.key, "corpus": test.corpus_key, "verifiers": rows}
    checks = [
        CheckOutcome(
            "claims_disjoint",
            not overlaps,
            "; ".join(overlaps) or f"{len(rows)} verifier(s), no shared claim id",
        ),
        CheckOutcome(
            "saved_tau",
            all(a == b for _, a, b in taus),
            "; ".join(f"{k}: scored at {a}, saved {b}" for k, a, b in taus),
        ),
    ]
    return report, checks


def write_heldout_report(lake: Lake, report: dict, prefix: str = HELDOUT_PREFIX) -> list[str]:
    lines = [
        f"# Verifiers scored on held-out claim set {report['claim_set']}",
        "",
        "Each verifier, its tau and its baseline were fitted on another claim set; these claims",
        "were scored once.",
        "",
        "| verifier | trained on | NOINFO AUROC | macro-F1 | balanced accuracy at tau | "
        "baseline AUROC | shuffled-label control AUROC |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["verifiers"]:
        lines.append(
            f"| {r['config']} | {r['train']['key']} | {r['test']['noinfo_auroc']} | "
            f"{r['test']['macro_f1']} | {r['test_at_tau']['balanced_accuracy']} | "
            f"{r['baseline']['noinfo_auroc']} | "
            f"{r['controls']['baseline_shuffled_labels']['noinfo_auroc']} |"
        )
    return write_report_files(lake, prefix, report, "\n".join(lines) + "\n", {})


def heldout_summary(report: dict) -> dict:
    return {
        r["config"]: {
            "trained_on": r["train"]["key"],
            "noinfo_auroc": r["test"]["noinfo_auroc"],
            "macro_f1": r["test"]["macro_f1"],
            "tau": r["tau"],
        }
        for r in report["verifiers"]
    }


def heldout_row(lake: Lake, heldout_set: str, config_key: str) -> dict:
    """One verifier's row of the published held-out report."""
    doc = json.loads(lake.read_bytes(f"{HELDOUT_PREFIX}/{heldout_set}/report.json"))
    (row,) = [v for v in doc["verifiers"] if v["config"] == config_key]
    return row
