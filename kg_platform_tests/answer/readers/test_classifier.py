from __future__ import annotations

import json

import numpy as np
import pytest

from kg_platform.answer.readers import LABELS, cross_fit_posteriors, training_set_hash
from kg_platform.answer.readers.classifier import (
    ClassifierRecipe,
    content_hash,
    load_classifier,
    train_classifier,
)
from kg_platform_tests.answer.readers.conftest import synthetic_questions


@pytest.fixture(scope="module")
def recipe(tiny_bert) -> ClassifierRecipe:
    return ClassifierRecipe(
        base_model=str(tiny_bert),
        epochs=30,
        learning_rate=5e-3,
        batch_size=8,
        max_length=32,
        torch_threads=1,
    )


@pytest.fixture(scope="module")
def trained(recipe):
    return train_classifier(synthetic_questions(24), seed=7, recipe=recipe)


def state_bytes(reader) -> dict[str, bytes]:
    return {k: v.detach().cpu().numpy().tobytes() for k, v in reader.model.state_dict().items()}


def test_training_is_reproducible_to_the_bit(recipe, trained, tmp_path):
    again = train_classifier(synthetic_questions(24), seed=7, recipe=recipe)
    assert state_bytes(again) == state_bytes(trained)
    questions = synthetic_questions(24)
    texts = [q.context for q in questions]
    first = trained.posteriors(questions[0].question, texts)
    assert np.array_equal(again.posteriors(questions[0].question, texts), first)
    assert trained.save(tmp_path / "a") == again.save(tmp_path / "b")


def test_seed_changes_the_model(recipe, trained):
    other = train_classifier(synthetic_questions(24), seed=8, recipe=recipe)
    assert state_bytes(other) != state_bytes(trained)


def test_training_does_not_touch_the_callers_rng(recipe):
    import torch

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    train_classifier(synthetic_questions(6), seed=1, recipe=replace_epochs(recipe, 1))
    assert torch.equal(torch.rand(3), expected)


def replace_epochs(recipe: ClassifierRecipe, epochs: int) -> ClassifierRecipe:
    from dataclasses import replace

    return replace(recipe, epochs=epochs)


def test_posteriors_contract(trained):
    out = trained.posteriors("does the treatment work", ["improved", "", "unclear dose"])
    assert out.dtype == np.float32
    assert out.shape == (3, 3)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-6)
    assert trained.posteriors("q", []).shape == (0, 3)
    with pytest.raises(ValueError, match="got one string"):
        trained.posteriors("q", "improved")


def test_learns_the_cue_word(trained):
    questions = synthetic_questions(24)
    predicted = trained.score_pairs([q.question for q in questions], [q.context for q in questions])
    gold = np.array([LABELS.index(q.label) for q in questions])
    # the synthetic label is one cue word, which the tiny model learns
    assert (predicted.argmax(axis=1) == gold).mean() == 1.0


def test_batched_scoring_matches_one_at_a_time(trained):
    questions = synthetic_questions(12)
    texts = [q.context for q in questions]
    batched = trained.score_pairs([q.question for q in questions], texts)
    single = np.concatenate([trained.posteriors(q.question, [q.context]) for q in questions])
    np.testing.assert_allclose(batched, single, atol=1e-5)


def test_save_load_round_trip_and_metadata(trained, recipe, tmp_path):
    digest = trained.save(tmp_path / "model")
    assert digest == content_hash(tmp_path / "model")
    metadata = json.loads((tmp_path / "model" / "reader.json").read_text())
    assert metadata["training_set_hash"] == training_set_hash(synthetic_questions(24))
    assert metadata["seed"] == 7
    assert metadata["recipe"] == recipe.to_dict()
    assert metadata["labels"] == list(LABELS)
    assert metadata["n_train"] == 24
    loaded = load_classifier(tmp_path / "model", device="cpu")
    texts = ["improved trial", "unchanged", "unclear week rate"]
    np.testing.assert_array_equal(
        loaded.posteriors("does the treatment work", texts),
        trained.posteriors("does the treatment work", texts),
    )
    assert loaded.recipe == recipe


