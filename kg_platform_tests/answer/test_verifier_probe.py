"""The probe verifier (the frozen encoder with a logistic regression on [c, t, c*t, |c-t|]) on
a slice of the real SciFact training claims, with a tiny BERT built here as the encoder: its
head against scikit-learn's own probabilities, the same bytes for the same training, the
saved folder reloaded by load_verifier, its out-of-fold scores equal to the untrained-encoder
baseline, and clear errors for a broken folder."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from kg_platform.answer.readers.base import content_hash
from kg_platform.answer.readers.probe import pair_features
from kg_platform.answer.verifier import (
    PROBE_FILE,
    VERDICTS,
    ProbeVerifier,
    VerifierProbeRecipe,
    claim_text_features,
    load_verifier,
    read_claims,
    read_corpus,
    scifact_pairs,
    train_probe_verifier,
)
from kg_platform.embeddings.encoder import Encoder
from kg_platform.evaluation.scifact.evaluation import (
    baseline_posteriors,
    claim_folds,
    out_of_fold_scores,
)
from kg_platform_tests.answer.readers import conftest as reader_fixtures
from kg_platform_tests.support.verification import write_scifact_slice

one_torch_thread = reader_fixtures.one_torch_thread
tiny_bert = reader_fixtures.tiny_bert


@pytest.fixture(scope="module")
def scifact_slice(tmp_path_factory):
    """The first 20 real training claims and their 40 pairs (4 evidence, 16 cited, 20 random)."""
    claims, corpus = write_scifact_slice(tmp_path_factory.mktemp("probe"))
    return scifact_pairs(read_claims(claims), read_corpus(corpus), seed=0)


def labels_of(pairs) -> np.ndarray:
    return np.array([VERDICTS.index(p.label) for p in pairs])


def independent_features(encoder: Encoder, pairs) -> np.ndarray:
    """[c, t, c*t, |c-t|] from vectors encoded one pair list at a time (not deduplicated)."""
    c = encoder.encode([p.claim for p in pairs]).astype(np.float64)
    t = encoder.encode([p.text for p in pairs]).astype(np.float64)
    return np.hstack([c, t, c * t, np.abs(c - t)])


def test_the_claim_text_features_are_the_readers_pair_features() -> None:
    # one home for [c, t, c*t, |c-t|]: the reader probe's pair_features
    vectors = {"a": [1.0, 2.0], "b": [3.0, -1.0], "x": [0.5, 0.25]}

    def embed(texts):
        return np.array([vectors[t] for t in texts])

    features = claim_text_features(["a", "b", "a"], ["x", "x", "b"], embed)
    assert features.tolist() == [
        [1.0, 2.0, 0.5, 0.25, 0.5, 0.5, 0.5, 1.75],
        [3.0, -1.0, 0.5, 0.25, 1.5, -0.25, 2.5, 1.25],
        [1.0, 2.0, 3.0, -1.0, 3.0, -2.0, 2.0, 3.0],
    ]
    c, t = features[:, :2], features[:, 2:4]
    assert features.tolist() == pair_features(c, t, ("q", "t", "prod", "diff")).tolist()


def test_the_probe_is_the_logistic_regression_on_the_pair_features(scifact_slice, tiny_bert):
    pairs = scifact_slice
    recipe = VerifierProbeRecipe(base_model=str(tiny_bert))
    probe = train_probe_verifier(pairs, 0, recipe)
    encoder = Encoder(str(tiny_bert), device="cpu")
    features = independent_features(encoder, pairs)
    np.testing.assert_allclose(
        claim_text_features([p.claim for p in pairs], [p.text for p in pairs], encoder.encode),
        features,
        atol=1e-6,
    )
    sklearn = LogisticRegression(max_iter=2000, random_state=0).fit(features, labels_of(pairs))
    assert list(sklearn.classes_) == [0, 1, 2]  # the slice has CONTRADICT evidence
    scores = probe.score_pairs([p.claim for p in pairs], [p.text for p in pairs])
    assert scores.dtype == np.float32 and scores.shape == (40, 3)
    np.testing.assert_allclose(scores, sklearn.predict_proba(features), atol=1e-5)
    np.testing.assert_allclose(scores.sum(axis=1), 1.0, atol=1e-6)
    # the gate's call: one claim against several texts
    texts = [p.text for p in pairs[:3]]
    one = probe.scores(pairs[0].claim, texts)
    np.testing.assert_array_equal(one, probe.score_pairs([pairs[0].claim] * 3, texts))
    same_claim = [i for i, p in enumerate(pairs) if p.claim_id == pairs[0].claim_id]
    np.testing.assert_allclose(
        probe.scores(pairs[0].claim, [pairs[i].text for i in same_claim]),
        scores[same_claim],
        atol=1e-5,
    )
    assert probe.score_pairs([], []).shape == (0, 3)


def test_a_head_that_saw_two_verdicts_gives_the_third_zero(scifact_slice, tiny_bert) -> None:
    pairs = [p for p in scifact_slice if p.label != "CONTRADICT"]
    probe = train_probe_verifier(pairs, 0, VerifierProbeRecipe(base_model=str(tiny_bert)))
    assert probe.head.classes == (0, 2) and probe.head.coef.shape[0] == 1
    features = independent_features(Encoder(str(tiny_bert), device="cpu"), pairs)
    sklearn = LogisticRegression(max_iter=2000, random_state=0).fit(features, labels_of(pairs))
    scores = probe.score_pairs([p.claim for p in pairs], [p.text for p in pairs])
    assert (scores[:, 1] == 0).all()
    np.testing.assert_allclose(scores[:, [0, 2]], sklearn.predict_proba(features), atol=1e-5)


def test_same_training_same_bytes_and_the_folder_reloads(scifact_slice, tiny_bert, tmp_path):
    recipe = VerifierProbeRecipe(base_model=str(tiny_bert))
    first = train_probe_verifier(scifact_slice, 0, recipe).save(tmp_path / "a")
    second = train_probe_verifier(scifact_slice, 0, recipe).save(tmp_path / "b")
    assert first == second == content_hash(tmp_path / "a")
    names = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*"))
    assert names == sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*"))
    for name in names:
        if (tmp_path / "a" / name).is_file():
            assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    # the encoder's own files are copied as they are, beside verifier_probe.json
    assert sorted(p.name for p in (tmp_path / "a" / "encoder").iterdir()) == sorted(
        p.name for p in tiny_bert.iterdir()
    )
    doc = json.loads((tmp_path / "a" / PROBE_FILE).read_text())
    assert doc["recipe"] == {"c": 1.0, "max_iter": 2000, "max_length": 64}
    assert doc["head"]["classes"] == list(VERDICTS) and doc["seed"] == 0
    # another seed or regularisation is another model
    other = train_probe_verifier(
        scifact_slice, 0, VerifierProbeRecipe(base_model=str(tiny_bert), c=0.1)
    )
    assert other.save(tmp_path / "c") != first
    trained = train_probe_verifier(scifact_slice, 0, recipe)
    loaded = load_verifier(tmp_path / "a", device="cpu")
    assert isinstance(loaded, ProbeVerifier) and loaded.tau is None
    assert loaded.name == trained.name
    claims, texts = [p.claim for p in scifact_slice], [p.text for p in scifact_slice]
    assert np.array_equal(loaded.score_pairs(claims, texts), trained.score_pairs(claims, texts))


def test_out_of_fold_probe_scores_are_the_untrained_encoder_baseline(scifact_slice, tiny_bert):
    recipe = VerifierProbeRecipe(base_model=str(tiny_bert))
    encoder = Encoder(str(tiny_bert), device="cpu")
    labels = labels_of(scifact_slice)
    folds = claim_folds(scifact_slice, 2, 0)
    scores = out_of_fold_scores(scifact_slice, folds, 0, recipe)
    baseline = baseline_posteriors(scifact_slice, folds, encoder.encode, 0)
    np.testing.assert_array_equal(scores, baseline)
    # recomputed with scikit-learn, fold by fold
    features = claim_text_features(
        [p.claim for p in scifact_slice], [p.text for p in scifact_slice], encoder.encode
    )
    oof = np.zeros((40, 3))
    for fold in (0, 1):
        fitted = LogisticRegression(max_iter=2000, random_state=0)
        fitted.fit(features[folds != fold], labels[folds != fold])
        # a fold whose training half has no CONTRADICT pair: that verdict gets 0
        held = np.flatnonzero(folds == fold)
        oof[np.ix_(held, fitted.classes_)] = fitted.predict_proba(features[held])
    np.testing.assert_allclose(scores, oof, atol=1e-5)


def test_a_broken_probe_folder_is_named(scifact_slice, tiny_bert, tmp_path) -> None:
    folder = tmp_path / "probe"
    train_probe_verifier(scifact_slice, 0, VerifierProbeRecipe(base_model=str(tiny_bert))).save(
        folder
    )
    doc = json.loads((folder / PROBE_FILE).read_text())
    doc["head"]["coef"] = doc["head"]["coef"][:2]
    (folder / PROBE_FILE).write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=rf"{folder / PROBE_FILE}: not a readable probe"):
        load_verifier(folder, device="cpu")
    shutil.rmtree(folder / "encoder")
    (folder / PROBE_FILE).write_text("{}")
    with pytest.raises(ValueError, match="not a readable probe verifier"):
        load_verifier(folder, device="cpu")
    with pytest.raises(ValueError, match="c > 0"):
        VerifierProbeRecipe(c=0)
