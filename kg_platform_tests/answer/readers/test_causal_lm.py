from __future__ import annotations

import numpy as np
import pytest

from kg_platform.answer.readers.causal_lm import CausalLMReader, label_token_ids, user_prompt
from kg_platform.answer.readers.controls import BlindReader
from kg_platform_tests.answer.readers.conftest import (
    WORDS,
    build_tiny_causal_lm,
    word_level_tokenizer,
)

PROMPT_WORDS = [*WORDS, "Abstract", "Question", "Answer", "Reply", "exactly", "one", "word"]
TEXTS = [
    "patients improved",
    "",
    "trial outcome dose group unchanged week rate score patients trial outcome",
    "unclear",
    "dose group score week",
]


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def tiny_lm(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"tiny-{request.param}")
    return build_tiny_causal_lm(folder, request.param, PROMPT_WORDS)


def test_rows_are_distributions(tiny_lm):
    reader = CausalLMReader(tiny_lm, device="cpu", batch_size=2)
    out = reader.posteriors("does the treatment work", TEXTS)
    assert out.dtype == np.float32
    assert out.shape == (len(TEXTS), 3)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-6)
    assert reader.keeps_one_logit
    assert not reader.uses_chat_template


def test_length_sorted_batches_match_one_at_a_time(tiny_lm):
    batched = CausalLMReader(tiny_lm, device="cpu", batch_size=4)
    single = CausalLMReader(tiny_lm, device="cpu", batch_size=1)
    questions = ["does the treatment work", "does the dose work with patients"] * 3
    texts = [*TEXTS, "rate"]
    one_by_one = np.concatenate(
        [single.posteriors(q, [t]) for q, t in zip(questions, texts, strict=True)]
    )
    np.testing.assert_allclose(batched.score_pairs(questions, texts), one_by_one, atol=1e-5)


def test_posteriors_are_the_renormalised_label_mass(tiny_lm):
    import torch

    reader = CausalLMReader(tiny_lm, device="cpu")
    question, text = "does the treatment work", "patients improved"
    ids = reader.prompt_ids(question, text)
    with torch.inference_mode():
        logits = reader.model(input_ids=torch.tensor([ids])).logits[0, -1].double()
    probs = torch.softmax(logits, dim=-1).numpy()
    mass = np.array([probs[list(label_ids)].sum() for label_ids in reader.label_ids])
    np.testing.assert_allclose(reader.posteriors(question, [text])[0], mass / mass.sum(), atol=1e-6)


def test_label_tokens_cover_both_cases(tiny_lm):
    reader = CausalLMReader(tiny_lm, device="cpu")
    vocab = reader.tokenizer.get_vocab()
    # a word-level vocabulary: " yes" is the same token as "yes"
    assert reader.label_ids == (
        (vocab["yes"], vocab["Yes"]),
        (vocab["no"], vocab["No"]),
        (vocab["maybe"], vocab["Maybe"]),
    )


def test_refuses_a_vocabulary_without_a_label_word():
    tokenizer = word_level_tokenizer(["yes", "no", "perhaps"])
    with pytest.raises(ValueError, match="tiny: no single token spells 'maybe'"):
        label_token_ids(tokenizer, "tiny")


def test_chat_template_is_used_when_present(tmp_path):
    folder = build_tiny_causal_lm(tmp_path / "chat", "llama", PROMPT_WORDS, chat=True)
    reader = CausalLMReader(folder, device="cpu")
    assert reader.uses_chat_template
    prompt = reader.prompt("does the treatment work", "patients improved")
    assert prompt.startswith("<system> You answer biomedical research questions")
    assert prompt.endswith("Answer with yes, no or maybe. <assistant>")
    out = reader.posteriors("does the treatment work", TEXTS)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-6)


def test_blind_reader_reads_the_question_only(tiny_lm):
    reader = CausalLMReader(tiny_lm, device="cpu")
    blind = BlindReader(reader)
    assert blind.name == f"blind({reader.name})"
    out = blind.posteriors("does the treatment work", TEXTS[:3])
    expected = reader.posteriors("does the treatment work", ["", "", ""])
    np.testing.assert_array_equal(out, expected)
    assert "Abstract" not in user_prompt("does the treatment work", "")


def test_truncation_is_in_characters(tiny_lm):
    reader = CausalLMReader(tiny_lm, device="cpu", truncation_chars=8)
    assert reader.prompt("q", "patients improved") == reader.prompt("q", "patients")
