"""`kg eval scifact --train FILE --test FILE`: a probe (a tiny BERT frozen) trained on 12 real
SciFact training claims, its tau fitted on their out-of-fold scores, scored once on 8 other
claims; figures recomputed with scikit-learn, a rerun identical to the bit, and shared claim
ids refused by name."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
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
from kg_platform_tests.assets.test_verification import write_scifact_slice

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


def run(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main(["eval", "scifact", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_train_on_one_set_score_the_other(tmp_path, tiny_bert, capsys) -> None:
    claims, corpus = write_scifact_slice(tmp_path)
    train, test = split_claims(claims, tmp_path, 12)
    argv = ["--train", str(train), "--test", str(test), "--corpus", str(corpus)]
    argv += ["--kind", "probe", "--base-model", str(tiny_bert), "--folds", "2", "--json"]
    code, out, err = run(capsys, argv)
    assert code == 0, err
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc["train"]["key"] == question_set_key(train)
    assert doc["train"]["sha256"] == file_sha256(train)
    assert doc["test"]["key"] == question_set_key(test)
    assert doc["test"]["sha256"] == file_sha256(test)
    assert (doc["train"]["n_claims"], doc["test"]["n_claims"]) == (12, 8)
    assert doc["tau_fitted_on"] == "train, out of fold"
    # recomputed: the head fitted with scikit-learn on every training pair's features
    encoder = Encoder(str(tiny_bert), device="cpu")
    docs = read_corpus(corpus)

    def features_labels(path: Path):
        pairs = scifact_pairs(read_claim_file(path), docs, seed=0)
        x = claim_text_features([p.claim for p in pairs], [p.text for p in pairs], encoder.encode)
        return x, np.array([VERDICTS.index(p.label) for p in pairs])

    x_train, y_train = features_labels(train)
    x_test, y_test = features_labels(test)
    assert doc["test"]["n_pairs"] == len(y_test) == 16
    fitted = LogisticRegression(max_iter=2000, random_state=0).fit(x_train, y_train)
    scores = np.zeros((len(y_test), 3))
    scores[:, fitted.classes_] = fitted.predict_proba(x_test)
    scores = scores.astype(np.float32)
    assert doc["test"]["noinfo_auroc"] == round(
        roc_auc_score(y_test == NOINFO, scores[:, NOINFO]), 6
    )
    above = scores[:, NOINFO] > doc["tau"]
    recall = above[y_test == NOINFO].mean()
    assert doc["test_at_tau"]["noinfo_recall"] == round(float(recall), 6)
    # the probe is the untrained-encoder baseline; the control is fitted on shuffled labels
    assert doc["baseline"]["noinfo_auroc"] == doc["test"]["noinfo_auroc"]
    control = doc["controls"]["baseline_shuffled_labels"]
    shuffled = np.random.default_rng(1).permutation(y_train)  # seed + 1, as the report
    blind = LogisticRegression(max_iter=2000, random_state=0).fit(x_train, shuffled)
    p_blind = np.zeros((len(y_test), 3))
    p_blind[:, blind.classes_] = blind.predict_proba(x_test)
    p_blind = p_blind.astype(np.float32)
    assert control["n"] == 16
    assert control["noinfo_auroc"] == round(roc_auc_score(y_test == NOINFO, p_blind[:, NOINFO]), 6)
    # the same command again: the same figures, bit for bit
    code, again, _ = run(capsys, argv)
    redo = json.loads(again.strip().splitlines()[-1])
    assert {k: v for k, v in redo.items() if k != "seconds"} == {
        k: v for k, v in doc.items() if k != "seconds"
    }


def test_shared_claim_ids_are_an_error_naming_them(tmp_path, capsys) -> None:
    claims, corpus = write_scifact_slice(tmp_path)
    train, _ = split_claims(claims, tmp_path, 12)
    ids = sorted({c.claim_id for c in read_claim_file(train)})
    code, _, err = run(
        capsys, ["--train", str(claims), "--test", str(train), "--corpus", str(corpus)]
    )
    assert code == 2
    named = ", ".join(str(i) for i in ids[:10])
    assert err == (
        f"kg eval scifact: --train {claims} and --test {train} share 12 claim id(s): "
        f"{named} and 2 more\n"
    )


def test_train_and_test_go_together(tmp_path, capsys) -> None:
    claims, corpus = write_scifact_slice(tmp_path)
    code, _, err = run(capsys, ["--train", str(claims), "--corpus", str(corpus)])
    assert (code, err) == (2, "kg eval scifact: --train and --test: give both, or neither\n")
    code, _, err = run(capsys, ["--claims", str(claims), "--train", str(claims), "--test", "x"])
    assert (code, err) == (2, "kg eval scifact: give --claims FILE, or --train FILE --test FILE\n")
