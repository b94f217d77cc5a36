"""Which reader each recipe type trains: the one place that knows every trainable reader.

It sits above the reader modules and below ``crossfit``, so the cross-fitting loop (and any
caller holding a recipe) trains a reader without importing the readers itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kg_platform.answer.readers.base import LabelledQuestion, Reader
from kg_platform.answer.readers.classifier import ClassifierRecipe, train_classifier
from kg_platform.answer.readers.controls import MajorityRecipe, train_majority
from kg_platform.answer.readers.cues import CueRecipe, train_cue_reader
from kg_platform.answer.readers.probe import ProbeRecipe, train_probe

TRAINERS: dict[type, Callable[[Sequence[LabelledQuestion], int, Any], Reader]] = {
    ClassifierRecipe: train_classifier,
    CueRecipe: train_cue_reader,
    ProbeRecipe: train_probe,
    MajorityRecipe: train_majority,
}


def train_reader(examples: Sequence[LabelledQuestion], seed: int, recipe: Any) -> Reader:
    """Train the reader the recipe describes on ``examples``."""
    for recipe_type, train in TRAINERS.items():
        if isinstance(recipe, recipe_type):
            return train(examples, seed, recipe)
    raise ValueError(f"recipe {recipe!r}: no reader is trained from a {type(recipe).__name__}")
