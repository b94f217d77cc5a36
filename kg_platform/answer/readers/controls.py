"""Controls: readers that cannot know the answer, to say what a real reader adds.

- blind: the same reader given the question only (every text replaced by "");
- majority: the class prior of the training labels, the same for every text;
- shuffled-label: a trainable reader fitted on labels ``shuffle_labels`` permuted (cross-fitted
  by ``crossfit.shuffled_label_cross_fit``). Its out-of-fold accuracy must sit at chance (no
  better than majority); if it does not, the harness leaks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from kg_platform.answer.readers.base import (
    LABELS,
    LabelledQuestion,
    Reader,
    check_posteriors,
    check_texts,
)


class BlindReader:
    """Wraps a reader and hides the evidence: each text becomes ""."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self.name = f"blind({reader.name})"

    def posteriors(self, question: str, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts, self.name)
        out = self.reader.posteriors(question, [""] * len(texts))
        return check_posteriors(out, len(texts), self.name)


@dataclass(frozen=True)
class MajorityRecipe:
    """The majority control has nothing to tune; the type selects it in ``train_reader``."""


class MajorityReader:
    """The class prior of its training labels, for every question and text."""

    def __init__(self, prior: Sequence[float]) -> None:
        prior = np.asarray(prior, dtype=np.float64)
        if prior.shape != (len(LABELS),) or (prior < 0).any() or prior.sum() <= 0:
            raise ValueError(f"majority prior {prior.tolist()}: expected 3 non-negative weights")
        self.prior = (prior / prior.sum()).astype(np.float32)
        self.name = "majority"

    @property
    def label(self) -> str:
        return LABELS[int(np.argmax(self.prior))]

    def posteriors(self, question: str, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts, self.name)
        return check_posteriors(np.tile(self.prior, (len(texts), 1)), len(texts), self.name)


def train_majority(
    examples: Sequence[LabelledQuestion], seed: int = 0, recipe: MajorityRecipe | None = None
) -> MajorityReader:
    """The prior of ``examples``' labels (seed and recipe are accepted for symmetry)."""
    if not examples:
        raise ValueError("train_majority: no examples")
    return MajorityReader([sum(ex.label == label for ex in examples) for label in LABELS])


def shuffle_labels(examples: Sequence[LabelledQuestion], seed: int) -> list[LabelledQuestion]:
    """The same questions and texts with the labels permuted among them by ``seed``.
    The label counts are kept; any link between text and label is broken."""
    examples = list(examples)
    permutation = np.random.default_rng(seed).permutation(len(examples))
    return [
        replace(ex, label=examples[j].label) for ex, j in zip(examples, permutation, strict=True)
    ]
