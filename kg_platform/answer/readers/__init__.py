"""Readers: a question and candidate texts in, P(yes, no, maybe) per text out.

The modules, each importing only those listed before it:

- ``base``: the contract (``LABELS``, ``Reader``, ``check_posteriors``, ``truncate``), the
  labelled examples (``LabelledQuestion``, ``load_pubmedqa``) and a saved folder's
  ``content_hash``;
- ``classifier``, ``causal_lm``, ``cues``, ``probe`` (a linear head on the frozen encoder):
  the readers; ``controls``: the blind and majority controls and the label shuffle;
- ``registry``: which reader each recipe type trains (``train_reader``);
- ``crossfit``: the K-fold cross-fitting that scores each question with a model that never
  saw its label, and its shuffled-label control.

The heavy libraries (torch, transformers, scikit-learn) load on first use.
"""

from kg_platform.answer.readers.base import (
    LABELS,
    LabelledQuestion,
    Reader,
    check_posteriors,
    load_pubmedqa,
    training_set_hash,
    truncate,
)
from kg_platform.answer.readers.crossfit import (
    CrossFit,
    accuracy,
    assign_folds,
    cross_fit_posteriors,
    macro_f1,
)
from kg_platform.answer.readers.registry import train_reader

__all__ = [
    "LABELS",
    "CrossFit",
    "LabelledQuestion",
    "Reader",
    "accuracy",
    "assign_folds",
    "check_posteriors",
    "cross_fit_posteriors",
    "load_pubmedqa",
    "macro_f1",
    "train_reader",
    "training_set_hash",
    "truncate",
]
