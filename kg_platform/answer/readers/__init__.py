"""Readers: a question and candidate texts in, P(yes, no, maybe) per text out.

``base`` holds the contract (``LABELS``, ``Reader``, ``check_posteriors``, ``truncate``) and
the labelled examples (``LabelledQuestion``, ``load_pubmedqa``); ``classifier``, ``causal_lm``,
``cues`` and ``probe`` (a linear head on the frozen encoder) the readers; ``controls`` the blind, majority and shuffled-label controls;
``crossfit`` the K-fold cross-fitting that scores each question with a model that never saw
its label. The heavy libraries (torch, transformers, scikit-learn) load on first use.
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
    train_reader,
)

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
