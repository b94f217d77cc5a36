"""SciFact cross-validation with a tiny verifier and a hashed stand-in encoder: folds split
by claim, every claim scored, metrics recomputed by hand, tau fitted on out-of-fold scores."""

from __future__ import annotations

import numpy as np
import pytest

from kg_platform.answer.readers.classifier import ClassifierRecipe
from kg_platform.answer.verifier import EVIDENCE, RANDOM, VERDICTS, VerifierPair
from kg_platform.evaluation.scifact.evaluation import (
    baseline_posteriors,
    claim_folds,
    fit_tau,
    labels_of,
    out_of_fold_scores,
    verdict_metrics,
)
from kg_platform_tests.answer.readers import conftest as reader_fixtures

one_torch_thread = reader_fixtures.one_torch_thread
tiny_bert = reader_fixtures.tiny_bert
CUE = {"SUPPORT": "improved", "CONTRADICT": "unchanged", "NOINFO": "unclear"}


def _pairs() -> list[VerifierPair]:
    out = []
    for claim in range(10):
        for j, verdict in enumerate(VERDICTS):
            source = RANDOM if verdict == "NOINFO" else EVIDENCE
            text = f"trial {CUE[verdict]} outcome week"
            out.append(
                VerifierPair(claim, f"does the treatment work {claim}", j, text, verdict, source)
            )
    return out


def hashed_embed(texts):
    rows = []
    for text in texts:
        v = np.zeros(16)
        for word in text.split():
            v[sum(map(ord, word)) % 16] += 1.0
        rows.append(v / np.linalg.norm(v))
    return np.array(rows, dtype=np.float32)


def test_folds_keep_each_claim_on_one_side() -> None:
    pairs = _pairs()
    folds = claim_folds(pairs, 5, seed=0)
    assert sorted(np.bincount(folds).tolist()) == [6, 6, 6, 6, 6]
    for claim in range(10):
        assert len({int(f) for p, f in zip(pairs, folds, strict=True) if p.claim_id == claim}) == 1
    np.testing.assert_array_equal(claim_folds(list(reversed(pairs)), 5, 0), folds[::-1])
    with pytest.raises(ValueError, match="k=11"):
        claim_folds(pairs, 11, 0)


def test_metrics_by_hand() -> None:
    labels = np.array([0, 1, 2, 2])
    posteriors = np.array([[0.8, 0.1, 0.1], [0.6, 0.3, 0.1], [0.1, 0.1, 0.8], [0.2, 0.2, 0.6]])
    m = verdict_metrics(posteriors, labels)
    assert m.confusion == [[1, 0, 0], [1, 0, 0], [0, 0, 2]]
    assert m.macro_f1 == pytest.approx((2 / 3 + 0 + 1) / 3)
    assert m.noinfo_auroc == 1.0
    assert fit_tau(posteriors[:, 2], labels) == 0.1


def test_cross_validation_with_a_tiny_verifier(tiny_bert) -> None:
    recipe = ClassifierRecipe(base_model=str(tiny_bert), epochs=1, batch_size=8, max_length=32)
    pairs = _pairs()
    folds = claim_folds(pairs, 2, 0)
    scores = out_of_fold_scores(pairs, folds, 0, recipe)
    labels = labels_of(pairs)
    verifier = verdict_metrics(scores, labels, np.ones(30, dtype=bool))
    assert scores.shape == (30, 3) and sum(map(sum, verifier.confusion)) == 30
    assert 0.0 <= fit_tau(scores[:, 2], labels) <= 1.0
    assert 0.0 <= verifier.noinfo_auroc <= 1.0
    # the hashed encoder sees the cue word: the baseline separates the classes
    baseline = verdict_metrics(baseline_posteriors(pairs, folds, hashed_embed, 0), labels)
    assert (baseline.macro_f1, baseline.noinfo_auroc) == (1.0, 1.0)


def test_the_shuffled_label_control_loses_the_baselines_signal() -> None:
    """The same pairs, folds and features: the baseline reads the cue perfectly; fitted on
    each training fold's labels permuted, it cannot."""
    pairs = _pairs()
    folds, labels = claim_folds(pairs, 2, 0), labels_of(pairs)
    shuffled = baseline_posteriors(pairs, folds, hashed_embed, 0, shuffle_seed=1)
    control = verdict_metrics(shuffled, labels).to_json()
    # 15 training pairs a fold: the permuted fit is as likely to anti-learn as to learn
    assert (control["noinfo_auroc"], control["macro_f1"]) == (0.1875, 0.064073)
    assert control["confusion"] == [[0, 8, 2], [3, 1, 6], [5, 4, 1]]
