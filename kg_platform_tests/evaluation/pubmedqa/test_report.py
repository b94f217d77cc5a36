from __future__ import annotations

import json

import numpy as np
import pytest

from kg_platform.answer.readers.controls import BlindReader
from kg_platform.evaluation.common.posteriors import Configuration, selective_accuracy
from kg_platform.evaluation.common.stats import auroc
from kg_platform.evaluation.pubmedqa.candidates import build_candidates, pool_from_questions
from kg_platform.evaluation.pubmedqa.posterior_cache import build_posterior_cache
from kg_platform.evaluation.pubmedqa.report import (
    BIAS_GRID,
    BIAS_STEP,
    build_pubmedqa_report,
    fit_class_bias,
    score,
    select_configuration,
    write_pubmedqa_report,
)
from kg_platform_tests.evaluation.pubmedqa.fixtures import LexicalReader, dev_questions


class ShuffledLexical(LexicalReader):
    """The lexical reader with its label columns permuted: it cannot know the answer."""

    def posteriors(self, question, texts):
        return super().posteriors(question, texts)[:, [2, 0, 1]]


def test_class_bias_flags_the_grid_edge():
    gold = np.array([1, 1])
    # log(p_yes / p_no) = 2.97: only b_no = 3.00, the grid's last point, flips the argmax
    ratio = np.exp(2.97)
    edge = np.array([[ratio, 1.0, 1e-6]] * 2) / (ratio + 1.0 + 1e-6)
    fitted = fit_class_bias(edge, gold)
    assert fitted.bias == (0.0, 3.0, 0.0) and fitted.accuracy == 1.0 and fitted.at_grid_edge
    inside = np.array([[np.exp(0.98), 1.0, 1e-6]] * 2) / (np.exp(0.98) + 1.0 + 1e-6)
    fitted = fit_class_bias(inside, gold)
    assert fitted.bias == (0.0, 1.0, 0.0) and not fitted.at_grid_edge


def test_selection_never_picks_oracle_or_controls():
    scores = {
        Configuration("lexical", "oracle", 3000, "mean@1"): 0.99,
        Configuration("blind(lexical)", "retrieved", 3000, "mean@1"): 0.98,
        Configuration("majority", "retrieved", 3000, "mean@1"): 0.97,
        Configuration("shuffled-1", "leak_free", 3000, "mean@1"): 0.96,
        Configuration("lexical", "leak_free", 3000, "mean@3"): 0.60,
        Configuration("lexical", "retrieved", 1100, "mean@1"): 0.61,
    }
    assert select_configuration(scores) == Configuration("lexical", "retrieved", 1100, "mean@1")
    only_arms = {c: v for c, v in scores.items() if not c.selectable}
    with pytest.raises(ValueError, match="no selectable configuration"):
        select_configuration(only_arms)


def test_scores_exact_and_bootstrap_deterministic():
    gold = np.array([0, 0, 0, 1, 1, 2])
    predicted = np.array([0, 0, 1, 1, 0, 0])
    s = score(predicted, gold, seed=7, resamples=2000)
    assert s.accuracy == pytest.approx(3 / 6)
    assert s.confusion == [[2, 1, 0], [1, 1, 0], [1, 0, 0]]
    assert s.recall == {"yes": 2 / 3, "no": 0.5, "maybe": 0.0}
    # F1 yes 4/7, no 1/2, maybe 0
    assert s.macro_f1 == pytest.approx((4 / 7 + 0.5) / 3)
    assert score(predicted, gold, seed=7, resamples=2000).ci95 == s.ci95
    assert s.ci95[0] <= 0.5 <= s.ci95[1]


def test_auroc_and_selective_accuracy_exact():
    assert auroc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == 0.75
    assert auroc(np.array([0.5, 0.5]), np.array([1, 0])) == 0.5
    assert auroc(np.array([0.5]), np.array([1])) is None
    correct = np.array([1, 1, 0, 0], dtype=np.int8)
    confidence = np.array([0.9, 0.8, 0.7, 0.6])
    certified = np.array([False, True, True, False])
    out = selective_accuracy(correct, confidence, certified)
    assert out["matched_coverage"] == [
        {"coverage": 0.5, "n": 2, "reader_confidence": 1.0, "graph_certification": 0.5}
    ]
    assert out["auroc_reader_confidence"] == 1.0
    assert out["auroc_graph_certification"] == 0.5


@pytest.fixture(scope="module")
def caches():
    questions = dev_questions()
    pool = pool_from_questions(questions)
    dev, test = questions[:30], questions[30:60]
    out = {}
    for split, subset in (("dev", dev), ("test", test)):
        candidates = build_candidates(subset, pool)
        tables = []
        for reader in (
            LexicalReader(),
            BlindReader(LexicalReader()),
            ShuffledLexical("shuffled-1"),
        ):
            for truncation in (1100, 3000):
                tables.append(build_posterior_cache(reader, subset, candidates, truncation, "cfg"))
        out[split] = (tables, {q.qid: q.label for q in subset})
    return out


def test_report_end_to_end(caches, tmp_path):
    dev_tables, dev_labels = caches["dev"]
    test_tables, test_labels = caches["test"]
    certification = np.arange(30) % 2 == 0
    report = build_pubmedqa_report(
        dev_tables, test_tables, dev_labels, test_labels, certification, seed=0, resamples=500
    )
    assert report["test"]["n"] == 30
    assert report["test"]["setting"] in ("retrieved", "leak_free")
    assert set(report["test"]) >= {"n", "setting", "accuracy", "ci95", "macro_f1"}
    assert set(report["settings"]) == {"oracle", "retrieved", "leak_free"}
    assert report["selected_configuration"]["reader"] == "lexical"
    assert report["controls"]["shuffled_label_n"] == 2 * 2 * 3  # settings x truncations x rules
    assert report["controls"]["majority"] == sum(v == "yes" for v in test_labels.values()) / 30
    assert report["controls"]["blind"] is not None
    assert len(report["truncation_sweep"]) == 2
    # every TEST question lands in exactly one error-budget cell per setting
    for per_class in report["error_budget"].values():
        assert sum(sum(cell.values()) for cell in per_class.values()) == 30
    assert sum(report["error_budget"]["leak_free"][g]["distraction"] for g in ("yes", "no")) == 0
    assert report["selective"]["matched_coverage"][0]["n"] == 15
    again = build_pubmedqa_report(
        dev_tables, test_tables, dev_labels, test_labels, certification, seed=0, resamples=500
    )
    assert again == report
    written = write_pubmedqa_report(tmp_path / "out", report)
    assert sorted(p.rsplit("/", 1)[1] for p in written) == [
        "confusion.png",
        "dev_vs_test.png",
        "report.json",
        "report.md",
        "settings.png",
        "truncation_sweep.png",
    ]
    assert (
        json.loads((tmp_path / "out" / "report.json").read_text())["selected"] == report["selected"]
    )
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert markdown.count("data:image/png;base64,") == 4


def test_the_bias_grid_runs_from_minus_3_to_3_in_its_declared_step():
    assert (BIAS_GRID[0], BIAS_GRID[-1], len(BIAS_GRID)) == (-3.0, 3.0, 121)
    assert np.diff(BIAS_GRID).round(2).tolist() == [BIAS_STEP] * 120
