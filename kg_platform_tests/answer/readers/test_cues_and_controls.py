from __future__ import annotations

import numpy as np
import pytest

from kg_platform.answer.readers import LABELS, accuracy, cross_fit_posteriors, training_set_hash
from kg_platform.answer.readers.controls import (
    BlindReader,
    MajorityRecipe,
    shuffle_labels,
    train_majority,
)
from kg_platform.answer.readers.crossfit import shuffled_label_cross_fit
from kg_platform.answer.readers.cues import CueRecipe, load_cue_reader, train_cue_reader
from kg_platform_tests.answer.readers.conftest import synthetic_questions

RECIPE = CueRecipe(C=10.0)


def test_cue_reader_on_real_questions(pubmedqa_dev, tmp_path):
    subset = pubmedqa_dev[:40]
    reader = train_cue_reader(subset, seed=0, recipe=RECIPE)
    again = train_cue_reader(subset, seed=0, recipe=RECIPE)
    texts = [q.text(RECIPE.text_field) for q in pubmedqa_dev[40:50]]
    out = reader.posteriors(pubmedqa_dev[40].question, texts)
    assert out.dtype == np.float32 and out.shape == (10, 3)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(again.posteriors(pubmedqa_dev[40].question, texts), out)
    assert reader.metadata["training_set_hash"] == training_set_hash(subset)
    cues = reader.top_cues(5)
    assert set(cues) == set(LABELS) and all(len(v) == 5 for v in cues.values())
    reader.save(tmp_path / "cues")
    loaded = load_cue_reader(tmp_path / "cues")
    np.testing.assert_array_equal(loaded.posteriors(pubmedqa_dev[40].question, texts), out)


def test_cue_text_prefers_results():
    question = synthetic_questions(1)[0]
    assert question.text(CueRecipe().text_field) == question.results
    assert question.text(CueRecipe(text_field="context").text_field) == question.context


def test_cross_fit_learns_cues_and_shuffled_labels_do_not():
    questions = synthetic_questions(60)
    real = cross_fit_posteriors(questions, 5, 0, RECIPE, lambda q: [q.context])
    # the label is one cue word: out-of-fold the cue reader reads it every time
    assert accuracy(real.first(), questions) == 1.0
    runs = shuffled_label_cross_fit(questions, 5, [1, 2, 3], RECIPE, lambda q: [q.context])
    assert [run.seed for run in runs] == [1, 2, 3]
    for run in runs:
        # trained on permuted labels, scored on the true ones: no better than chance
        assert accuracy(run.cross_fit.first(), questions) < 0.6


def test_shuffle_labels_keeps_counts_and_breaks_the_link():
    questions = synthetic_questions(30)
    permuted = shuffle_labels(questions, 4)
    assert sorted(q.label for q in permuted) == sorted(q.label for q in questions)
    assert [q.context for q in permuted] == [q.context for q in questions]
    assert [q.label for q in permuted] != [q.label for q in questions]
    assert shuffle_labels(questions, 4) == permuted


def test_majority_is_the_training_prior(pubmedqa_dev):
    reader = train_majority(pubmedqa_dev)
    np.testing.assert_allclose(reader.prior, np.array([232, 120, 48]) / 400, rtol=1e-6)
    assert reader.label == "yes"
    out = reader.posteriors("any question", ["a", "b"])
    assert out.shape == (2, 3) and np.array_equal(out[0], out[1])
    fit = cross_fit_posteriors(pubmedqa_dev, 5, 0, MajorityRecipe(), lambda q: [""])
    assert accuracy(fit.first(), pubmedqa_dev) == 232 / 400


def test_blind_reader_hides_the_texts():
    questions = synthetic_questions(30)
    reader = train_cue_reader(questions, 0, CueRecipe(text_field="context", min_df=1))
    blind = BlindReader(reader)
    texts = ["improved", "unchanged", "unclear"]
    np.testing.assert_array_equal(
        blind.posteriors("does the treatment work", texts),
        reader.posteriors("does the treatment work", ["", "", ""]),
    )
    with pytest.raises(ValueError, match="blind\\(cues\\)"):
        blind.posteriors("q", "improved")
