"""Causal language model with constrained decoding over the three label tokens.

Any local Hugging Face causal-LM folder. The prompt goes through the tokenizer's chat
template when it has one; the next-token distribution is read at one position
(``logits_to_keep=1`` where the model's forward takes it); the probability mass of the
label words (yes/Yes, no/No, maybe/Maybe, with and without a leading space, wherever each is
a single token) is summed per label and renormalised over the three. Prompts are scored in
length-sorted, left-padded batches, on CUDA when present.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kg_platform.answer.readers.base import (
    LABELS,
    PairReader,
    check_pairs,
    check_posteriors,
    normalise_rows,
    truncate,
)
from kg_platform.embeddings.encoder import pick_device

SYSTEM_PROMPT = (
    "You answer biomedical research questions from the abstract you are given. "
    "Reply with exactly one word: yes, no or maybe."
)
READER_KIND = "causal-lm"


def user_prompt(question: str, text: str) -> str:
    """The user turn: the abstract (absent for the blind control), then the question."""
    ask = f"Question: {question}\nAnswer with yes, no or maybe."
    return f"Abstract: {text}\n\n{ask}" if text else ask


def label_token_ids(tokenizer: Any, source: str = "tokenizer") -> tuple[tuple[int, ...], ...]:
    """For each of ``LABELS``, the ids of its single-token spellings (lower and capitalised,
    with and without a leading space). Raises ValueError naming ``source`` when a label has
    none, or when two labels share a token."""
    unk = getattr(tokenizer, "unk_token_id", None)
    ids_per_label = []
    for label in LABELS:
        ids: list[int] = []
        for spelling in (label, label.capitalize(), f" {label}", f" {label.capitalize()}"):
            encoded = tokenizer.encode(spelling, add_special_tokens=False)
            if len(encoded) != 1 or encoded[0] == unk or encoded[0] in ids:
                continue
            # a single token must also read back as the word, not as a fragment of it
            if tokenizer.decode(encoded).strip().lower() == label:
                ids.append(int(encoded[0]))
        if not ids:
            raise ValueError(f"{source}: no single token spells {label!r}; cannot constrain")
        ids_per_label.append(tuple(ids))
    flat = [i for ids in ids_per_label for i in ids]
    if len(flat) != len(set(flat)):
        raise ValueError(f"{source}: two labels share a token id: {ids_per_label}")
    return tuple(ids_per_label)


class CausalLMReader(PairReader):
    """A local causal LM read at the answer position; ``posteriors`` is the reader contract."""

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        device: str = "auto",
        batch_size: int = 8,
        truncation_chars: int = 3000,
        system_prompt: str = SYSTEM_PROMPT,
    ) -> None:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.path = Path(model_path)
        if not (self.path / "config.json").is_file():
            raise ValueError(f"{self.path}: no config.json; not a Hugging Face model folder")
        if batch_size < 1:
            raise ValueError(f"batch_size {batch_size}: must be at least 1")
        transformers.logging.disable_progress_bar()
        transformers.logging.set_verbosity_error()
        self.device = pick_device(device)
        self.dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(self.path))
            model = AutoModelForCausalLM.from_pretrained(str(self.path), dtype=self.dtype)
        except (OSError, ValueError) as exc:
            raise ValueError(f"{self.path}: cannot load a causal LM: {exc}") from exc
        self.model = model.to(self.device).eval()
        self.batch_size = batch_size
        self.truncation_chars = truncation_chars
        self.system_prompt = system_prompt
        self.uses_chat_template = bool(getattr(self.tokenizer, "chat_template", None))
        self.label_ids = label_token_ids(self.tokenizer, str(self.path))
        forward = inspect.signature(self.model.forward).parameters
        self.keeps_one_logit = "logits_to_keep" in forward
        self.takes_position_ids = "position_ids" in forward
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id
        self.pad_id = 0 if pad is None else int(pad)
        self.name = f"{READER_KIND}:{self.path.name}"

    def prompt(self, question: str, text: str) -> str:
        """The full prompt string for one (question, text) pair, answer position last."""
        user = user_prompt(question, truncate(text, self.truncation_chars))
        if not self.uses_chat_template:
            return f"{self.system_prompt}\n\n{user}\nAnswer:"
        messages = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": user},
        ]
        try:
            rendered = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
        except Exception:
            # some templates refuse a system turn: fold it into the user's
            merged = [{"role": "user", "content": f"{self.system_prompt}\n\n{user}"}]
            rendered = self.tokenizer.apply_chat_template(
                merged, tokenize=False, add_generation_prompt=True
            )
        return str(rendered)

    def prompt_ids(self, question: str, text: str) -> list[int]:
        # a chat template writes its own special tokens (BOS and turn markers)
        encoded = self.tokenizer(
            self.prompt(question, text), add_special_tokens=not self.uses_chat_template
        )
        return list(encoded["input_ids"])

    def score_pairs(self, questions: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        """Posteriors of many (question, text) pairs, in length-sorted batches."""
        import torch

        check_pairs(questions, texts, self.name)
        prompts = [self.prompt_ids(q, t) for q, t in zip(questions, texts, strict=True)]
        out = np.zeros((len(prompts), len(LABELS)), dtype=np.float64)
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                rows = order[start : start + self.batch_size]
                out[rows] = self._label_probabilities([prompts[i] for i in rows])
        return check_posteriors(normalise_rows(out), len(prompts), self.name)

    def _label_probabilities(self, prompts: list[list[int]]) -> np.ndarray:
        import torch

        width = max(len(p) for p in prompts)
        # left padding puts every answer position in the last column
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention[row, width - len(ids) :] = 1
        kwargs: dict[str, Any] = {
            "input_ids": input_ids.to(self.device),
            "attention_mask": attention.to(self.device),
            "use_cache": False,
        }
        if self.takes_position_ids:
            # positions count real tokens only, so padding does not shift them
            kwargs["position_ids"] = (attention.cumsum(-1) - 1).clamp(min=0).to(self.device)
        if self.keeps_one_logit:
            kwargs["logits_to_keep"] = 1
        logits = self.model(**kwargs).logits[:, -1, :].float()
        log_probs = torch.log_softmax(logits, dim=-1)
        per_label = torch.stack(
            [torch.logsumexp(log_probs[:, list(ids)], dim=-1) for ids in self.label_ids], dim=-1
        )
        # renormalised over the label tokens: softmax of the per-label log-masses
        return torch.softmax(per_label.double(), dim=-1).cpu().numpy()

    def __repr__(self) -> str:
        return f"CausalLMReader({self.path}, device={self.device})"