def test_content_hash_sees_every_byte(trained, tmp_path):
    digest = trained.save(tmp_path / "model")
    (tmp_path / "model" / "reader.json").write_text("{}")
    assert content_hash(tmp_path / "model") != digest


def test_loads_any_sequence_classifier_and_reorders_labels(tiny_bert, tmp_path):
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    config = BertConfig.from_pretrained(str(tiny_bert))
    config.num_labels = 3
    config.id2label = {0: "maybe", 1: "Yes", 2: "no"}
    config.label2id = {v: k for k, v in config.id2label.items()}
    torch.manual_seed(5)
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(str(tmp_path / "hf"))
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert))
    tokenizer.save_pretrained(str(tmp_path / "hf"))

    reader = load_classifier(tmp_path / "hf", device="cpu")
    out = reader.posteriors("does the treatment work", ["improved dose"])
    with torch.inference_mode():
        batch = tokenizer("does the treatment work", "improved dose", return_tensors="pt")
        probs = torch.softmax(model(**batch).logits.double(), dim=-1)[0].numpy()
    np.testing.assert_allclose(out[0], probs[[1, 2, 0]], atol=1e-6)


def test_refuses_a_two_label_model(tiny_bert, tmp_path):
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    config = BertConfig.from_pretrained(str(tiny_bert))
    config.num_labels = 2
    BertForSequenceClassification(config).save_pretrained(str(tmp_path / "two"))
    AutoTokenizer.from_pretrained(str(tiny_bert)).save_pretrained(str(tmp_path / "two"))
    with pytest.raises(ValueError, match="2 labels, a reader needs 3"):
        load_classifier(tmp_path / "two", device="cpu")


def test_cross_fit_scores_each_question_with_a_model_blind_to_it(recipe):
    questions = synthetic_questions(12)
    quick = replace_epochs(recipe, 2)
    hashes: dict[int, str] = {}
    fit = cross_fit_posteriors(
        questions,
        k=3,
        seed=11,
        recipe=quick,
        candidates_fn=lambda q: [q.context, ""],
        on_fold=lambda fold, reader: hashes.update({fold: reader.metadata["training_set_hash"]}),
    )
    assert fit.qids == tuple(q.qid for q in questions)
    assert [p.shape for p in fit.posteriors] == [(2, 3)] * 12
    for fold in range(3):
        train = [q for q, f in zip(questions, fit.folds, strict=True) if f != fold]
        assert hashes[fold] == training_set_hash(train)
    # the same posteriors come from a model trained on the complement with seed + fold
    fold0 = [q for q, f in zip(questions, fit.folds, strict=True) if f != 0]
    model = train_classifier(fold0, seed=11, recipe=quick)
    held = [i for i, f in enumerate(fit.folds) if f == 0]
    for i in held:
        expected = model.posteriors(questions[i].question, [questions[i].context, ""])
        np.testing.assert_allclose(fit.posteriors[i], expected, atol=1e-6)


def test_packaged_minilm_trains_a_three_way_head(pubmedqa_dev, tmp_path):
    recipe = ClassifierRecipe(epochs=1, batch_size=4, max_length=48, torch_threads=1)
    reader = train_classifier(pubmedqa_dev[:8], seed=0, recipe=recipe)
    assert reader.metadata["base_model"].startswith("model:")
    out = reader.posteriors(pubmedqa_dev[9].question, [pubmedqa_dev[9].context, ""])
    assert out.shape == (2, 3)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-6)
    reader.save(tmp_path / "minilm")
    again = load_classifier(tmp_path / "minilm", device="cpu")
    np.testing.assert_array_equal(
        again.posteriors(pubmedqa_dev[9].question, [pubmedqa_dev[9].context]), out[:1]
    )
