"""The verifier on SciFact: K-fold cross-validation over the training claims (folds split by
claim, so no claim's pairs sit on both sides), NOINFO AUROC, macro-F1 and the confusion
matrix of the adapted verifier and of the untrained-encoder baseline, and the gate-7
threshold tau fitted on the out-of-fold scores of the training claims only.

The baseline: the encoder as shipped, not fine-tuned; claim and text vectors give the
features [c, t, c*t, |c-t|] and a multinomial logistic regression learns the 3 verdicts on
the same training folds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kg_platform.answer.readers.crossfit import fit_folds, macro_f1_of
from kg_platform.answer.verifier import (
    NOINFO,
    VERDICTS,
    Embed,
    VerifierPair,
    VerifierProbeRecipe,
    claim_text_features,
    fit_probe_head,
    train_verifier,
)
from kg_platform.evaluation.common.stats import auroc


def claim_folds(pairs: Sequence[VerifierPair], k: int, seed: int) -> np.ndarray:
    """Fold of each pair (0..k-1): the claims, sorted by id and shuffled with ``seed``, go
    round robin; every pair follows its claim."""
    claims = sorted({p.claim_id for p in pairs})
    if k < 2 or len(claims) < k:
        raise ValueError(f"k={k}: needs at least 2 folds and as many claims ({len(claims)})")
    order = np.random.default_rng(seed).permutation(len(claims))
    fold_of = {claims[int(i)]: n % k for n, i in enumerate(order)}
    return np.array([fold_of[p.claim_id] for p in pairs], dtype=np.int64)


def labels_of(pairs: Sequence[VerifierPair]) -> np.ndarray:
    return np.array([VERDICTS.index(p.label) for p in pairs], dtype=np.int64)


@dataclass(frozen=True)
class VerdictMetrics:
    n: int
    noinfo_auroc: float | None
    macro_f1: float
    confusion: list[list[int]]  # rows gold, columns predicted, VERDICTS order
    # NOINFO AUROC without the random documents: evidence vs cited non-evidence only
    noinfo_auroc_hard: float | None = None

    def to_json(self) -> dict:
        return {
            "n": self.n,
            "noinfo_auroc": _r(self.noinfo_auroc),
            "macro_f1": round(self.macro_f1, 6),
            "confusion": self.confusion,
            "noinfo_auroc_hard": _r(self.noinfo_auroc_hard),
        }


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def verdict_metrics(
    posteriors: np.ndarray, labels: np.ndarray, hard: np.ndarray | None = None
) -> VerdictMetrics:
    """Metrics of the argmax decision and of P(NOINFO); ``hard`` marks the pairs the hard
    AUROC is computed on (None: not computed)."""
    posteriors = np.asarray(posteriors)
    predicted = posteriors.argmax(axis=1)
    confusion = np.zeros((3, 3), dtype=np.int64)
    np.add.at(confusion, (labels, predicted), 1)
    return VerdictMetrics(
        n=int(labels.size),
        noinfo_auroc=auroc(posteriors[:, NOINFO], labels == NOINFO),
        macro_f1=macro_f1_of(confusion),
        confusion=confusion.tolist(),
        noinfo_auroc_hard=(
            None if hard is None else auroc(posteriors[hard, NOINFO], labels[hard] == NOINFO)
        ),
    )


def fit_tau(p_noinfo: np.ndarray, labels: np.ndarray) -> float:
    """The threshold on P(NOINFO) that best separates NOINFO from the rest (balanced
    accuracy of "P > tau"); ties to the smallest candidate. Fitted on training-claim
    scores only."""
    p = np.asarray(p_noinfo, dtype=np.float64)
    positive = labels == NOINFO
    if positive.all() or not positive.any():
        raise ValueError("fit_tau: needs NOINFO and other pairs")
    candidates = np.unique(np.concatenate([[0.0], p]))
    best, best_tau = -1.0, 0.5
    for tau in candidates:
        above = p > tau
        balanced = (above[positive].mean() + (~above[~positive]).mean()) / 2
        if balanced > best + 1e-12:
            best, best_tau = balanced, float(tau)
    return best_tau


def cross_validate_verifier(
    pairs: Sequence[VerifierPair],
    folds: np.ndarray,
    seed: int,
    recipe: Any,
    on_fold: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Out-of-fold (n, 3) scores: fold f is scored by a verifier trained (seed + f) on the
    other folds."""
    out = np.zeros((len(pairs), 3), dtype=np.float32)
    fitted = fit_folds(
        pairs, folds, seed, lambda train, s: train_verifier(train, s, recipe), lambda p: p.claim_id
    )
    for fold, verifier, _, held in fitted:
        out[held] = verifier.score_pairs(
            [pairs[i].claim for i in held], [pairs[i].text for i in held]
        )
        if on_fold is not None:
            on_fold(fold)
    return out


def baseline_features(pairs: Sequence[VerifierPair], embed: Embed) -> np.ndarray:
    """[c, t, c*t, |c-t|] of each pair from the untrained encoder's vectors."""
    return claim_text_features([p.claim for p in pairs], [p.text for p in pairs], embed)


def baseline_posteriors(
    pairs: Sequence[VerifierPair],
    folds: np.ndarray,
    embed: Embed | None,
    seed: int,
    shuffle_seed: int | None = None,
    features: np.ndarray | None = None,
    c: float = 1.0,
    max_iter: int = 2000,
) -> np.ndarray:
    """Out-of-fold (n, 3) scores of the untrained-encoder baseline, which is the probe
    verifier's head (``fit_probe_head``) on each fold: the probe's out-of-fold scores. With
    ``shuffle_seed`` the control: each training fold's labels are permuted before the fit,
    so the scores can carry no signal about the held-out labels (expect NOINFO AUROC near
    0.5)."""
    if features is None:
        if embed is None:
            raise ValueError("baseline_posteriors: neither features nor an encoder given")
        features = baseline_features(pairs, embed)
    labels = labels_of(pairs)
    out = np.zeros((len(pairs), 3), dtype=np.float32)
    shuffler = None if shuffle_seed is None else np.random.default_rng(shuffle_seed)

    def fit(train: list[int], _: int):  # every fold's head with ``seed``, as the probe's
        fit_labels = labels[train]
        if shuffler is not None:
            fit_labels = shuffler.permutation(fit_labels)
        return fit_probe_head(features[train], fit_labels, seed, c, max_iter)

    rows = list(range(len(pairs)))
    for _, head, _, held in fit_folds(rows, folds, seed, fit, lambda i: pairs[i].claim_id):
        out[held] = head.posteriors(features[held])
    return out


def out_of_fold_scores(
    pairs: Sequence[VerifierPair],
    folds: np.ndarray,
    seed: int,
    recipe: Any,
    features: np.ndarray | None = None,
    on_fold: Callable[[int], None] | None = None,
) -> np.ndarray:
    """The out-of-fold scores of the verifier ``recipe`` makes: a ``VerifierProbeRecipe``'s head on
    the probe features (``features``, or computed with its encoder), any other recipe
    fine-tuned per fold (``cross_validate_verifier``)."""
    if isinstance(recipe, VerifierProbeRecipe):
        if features is None:
            encoder = recipe.encoder()
            features = baseline_features(pairs, encoder.encode)
        return baseline_posteriors(
            pairs, folds, None, seed, features=features, c=recipe.c, max_iter=recipe.max_iter
        )
    return cross_validate_verifier(pairs, folds, seed, recipe, on_fold)
