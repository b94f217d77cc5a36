"""`kg eval verification --claims TRAIN --test TEST` through the persistent instance: the
probe (a tiny BERT frozen) trained on 12 real SciFact training claims as verifier_model, then
scifact_heldout_report scores 8 other claims once, its figures recomputed with scikit-learn;
and a test set that shares claims with the training set refused by name before anything
runs."""

from __future__ import annotations

import contextlib
import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from kg_platform.answer.verifier import (
    NOINFO,
    VERDICTS,
    claim_text_features,
    read_corpus,
    scifact_pairs,
)
from kg_platform.answer.verifier import read_claims as read_claim_file
from kg_platform.cli import main
from kg_platform.embeddings.encoder import Encoder
from kg_platform.evaluation.common.question_sets import question_set_key
from kg_platform.evaluation.scifact.verifier_training import file_sha256
from kg_platform_tests.answer.readers import conftest as reader_fixtures
from kg_platform_tests.conftest import use_kg_home
from kg_platform_tests.support.verification import write_scifact_slice

one_torch_thread = reader_fixtures.one_torch_thread
tiny_bert = reader_fixtures.tiny_bert


def split_claims(claims: Path, folder: Path, first: int) -> tuple[Path, Path]:
    """The slice's rows of its first ``first`` claim ids, and of the rest, as two CSVs."""
    with open(claims, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames, list(reader)
    ids = sorted({int(r["id"]) for r in rows})
    out = []
    for name, wanted in (("train", set(ids[:first])), ("test", set(ids[first:]))):
        path = folder / f"claims_{name}_part.csv"
        with open(path, "w", encoding="utf-8", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(r for r in rows if int(r["id"]) in wanted)
        out.append(path)
    return out[0], out[1]


def probabilities(fitted: LogisticRegression, x: np.ndarray) -> np.ndarray:
    """(n, 3) in VERDICTS order, 0 for a verdict the fit never saw, as float32 (the report's)."""
    out = np.zeros((len(x), 3))
    out[:, fitted.classes_] = fitted.predict_proba(x)
    return out.astype(np.float32)


def run_cli(home, argv: list[str]) -> tuple[int, str]:
    stdout = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        use_kg_home(mp, home)
        mp.setenv("DAGSTER_HOME", str(home / "dagster"))
        with contextlib.redirect_stdout(stdout):
            code = main(argv)
    return code, stdout.getvalue()


def test_heldout_report_matches_train_here_score_there(
    tmp_path, question_lake, tiny_bert, capsys
) -> None:
    claims, corpus = write_scifact_slice(tmp_path)
    train, test = split_claims(claims, tmp_path, 12)
    recipe = json.dumps({"base_model": str(tiny_bert)})
    code, out = run_cli(
        tmp_path / "kg",
        ["eval", "verification", "--claims", str(train), "--test", str(test),
         "--corpus", str(corpus), "--recipe", recipe, "--folds", "2",
         "--lake", question_lake.root, "--json"],
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["partition"]["heldout_set"] == question_set_key(test)
    held = summary["heldout"]
    assert held["config"] == summary["partition"]["verifier_config"]
    assert held["tau"] == summary["verifier_model"]["tau"]
    assert (held["train"]["key"], held["test"]["key"]) == (
        question_set_key(train),
        question_set_key(test),
    )
    assert (held["train"]["sha256"], held["test"]["sha256"]) == (
        file_sha256(train),
        file_sha256(test),
    )
    assert (held["train"]["n_claims"], held["test"]["n_claims"]) == (12, 8)
    assert held["tau_fitted_on"] == "train, out of fold"
    # recomputed: the head fitted with scikit-learn on every training pair's features
    encoder = Encoder(str(tiny_bert), device="cpu")
    docs = read_corpus(corpus)

    def features_labels(path: Path):
        pairs = scifact_pairs(read_claim_file(path), docs, seed=0)
        x = claim_text_features([p.claim for p in pairs], [p.text for p in pairs], encoder.encode)
        return x, np.array([VERDICTS.index(p.label) for p in pairs])

    (x_train, y_train), (x_test, y_test) = features_labels(train), features_labels(test)
    assert held["test"]["n_pairs"] == len(y_test) == 16
    scores = probabilities(
        LogisticRegression(max_iter=2000, random_state=0).fit(x_train, y_train), x_test
    )
    auroc = round(roc_auc_score(y_test == NOINFO, scores[:, NOINFO]), 6)
    assert held["test"]["noinfo_auroc"] == auroc
    recall = (scores[:, NOINFO] > held["tau"])[y_test == NOINFO].mean()
    assert held["test_at_tau"]["noinfo_recall"] == round(float(recall), 6)
    # the probe is the untrained-encoder baseline; the control is fitted on shuffled labels
    assert held["baseline"]["noinfo_auroc"] == auroc
    shuffled = np.random.default_rng(1).permutation(y_train)  # seed + 1, as the report
    blind = probabilities(
        LogisticRegression(max_iter=2000, random_state=0).fit(x_train, shuffled), x_test
    )
    control = held["controls"]["baseline_shuffled_labels"]
    assert control["n"] == 16
    assert control["noinfo_auroc"] == round(roc_auc_score(y_test == NOINFO, blind[:, NOINFO]), 6)
    # a verifier trained on all 20 claims joins the lake: it saw the held-out claims, so
    # the held-out report's blocking check fails, naming it, and nothing is published
    base = ["--corpus", str(corpus), "--recipe", recipe, "--folds", "2"]
    base += ["--lake", question_lake.root]
    code, _ = run_cli(tmp_path / "kg", ["eval", "verification", "--claims", str(claims), *base])
    assert code == 0
    capsys.readouterr()
    argv = ["eval", "verification", "--claims", str(train), "--test", str(test), *base]
    code, _ = run_cli(tmp_path / "kg", argv)
    assert code == 1
    err = capsys.readouterr().err
    assert "claims_disjoint" in err and question_set_key(claims) in err


def test_a_test_set_sharing_claims_is_refused_by_name(tmp_path, question_lake, capsys) -> None:
    claims, corpus = write_scifact_slice(tmp_path)
    train, _ = split_claims(claims, tmp_path, 12)
    code, _ = run_cli(
        tmp_path / "kg",
        ["eval", "verification", "--claims", str(claims), "--test", str(train),
         "--corpus", str(corpus), "--lake", question_lake.root],
    )  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"kg eval verification: --train {claims} and --test {train} share 12 claim id(s): "
    )
