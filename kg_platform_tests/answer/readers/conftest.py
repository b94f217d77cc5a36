"""Tiny models built from configs, and small labelled question sets, for the reader tests.
Nothing is downloaded: every model is written to a temporary folder by the test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from kg_platform.answer.readers.base import LABELS, LabelledQuestion, load_pubmedqa
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.embeddings.models import build_tiny_bert

# cue words that decide the synthetic labels, and filler shared by every class
CUES = {"yes": "improved", "no": "unchanged", "maybe": "unclear"}
FILLER = ["patients", "trial", "outcome", "dose", "group", "score", "week", "rate"]
WORDS = [*LABELS, *(w.capitalize() for w in LABELS), *CUES.values(), *FILLER]
WORDS += ["does", "the", "treatment", "work", "abstract", "question", "answer", "with", "or"]


def synthetic_questions(n: int = 36) -> list[LabelledQuestion]:
    """``n`` questions whose label is stated by one cue word in the context."""
    out = []
    for i in range(n):
        label = LABELS[i % 3]
        filler = " ".join(FILLER[(i + j) % len(FILLER)] for j in range(3 + i % 4))
        out.append(
            LabelledQuestion(
                qid=f"q{i:03d}",
                question=f"does the treatment work {FILLER[i % len(FILLER)]}",
                context=f"{filler} {CUES[label]} {filler}",
                label=label,
                results=f"{CUES[label]} {FILLER[i % len(FILLER)]}",
            )
        )
    return out


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models on a shared 2-core machine: one thread is faster than two that spin."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def pubmedqa_dev() -> list[LabelledQuestion]:
    return load_pubmedqa(require_reference("pubmedqa", "pqal_dev400.json"))


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    """A 2-layer BERT encoder (no head) with a word-piece vocabulary of the test words."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted({w.lower() for w in WORDS})]
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), vocab=vocab, seed=0)


def word_level_tokenizer(words: list[str]):
    """A whitespace word-level fast tokenizer over ``words`` (case kept)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[BOS]", "[EOS]"])}
    for word in words:
        vocab.setdefault(word, len(vocab))
    backend = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="[PAD]",
        bos_token="[BOS]",
        eos_token="[EOS]",
    )


def build_tiny_causal_lm(folder: Path, kind: str, words: list[str], chat: bool = False) -> Path:
    """Save a randomly initialised 2-layer GPT-2 or Llama and its tokenizer to ``folder``."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    tokenizer = word_level_tokenizer(words)
    if chat:
        tokenizer.chat_template = (
            "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} {% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}"
        )
    size = len(tokenizer)
    torch.manual_seed(0)
    if kind == "gpt2":
        config = GPT2Config(vocab_size=size, n_positions=256, n_embd=32, n_layer=2, n_head=2)
        model = GPT2LMHeadModel(config)
    else:
        config = LlamaConfig(
            vocab_size=size,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=256,
        )
        model = LlamaForCausalLM(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder
