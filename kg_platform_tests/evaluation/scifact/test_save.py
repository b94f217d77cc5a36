"""`kg eval scifact --save DIR`: the verifier of `--kind` (probe or a fine-tuned tiny BERT)
trained on every claim of a real slice of the SciFact training claims, saved with the tau the
JSON reports (fitted on the out-of-fold scores), and read back by load_verifier, as `kg ask
--verifier DIR` reads it; and the options that cannot go with --save."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score, roc_auc_score

from kg_platform.answer.readers.base import content_hash
from kg_platform.answer.verifier import (
    NOINFO,
    TAU_FILE,
    VERDICTS,
    ClassifierVerifier,
    ProbeVerifier,
    claim_text_features,
    load_verifier,
    read_claims,
    read_corpus,
    read_tau,
    scifact_pairs,
)
from kg_platform.cli import main
from kg_platform.embeddings.encoder import Encoder
from kg_platform.evaluation.common.question_sets import question_set_key
from kg_platform.evaluation.scifact.evaluation import claim_folds
from kg_platform_tests.answer.readers import conftest as reader_fixtures
from kg_platform_tests.assets.test_verification import balanced_threshold, write_scifact_slice

one_torch_thread = reader_fixtures.one_torch_thread
tiny_bert = reader_fixtures.tiny_bert


@pytest.fixture(scope="module")
def scifact_files(tmp_path_factory):
    return write_scifact_slice(tmp_path_factory.mktemp("scifact_save"))


def run_json(capsys, argv: list[str]) -> dict:
    assert main(["eval", "scifact", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_save_a_probe_and_load_it_with_the_reported_tau(scifact_files, tiny_bert, tmp_path, capsys):
    claims, corpus = scifact_files
    folder = tmp_path / "probe"
    argv = ["--claims", str(claims), "--corpus", str(corpus), "--kind", "probe"]
    argv += ["--base-model", str(tiny_bert), "--folds", "2", "--device", "cpu"]
    doc = run_json(capsys, [*argv, "--save", str(folder)])
    assert (doc["n_claims"], doc["n_pairs"], doc["kind"]) == (20, 40, "probe")
    saved = doc["saved"]
    loaded = load_verifier(folder, device="cpu")
    assert isinstance(loaded, ProbeVerifier)
    assert loaded.tau == read_tau(folder) == saved["tau"] == doc["tau"]
    assert saved["model"] == content_hash(folder)
    record = json.loads((folder / TAU_FILE).read_text())["fitted_on"]
    assert record == {
        "claim_set": question_set_key(claims),
        "claims_sha256": record["claims_sha256"],
        "corpus": question_set_key(corpus),
        "pairs": 40,
        "folds": 2,
        "seed": 0,
        "scores": "out of fold",
        "verifier_config": saved["verifier_config"],
    }
    # the figures recomputed with scikit-learn on the same claim folds
    pairs = scifact_pairs(read_claims(claims), read_corpus(corpus), seed=0)
    labels = np.array([VERDICTS.index(p.label) for p in pairs])
    encoder = Encoder(str(tiny_bert), device="cpu")
    features = claim_text_features(
        [p.claim for p in pairs], [p.text for p in pairs], encoder.encode
    )
    folds = claim_folds(pairs, 2, 0)
    oof = np.zeros((40, 3))
    for fold in (0, 1):
        fitted = LogisticRegression(max_iter=2000, random_state=0)
        fitted.fit(features[folds != fold], labels[folds != fold])
        held = np.flatnonzero(folds == fold)
        oof[np.ix_(held, fitted.classes_)] = fitted.predict_proba(features[held])
    oof = oof.astype(np.float32)
    assert doc["noinfo_auroc"] == round(roc_auc_score(labels == NOINFO, oof[:, NOINFO]), 6)
    macro = f1_score(labels, oof.argmax(1), labels=[0, 1, 2], average="macro", zero_division=0)
    assert doc["macro_f1"] == round(macro, 6)
    assert doc["tau"] == pytest.approx(balanced_threshold(oof[:, NOINFO], labels == NOINFO))
    # the probe is the untrained-encoder baseline: the same figures on the same folds
    assert doc["noinfo_auroc"] == doc["baseline"]["noinfo_auroc"]
    assert doc["confusion"] == doc["baseline"]["confusion"]
    # the saved probe was fitted on all 40 pairs: scikit-learn's fit on the same features
    full = LogisticRegression(max_iter=2000, random_state=0).fit(features, labels)
    scores = loaded.score_pairs([p.claim for p in pairs], [p.text for p in pairs])
    np.testing.assert_allclose(scores, full.predict_proba(features), atol=1e-5)
    # the same command again: the same bytes
    again = run_json(capsys, [*argv, "--save", str(tmp_path / "again")])
    assert again["saved"]["model"] == saved["model"]


def test_save_a_fine_tuned_verifier_with_its_tau(scifact_files, tiny_bert, tmp_path, capsys):
    claims, corpus = scifact_files
    folder = tmp_path / "minilm"
    doc = run_json(
        capsys,
        ["--claims", str(claims), "--corpus", str(corpus), "--kind", "minilm",
         "--base-model", str(tiny_bert), "--folds", "2", "--epochs", "1", "--max-length", "32",
         "--batch-size", "8", "--device", "cpu", "--save", str(folder)],
    )  # fmt: skip
    loaded = load_verifier(folder, device="cpu")
    assert isinstance(loaded, ClassifierVerifier)
    assert loaded.tau == doc["saved"]["tau"] == doc["tau"] == read_tau(folder)
    assert doc["saved"]["model"] == content_hash(folder)
    assert json.loads((folder / TAU_FILE).read_text())["fitted_on"]["scores"] == "out of fold"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--max-claims", "5"], "trains on every claim of --claims"),
        (["--baseline-only"], "trains on every claim of --claims"),
        ([], "not empty; give a new or empty folder"),
    ],
)
def test_options_that_cannot_go_with_save(scifact_files, tmp_path, capsys, extra, message):
    claims, corpus = scifact_files
    folder = tmp_path / "taken"
    folder.mkdir()
    (folder / "x").write_text("x")
    argv = ["eval", "scifact", "--claims", str(claims), "--corpus", str(corpus), "--kind"]
    assert main([*argv, "probe", "--save", str(folder), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kg eval scifact: --save {folder}: ") and message in err
