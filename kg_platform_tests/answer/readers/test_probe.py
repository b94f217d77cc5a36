"""The probe reader: a frozen encoder (here a tiny BERT the test session builds) and a
logistic-regression head on [q, t, q*t, |q-t|]."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from kg_platform.answer.readers import (
    LABELS,
    accuracy,
    assign_folds,
    cross_fit_posteriors,
    training_set_hash,
)
from kg_platform.answer.readers.base import content_hash
from kg_platform.answer.readers.controls import BlindReader, shuffle_labels
from kg_platform.answer.readers.crossfit import shuffled_label_cross_fit
from kg_platform.answer.readers.loading import load_reader, reader_kind
from kg_platform.answer.readers.probe import (
    ProbeReader,
    ProbeRecipe,
    clear_embedding_cache,
    embed_texts,
    frozen_encoder,
    load_probe_reader,
    pair_features,
    train_probe,
)
from kg_platform.answer.readers.registry import train_reader
from kg_platform_tests.answer.readers.conftest import synthetic_questions


@pytest.fixture(scope="module")
def recipe(tiny_bert) -> ProbeRecipe:
    return ProbeRecipe(
        encoder=str(tiny_bert), pooling="windows", features=("q", "t", "prod", "diff"), C=10.0
    )


@pytest.fixture(scope="module")
def real_probe(recipe, pubmedqa_dev) -> ProbeReader:
    return train_probe(pubmedqa_dev[:40], seed=0, recipe=recipe)


def test_training_on_real_questions_is_reproducible_to_the_bit(
    recipe, real_probe, pubmedqa_dev, tmp_path
):
    subset = pubmedqa_dev[:40]
    first = real_probe.save(tmp_path / "a")
    assert first == content_hash(tmp_path / "a")
    # the same (questions, seed, recipe) with every cached vector recomputed
    clear_embedding_cache()
    again = train_probe(subset, seed=0, recipe=recipe)
    assert again.save(tmp_path / "b") == first
    for name in ("probe.json", "reader.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    metadata = real_probe.metadata
    assert metadata["training_set_hash"] == training_set_hash(subset)
    assert metadata["n_train"] == 40
    # 4 parts x the tiny encoder's 32 dimensions
    assert metadata["n_features"] == 128
    assert metadata["label_counts"] == {
        label: sum(q.label == label for q in subset) for label in LABELS
    }
    assert metadata["encoder"] == frozen_encoder(recipe.encoder).fingerprint
    # the input order does not change the model
    assert train_probe(subset[::-1], seed=0, recipe=recipe).save(tmp_path / "c") == first


def test_posteriors_contract(real_probe, pubmedqa_dev):
    texts = [q.context for q in pubmedqa_dev[40:50]] + [""]
    out = real_probe.posteriors(pubmedqa_dev[40].question, texts)
    assert out.dtype == np.float32 and out.shape == (11, 3)
    np.testing.assert_allclose(out.sum(axis=1, dtype=np.float64), 1.0, atol=1e-6)
    assert real_probe.posteriors("q", []).shape == (0, 3)
    with pytest.raises(ValueError, match="got one string"):
        real_probe.posteriors("q", "improved")
    # scored in one batch or one at a time: the same bits
    alone = np.vstack([real_probe.posteriors(pubmedqa_dev[40].question, [t]) for t in texts])
    np.testing.assert_array_equal(alone, out)


def test_saved_folder_reloads_and_reproduces(real_probe, pubmedqa_dev, tmp_path):
    real_probe.save(tmp_path / "probe")
    assert reader_kind(tmp_path / "probe") == "probe"
    loaded = load_reader(tmp_path / "probe")
    assert isinstance(loaded, ProbeReader) and loaded.name == "probe"
    texts = [q.context for q in pubmedqa_dev[50:60]]
    np.testing.assert_array_equal(
        loaded.posteriors(pubmedqa_dev[50].question, texts),
        real_probe.posteriors(pubmedqa_dev[50].question, texts),
    )
    # a probe whose recorded encoder is not the one its recipe opens is refused
    metadata = json.loads((tmp_path / "probe" / "reader.json").read_text())
    metadata["encoder"] = "other:0000"
    (tmp_path / "probe" / "reader.json").write_text(json.dumps(metadata))
    with pytest.raises(ValueError, match="trained on encoder other:0000"):
        load_probe_reader(tmp_path / "probe")


def test_long_texts_are_read_in_windows_each_embedded_once(recipe, pubmedqa_dev):
    encoder = frozen_encoder(recipe.encoder)
    # the tiny encoder's window is its 64 positions
    assert encoder.window == 64
    text = pubmedqa_dev[0].context
    windows = encoder._windows(text)
    assert len(windows) > 2 and all(len(w) == 64 for w in windows[:-1])
    clear_embedding_cache()
    before = encoder.embedded
    pooled = embed_texts(encoder, [text, text], "windows")
    assert encoder.embedded - before == len(windows)
    np.testing.assert_array_equal(pooled[0], pooled[1])
    np.testing.assert_allclose(np.linalg.norm(pooled[0]), 1.0, rtol=1e-6)
    # a truncation that keeps the first windows whole embeds only its last one again
    cut = len(encoder.tokenizer.decode(windows[0][1:-1]))
    before = encoder.embedded
    embed_texts(encoder, [text[: cut + 40]], "windows")
    assert encoder.embedded - before <= 1
    first = embed_texts(encoder, [text], "first")[0]
    assert not np.array_equal(first, pooled[0])
    # every window embedded alone: the same vector as the first window's pooled alone
    np.testing.assert_allclose(
        first,
        encoder._window_vector(windows[0]) / np.linalg.norm(encoder._window_vector(windows[0])),
    )


def test_sentence_pooling_embeds_each_sentence(recipe):
    encoder = frozen_encoder(recipe.encoder)
    clear_embedding_cache()
    before = encoder.embedded
    embed_texts(
        encoder, ["Patients improved. Dose unchanged! Outcome unclear? 3 trial week"], "sentences"
    )
    assert encoder.embedded - before == 4


def test_max_pooling_takes_the_largest_token_state_of_any_window(recipe, pubmedqa_dev):
    import torch

    encoder = frozen_encoder(recipe.encoder)
    text = pubmedqa_dev[1].context
    windows = encoder._windows(text)
    assert len(windows) > 1
    states = []
    with torch.inference_mode():
        for ids in windows:
            ids = torch.tensor([ids])
            hidden = encoder.encoder.model(input_ids=ids, attention_mask=torch.ones_like(ids))[0]
            states.append(hidden[0, 1:-1])
    expected = torch.cat(states).max(dim=0).values.numpy()
    np.testing.assert_array_equal(embed_texts(encoder, [text], "max")[0], expected)
    probe = train_probe(pubmedqa_dev[:30], 0, replace(recipe, pooling="max", features=("t",)))
    assert probe.metadata["n_features"] == 32
    out = probe.posteriors(pubmedqa_dev[30].question, [text, ""])
    np.testing.assert_allclose(out.sum(axis=1, dtype=np.float64), 1.0, atol=1e-6)


def test_features():
    q = np.array([[1.0, 2.0]])
    t = np.array([[3.0, -1.0]])
    assert pair_features(q, t, ("q", "t", "prod", "diff", "cos")).tolist() == [
        [1.0, 2.0, 3.0, -1.0, 3.0, -2.0, 2.0, 3.0, 1.0]
    ]
    with pytest.raises(ValueError, match="features"):
        ProbeRecipe(features=("q", "q"))
    with pytest.raises(ValueError, match="pooling"):
        ProbeRecipe(pooling="median")
    # a JSON recipe gives a list; the recipe is the same
    assert ProbeRecipe(features=["t", "prod"]) == ProbeRecipe(features=("t", "prod"))


def test_cross_fit_learns_the_cue_word_and_shuffled_labels_do_not(recipe):
    questions = synthetic_questions(60)
    real = cross_fit_posteriors(questions, 5, 0, recipe, lambda q: [q.context])
    real_accuracy = accuracy(real.first(), questions)
    assert real_accuracy == 1.0
    runs = shuffled_label_cross_fit(questions, 5, [1, 2, 3], recipe, lambda q: [q.context])
    shuffled = [accuracy(run.cross_fit.first(), questions) for run in runs]
    # trained on permuted labels, scored on the true ones: chance is 1/3
    assert [round(a * 60) for a in shuffled] == [22, 25, 20]


def test_blind_probe_reads_the_question_only(recipe):
    questions = synthetic_questions(30)
    probe = train_reader(questions, 0, recipe)
    blind = BlindReader(probe)
    out = blind.posteriors(questions[0].question, [q.context for q in questions[:5]])
    assert (out == out[0]).all()
    np.testing.assert_array_equal(out[0], probe.posteriors(questions[0].question, [""])[0])


def test_cross_fitting_never_scores_a_question_with_a_model_that_saw_its_label(
    recipe, pubmedqa_dev
):
    # labels carry no signal: a model that saw them memorises them, a held-out one cannot
    questions = shuffle_labels(pubmedqa_dev[:40], seed=11)
    strong = replace(recipe, C=1e4, standardise=True)
    in_sample = train_probe(questions, 0, strong)
    seen = np.vstack([in_sample.posteriors(q.question, [q.context]) for q in questions])
    assert accuracy(seen, questions) == 1.0
    trained_on: dict[int, set[str]] = {}
    cross = cross_fit_posteriors(
        questions,
        5,
        0,
        strong,
        lambda q: [q.context],
        on_fold=lambda fold, reader: trained_on.setdefault(fold, reader.metadata["n_train"]),
    )
    folds = assign_folds(questions, 5, 0)
    for fold, n_train in trained_on.items():
        assert n_train == int((folds != fold).sum())
    # each fold model's training-set hash is that of the other folds' questions only
    for fold in range(5):
        others = [q for q, f in zip(questions, folds, strict=True) if f != fold]
        model = train_probe(others, fold, strong)
        held = [i for i, f in enumerate(folds) if f == fold]
        for i in held:
            np.testing.assert_array_equal(
                cross.posteriors[i],
                model.posteriors(questions[i].question, [questions[i].context]),
            )
    # out of fold the memorised labels are worth nothing: 18 of 40, below the 24 of "yes"
    assert round(accuracy(cross.first(), questions) * 40) == 18
