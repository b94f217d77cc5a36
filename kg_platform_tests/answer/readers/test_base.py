from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from kg_platform.answer.readers import (
    LABELS,
    LabelledQuestion,
    accuracy,
    assign_folds,
    check_posteriors,
    load_pubmedqa,
    macro_f1,
    training_set_hash,
    truncate,
)
from kg_platform.answer.readers.crossfit import fit_folds, macro_f1_of
from kg_platform_tests.answer.readers.conftest import synthetic_questions
from kg_platform_tests.conftest import require_reference


def test_labels_order_is_the_contract():
    assert LABELS == ("yes", "no", "maybe")


def test_load_pubmedqa_dev_counts(pubmedqa_dev):
    # counted from the file with a regex over the raw JSON, independently of the loader
    assert len(pubmedqa_dev) == 400
    counts = {label: sum(q.label == label for q in pubmedqa_dev) for label in LABELS}
    assert counts == {"yes": 232, "no": 120, "maybe": 48}
    assert len({q.qid for q in pubmedqa_dev}) == 400
    assert [int(q.qid) for q in pubmedqa_dev] == sorted(int(q.qid) for q in pubmedqa_dev)
    assert (pubmedqa_dev[0].qid, pubmedqa_dev[-1].qid) == ("2503176", "29112560")
    # 394 abstracts label a section RESULTS / ... RESULTS / FINDINGS
    assert sum(bool(q.results) for q in pubmedqa_dev) == 394


def test_load_pubmedqa_fields(pubmedqa_dev):
    first = pubmedqa_dev[0]
    assert first.question == "Inhibin: a new circulating marker of hydatidiform mole?"
    assert first.label == "yes"
    assert len(first.context) == 1877
    # its results section is "MEASUREMENTS AND MAIN RESULTS"
    assert len(first.results) == 1108
    assert first.results.startswith("Serum concentrations of inhibin, human chorionic")
    assert first.context.endswith(first.results)
    case_report = next(q for q in pubmedqa_dev if q.qid == "9488747")
    assert case_report.context.startswith("Apparent life-threatening events in infants")
    assert case_report.results == ""  # BACKGROUND, CASE REPORTS: no results section


def test_load_pubmedqa_never_reads_the_conclusion(pubmedqa_dev):
    raw = json.loads(require_reference("pubmedqa", "pqal_dev400.json").read_text())
    for q in pubmedqa_dev[:50]:
        conclusion = raw[q.qid]["LONG_ANSWER"]
        assert conclusion not in q.context


def test_load_pubmedqa_names_the_file_and_question(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"1": {"QUESTION": "q?", "CONTEXTS": ["c"], "LABELS": ["A"]}}))
    with pytest.raises(ValueError, match=r"bad.json: question 1: missing field 'final_decision'"):
        load_pubmedqa(bad)
    bad.write_text(
        json.dumps(
            {"7": {"QUESTION": "q?", "CONTEXTS": ["c"], "LABELS": ["A"], "final_decision": "y"}}
        )
    )
    with pytest.raises(ValueError, match=r"bad.json: question 7: label 'y'"):
        load_pubmedqa(bad)


def test_check_posteriors_accepts_and_casts():
    out = check_posteriors(np.array([[0.5, 0.25, 0.25], [0, 0, 1]], dtype=np.float64), 2, "r")
    assert out.dtype == np.float32
    assert out.shape == (2, 3)


@pytest.mark.parametrize(
    ("array", "n", "message"),
    [
        (np.ones((2, 3)) / 3, 3, r"reader cues: posteriors shape \(2, 3\), expected \(3, 3\)"),
        (np.array([[np.nan, 0.5, 0.5]]), 1, "reader cues: posteriors row 0 is not finite"),
        (np.array([[1.2, -0.2, 0.0]]), 1, "reader cues: posteriors row 0 has a negative"),
        (np.array([[0.3, 0.3, 0.3]]), 1, "reader cues: posteriors row 0 sums to 0.9000000"),
    ],
)
def test_check_posteriors_names_the_reader(array, n, message):
    with pytest.raises(ValueError, match=message):
        check_posteriors(array, n, "cues")


def test_truncate():
    assert truncate("abcdef", 3) == "abc"
    assert truncate("abc", 3) == "abc"
    assert truncate("abc", 0) == "abc"
    with pytest.raises(ValueError, match="truncation -1"):
        truncate("abc", -1)


def test_training_set_hash_ignores_order_and_sees_labels():
    questions = synthetic_questions(9)
    assert training_set_hash(questions) == training_set_hash(list(reversed(questions)))
    flipped = [replace(questions[0], label="no"), *questions[1:]]
    assert training_set_hash(flipped) != training_set_hash(questions)
    edited = [replace(questions[0], context=questions[0].context + "."), *questions[1:]]
    assert training_set_hash(edited) != training_set_hash(questions)


def test_labelled_question_rejects_unknown_label():
    with pytest.raises(ValueError, match="question q1: label 'perhaps'"):
        LabelledQuestion("q1", "q?", "c", "perhaps")


def test_folds_are_stratified_and_order_free():
    questions = synthetic_questions(30)  # 10 of each label
    folds = assign_folds(questions, 5, seed=3)
    assert np.bincount(folds).tolist() == [6, 6, 6, 6, 6]
    for label in LABELS:
        members = folds[[q.label == label for q in questions]]
        assert np.bincount(members, minlength=5).tolist() == [2, 2, 2, 2, 2]
    reordered = assign_folds(list(reversed(questions)), 5, seed=3)
    assert reordered.tolist() == folds[::-1].tolist()
    assert assign_folds(questions, 5, seed=4).tolist() != folds.tolist()


def test_folds_refuse_bad_inputs():
    with pytest.raises(ValueError, match="at least 2 folds"):
        assign_folds(synthetic_questions(6), 1, 0)
    with pytest.raises(ValueError, match="not unique"):
        assign_folds(synthetic_questions(3) * 2, 2, 0)


def test_fit_folds_trains_each_fold_on_the_others_and_refuses_a_shared_group():
    items = ["a1", "a2", "b1", "c1"]  # a group is the letter
    folds = np.array([0, 0, 1, 1])
    fitted = list(fit_folds(items, folds, 7, lambda train, s: (train, s), lambda x: x[0]))
    assert [(f, model, held.tolist()) for f, model, _, held in fitted] == [
        (0, (["b1", "c1"], 7), [0, 1]),
        (1, (["a1", "a2"], 8), [2, 3]),
    ]
    with pytest.raises(AssertionError, match="fold 0: a held-out item is in its training set"):
        list(fit_folds(items, np.array([0, 1, 1, 0]), 0, lambda t, s: s, lambda x: x[0]))


def test_macro_f1_of_a_confusion_matrix():
    # F1 per class: 2*2/(3+2) = 0.8, no true positive, no true positive
    assert macro_f1_of(np.array([[2, 1, 0], [0, 0, 1], [0, 0, 0]])) == pytest.approx(0.8 / 3)


def test_accuracy_and_macro_f1_exact():
    questions = synthetic_questions(6)  # yes no maybe yes no maybe
    # predicted: yes yes maybe yes no no
    posteriors = np.eye(3)[[0, 0, 2, 0, 1, 1]]
    assert accuracy(posteriors, questions) == pytest.approx(4 / 6)
    # F1 yes = 2*2/(4+1+0) = 0.8; no = 2*1/(2+1+1) = 0.5; maybe = 2*1/(2+0+1) = 2/3
    assert macro_f1(posteriors, questions) == pytest.approx((0.8 + 0.5 + 2 / 3) / 3)
