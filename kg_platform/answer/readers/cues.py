"""A transparent cue reader: logistic regression over word n-grams of the question and of
the text (for PubMedQA questions, the abstract's results sentences).

Small neural readers trained on a few hundred questions often do no better than such cues;
this is the baseline they must beat, and its weights can be read (``top_cues``).
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kg_platform.answer.readers.base import (
    LABELS,
    LabelledQuestion,
    PairReader,
    check_pairs,
    check_posteriors,
    normalise_rows,
    training_set_hash,
    truncate,
)

READER_KIND = "cues"
MODEL_FILE = "cues.pkl"
METADATA_FILE = "reader.json"


@dataclass(frozen=True)
class CueRecipe:
    """How the cue model is trained: tf-idf n-grams, then L2 logistic regression."""

    ngram_max: int = 2
    min_df: int = 2
    C: float = 1.0
    truncation_chars: int = 3000
    # "results": train on the results sentences where the abstract labels them
    text_field: str = "results"
    class_weight: str = ""  # "" or "balanced"

    def __post_init__(self) -> None:
        if self.ngram_max < 1 or self.min_df < 1 or self.C <= 0:
            raise ValueError(f"{self}: ngram_max, min_df >= 1 and C > 0 required")
        if self.text_field not in ("results", "context"):
            raise ValueError(f"text_field {self.text_field!r}: expected results or context")
        if self.class_weight not in ("", "balanced"):
            raise ValueError(f"class_weight {self.class_weight!r}: expected '' or 'balanced'")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class CueReader(PairReader):
    """Fitted vectorisers and logistic regression; ``posteriors`` is the reader contract."""

    def __init__(
        self, question_vectoriser: Any, text_vectoriser: Any, model: Any, recipe: CueRecipe
    ) -> None:
        self.question_vectoriser = question_vectoriser
        self.text_vectoriser = text_vectoriser
        self.model = model
        self.recipe = recipe
        self.metadata: dict[str, Any] = {}
        self.name = READER_KIND

    def features(self, questions: Sequence[str], texts: Sequence[str]) -> Any:
        from scipy.sparse import hstack

        texts = [truncate(t, self.recipe.truncation_chars) for t in texts]
        q = self.question_vectoriser.transform(list(questions))
        t = self.text_vectoriser.transform(texts)
        return hstack([q, t]).tocsr()

    def score_pairs(self, questions: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        check_pairs(questions, texts, self.name)
        if not texts:
            return np.zeros((0, len(LABELS)), dtype=np.float32)
        probs = self.model.predict_proba(self.features(questions, texts))
        out = np.zeros((len(texts), len(LABELS)), dtype=np.float64)
        for column, label in enumerate(self.model.classes_):
            out[:, LABELS.index(label)] = probs[:, column]
        return check_posteriors(normalise_rows(out), len(texts), self.name)

    def top_cues(self, k: int = 10) -> dict[str, list[tuple[str, float]]]:
        """The ``k`` n-grams that most raise each label's score, with their weights;
        question n-grams are prefixed ``q:``, text n-grams ``t:``."""
        names = [f"q:{n}" for n in self.question_vectoriser.get_feature_names_out()]
        names += [f"t:{n}" for n in self.text_vectoriser.get_feature_names_out()]
        coef = self.model.coef_
        if coef.shape[0] == 1:  # two classes seen: one row, for classes_[1]
            coef = np.vstack([-coef[0], coef[0]])
        cues = {}
        for row, label in zip(coef, self.model.classes_, strict=True):
            top = np.argsort(-row, kind="stable")[:k]
            cues[str(label)] = [(names[i], float(row[i])) for i in top]
        return cues

    def save(self, folder: str | os.PathLike[str]) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / MODEL_FILE).open("wb") as f:
            pickle.dump((self.question_vectoriser, self.text_vectoriser, self.model), f)
        (folder / METADATA_FILE).write_text(json.dumps(self.metadata, indent=2, sort_keys=True))


def load_cue_reader(folder: str | os.PathLike[str]) -> CueReader:
    """A cue reader saved by ``CueReader.save`` (a pickle: load only folders you wrote)."""
    folder = Path(folder)
    try:
        metadata = json.loads((folder / METADATA_FILE).read_text())
        with (folder / MODEL_FILE).open("rb") as f:
            question_vectoriser, text_vectoriser, model = pickle.load(f)
    except (OSError, json.JSONDecodeError, pickle.UnpicklingError) as exc:
        raise ValueError(f"{folder}: not a saved cue reader: {exc}") from exc
    reader = CueReader(question_vectoriser, text_vectoriser, model, CueRecipe(**metadata["recipe"]))
    reader.metadata = metadata
    return reader


def train_cue_reader(
    examples: Sequence[LabelledQuestion], seed: int, recipe: CueRecipe
) -> CueReader:
    """Fit the vectorisers and the logistic regression on ``examples``."""
    import sklearn
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    examples = list(examples)
    if len({ex.label for ex in examples}) < 2:
        raise ValueError(f"train_cue_reader: {len(examples)} examples with fewer than 2 labels")

    def vectoriser(min_df: int) -> TfidfVectorizer:
        return TfidfVectorizer(
            ngram_range=(1, recipe.ngram_max),
            min_df=min_df,
            sublinear_tf=True,
            lowercase=True,
            token_pattern=r"(?u)\b\w+\b",  # keep one-letter tokens: "p", "n", "a"
            dtype=np.float64,
        )

    questions = [ex.question for ex in examples]
    texts = [truncate(ex.text(recipe.text_field), recipe.truncation_chars) for ex in examples]
    # tiny sets can leave no n-gram at min_df; fall back to every n-gram
    min_df = recipe.min_df if len(examples) >= 10 * recipe.min_df else 1
    question_vectoriser = vectoriser(min_df).fit(questions)
    text_vectoriser = vectoriser(min_df).fit(texts)
    model = LogisticRegression(
        C=recipe.C,
        max_iter=5000,
        random_state=seed,
        class_weight=recipe.class_weight or None,
    )
    reader = CueReader(question_vectoriser, text_vectoriser, model, recipe)
    model.fit(reader.features(questions, texts), [ex.label for ex in examples])
    reader.metadata = {
        "reader": READER_KIND,
        "name": READER_KIND,
        "labels": list(LABELS),
        "seed": seed,
        "recipe": recipe.to_dict(),
        "training_set_hash": training_set_hash(examples),
        "n_train": len(examples),
        "sklearn_version": sklearn.__version__,
    }
    return reader
