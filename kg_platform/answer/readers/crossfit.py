"""K-fold cross-fitting: every question is scored by a model that never saw its label.

Training is a function of (question set, seed, recipe); the recipe's type says which reader
is trained (``ClassifierRecipe``, ``CueRecipe``, ``ProbeRecipe``, ``MajorityRecipe``), so one
cross-fitting loop serves them all, controls included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from kg_platform.answer.readers.base import (
    LABEL_INDEX,
    LABELS,
    LabelledQuestion,
    Reader,
    check_posteriors,
)
from kg_platform.answer.readers.controls import shuffle_labels
from kg_platform.answer.readers.registry import train_reader

CandidatesFn = Callable[[LabelledQuestion], Sequence[str]]
Item = TypeVar("Item")
Model = TypeVar("Model")


def assign_folds(examples: Sequence[LabelledQuestion], k: int, seed: int) -> np.ndarray:
    """Fold of each example (0..k-1), stratified by label. A function of the set of qids,
    their labels and the seed only: the input order does not matter."""
    if k < 2:
        raise ValueError(f"k={k}: cross-fitting needs at least 2 folds")
    if len(examples) < k:
        raise ValueError(f"k={k}: only {len(examples)} examples, fewer than the folds")
    qids = [ex.qid for ex in examples]
    if len(set(qids)) != len(qids):
        raise ValueError("examples: question ids are not unique")
    order = sorted(range(len(examples)), key=lambda i: qids[i])
    rng = np.random.default_rng(seed)
    folds = np.empty(len(examples), dtype=np.int64)
    offset = 0
    for label in LABELS:
        members = np.array([i for i in order if examples[i].label == label], dtype=np.int64)
        members = members[rng.permutation(len(members))]
        # continue the round robin across labels so fold sizes differ by at most one
        folds[members] = (np.arange(len(members)) + offset) % k
        offset += len(members)
    return folds


def fit_folds(
    items: Sequence[Item],
    folds: np.ndarray,
    seed: int,
    fit: Callable[[list[Item], int], Model],
    group: Callable[[Item], str],
) -> Iterator[tuple[int, Model, list[Item], np.ndarray]]:
    """The cross-fitting loop: for each fold f, ``fit(the items of the other folds, seed +
    f)``, yielded with f, those training items and the indices of the held-out ones, one
    model at a time. An AssertionError when a held-out ``group`` (a question, a claim) is
    also trained on."""
    for fold in range(int(folds.max()) + 1):
        held_out = np.flatnonzero(folds == fold)
        train = [items[i] for i in np.flatnonzero(folds != fold)]
        held_groups = {group(items[i]) for i in held_out}
        if any(group(item) in held_groups for item in train):
            raise AssertionError(f"fold {fold}: a held-out item is in its training set")
        yield fold, fit(train, seed + fold), train, held_out


@dataclass(frozen=True)
class CrossFit:
    """Out-of-fold posteriors: ``posteriors[i]`` scores ``examples[i]``'s candidates with
    the model of fold ``folds[i]``, which was trained on the other folds only."""

    qids: tuple[str, ...]
    folds: np.ndarray
    posteriors: tuple[np.ndarray, ...]
    reader_names: tuple[str, ...]

    def first(self) -> np.ndarray:
        """(n, 3): the posterior of each question's first candidate."""
        return np.stack([p[0] for p in self.posteriors]).astype(np.float32)


def cross_fit_posteriors(
    examples: Sequence[LabelledQuestion],
    k: int,
    seed: int,
    recipe: Any,
    candidates_fn: CandidatesFn,
    on_fold: Callable[[int, Reader], None] | None = None,
) -> CrossFit:
    """Split ``examples`` into ``k`` stratified folds; for each fold train the recipe's
    reader on the other folds (seed ``seed + fold``) and score the fold's questions on
    ``candidates_fn(question)``. ``on_fold(fold, reader)`` sees each trained model."""
    examples = list(examples)
    folds = assign_folds(examples, k, seed)
    posteriors: list[np.ndarray | None] = [None] * len(examples)
    names = []
    fitted = fit_folds(
        examples, folds, seed, lambda train, s: train_reader(train, s, recipe), lambda q: q.qid
    )
    for fold, reader, _, held_out in fitted:
        names.append(reader.name)
        for i, scored in zip(
            held_out, _score_fold(reader, examples, held_out, candidates_fn), strict=True
        ):
            posteriors[i] = scored
        if on_fold is not None:
            on_fold(fold, reader)
    return CrossFit(
        qids=tuple(ex.qid for ex in examples),
        folds=folds,
        posteriors=tuple(p for p in posteriors if p is not None),
        reader_names=tuple(names),
    )


@dataclass(frozen=True)
class ShuffledLabelRun:
    """One shuffled-label seed: out-of-fold posteriors of a reader trained on permuted
    labels, to be scored against the true labels."""

    seed: int
    cross_fit: CrossFit


def shuffled_label_cross_fit(
    examples: Sequence[LabelledQuestion],
    k: int,
    seeds: Sequence[int],
    recipe: Any,
    candidates_fn: CandidatesFn,
) -> list[ShuffledLabelRun]:
    """For each seed, permute the labels, then cross-fit the recipe's reader as for the
    real run (folds stratified by the permuted label). Score the result against the true
    labels of ``examples``."""
    runs = []
    for seed in seeds:
        permuted = shuffle_labels(examples, seed)
        runs.append(
            ShuffledLabelRun(seed, cross_fit_posteriors(permuted, k, seed, recipe, candidates_fn))
        )
    return runs


def _score_fold(
    reader: Reader,
    examples: list[LabelledQuestion],
    held_out: np.ndarray,
    candidates_fn: CandidatesFn,
) -> list[np.ndarray]:
    texts = [list(candidates_fn(examples[i])) for i in held_out]
    score_pairs = getattr(reader, "score_pairs", None)
    if score_pairs is None:
        return [
            check_posteriors(reader.posteriors(examples[i].question, t), len(t), reader.name)
            for i, t in zip(held_out, texts, strict=True)
        ]
    # one batched pass over the fold's (question, text) pairs, split back per question
    questions = [examples[i].question for i, t in zip(held_out, texts, strict=True) for _ in t]
    flat = score_pairs(questions, [text for t in texts for text in t])
    bounds = np.cumsum([0] + [len(t) for t in texts])
    return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def accuracy(posteriors: np.ndarray, examples: Sequence[LabelledQuestion]) -> float:
    """Share of questions whose argmax label is the gold label."""
    gold = np.array([LABEL_INDEX[ex.label] for ex in examples])
    return float((np.asarray(posteriors).argmax(axis=1) == gold).mean())


def macro_f1(posteriors: np.ndarray, examples: Sequence[LabelledQuestion]) -> float:
    """Macro-F1 of the argmax decision over the three labels."""
    gold = np.array([LABEL_INDEX[ex.label] for ex in examples], dtype=np.int64)
    confusion = np.zeros((len(LABELS), len(LABELS)), dtype=np.int64)
    np.add.at(confusion, (gold, np.asarray(posteriors).argmax(axis=1)), 1)
    return macro_f1_of(confusion)


def macro_f1_of(confusion: np.ndarray) -> float:
    """Mean over the classes of F1 = 2 tp / (gold + predicted), from a confusion matrix
    (rows gold, columns predicted); 0 for a class with no true positive."""
    confusion = np.asarray(confusion)
    tp = np.diag(confusion)
    both = confusion.sum(axis=1) + confusion.sum(axis=0)
    return float(np.mean(np.where(tp > 0, 2 * tp / np.maximum(both, 1), 0.0)))
