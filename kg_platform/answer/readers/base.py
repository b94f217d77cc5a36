"""The reader contract: a question and candidate texts in, P(yes, no, maybe) per text out.

Every reader (cross-encoder classifier, causal LM, cue model, controls) returns a float32
array of shape (len(texts), 3) whose columns follow ``LABELS`` and whose rows sum to 1.
``LabelledQuestion`` is the labelled example the trainable readers learn from.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

LABELS = ("yes", "no", "maybe")
LABEL_INDEX = {label: i for i, label in enumerate(LABELS)}
ROW_SUM_TOLERANCE = 1e-5


@runtime_checkable
class Reader(Protocol):
    """Anything that reads a question against texts and says yes, no or maybe for each."""

    name: str

    def posteriors(self, question: str, texts: Sequence[str]) -> np.ndarray:
        """float32 (len(texts), 3), columns in ``LABELS`` order, each row summing to 1."""
        ...


@dataclass(frozen=True)
class LabelledQuestion:
    """One labelled question. ``context`` is the abstract without its conclusion;
    ``results`` its results sections only ("" when the abstract has none labelled)."""

    qid: str
    question: str
    context: str
    label: str
    results: str = ""

    def __post_init__(self) -> None:
        if self.label not in LABEL_INDEX:
            raise ValueError(f"question {self.qid}: label {self.label!r} is not one of {LABELS}")

    def text(self, text_field: str) -> str:
        """What a reader whose recipe names ``text_field`` reads: the results sections when
        it asks for them and the abstract has them, else the context."""
        return self.results if text_field == "results" and self.results else self.context


def check_posteriors(array: np.ndarray, n: int, reader: str = "reader") -> np.ndarray:
    """The array as float32 (n, 3) with finite, non-negative rows summing to 1; else a
    ValueError naming the reader and what is wrong."""
    out = np.asarray(array, dtype=np.float32)
    if out.shape != (n, len(LABELS)):
        raise ValueError(f"reader {reader}: posteriors shape {out.shape}, expected ({n}, 3)")
    if not np.isfinite(out).all():
        bad = int(np.flatnonzero(~np.isfinite(out).all(axis=1))[0])
        raise ValueError(f"reader {reader}: posteriors row {bad} is not finite: {out[bad]}")
    if (out < 0).any():
        bad = int(np.flatnonzero((out < 0).any(axis=1))[0])
        raise ValueError(f"reader {reader}: posteriors row {bad} has a negative value: {out[bad]}")
    sums = out.sum(axis=1, dtype=np.float64)
    off = np.abs(sums - 1.0) > ROW_SUM_TOLERANCE
    if off.any():
        bad = int(np.flatnonzero(off)[0])
        raise ValueError(f"reader {reader}: posteriors row {bad} sums to {sums[bad]:.7f}, not 1")
    return out


def normalise_rows(array: np.ndarray) -> np.ndarray:
    """Rows rescaled to sum to 1 in float64, then float32 (the last step every reader takes)."""
    values = np.asarray(array, dtype=np.float64)
    return (values / values.sum(axis=1, keepdims=True)).astype(np.float32)


def truncate(text: str, chars: int) -> str:
    """The first ``chars`` characters of ``text`` (all of it when ``chars`` is 0)."""
    if chars < 0:
        raise ValueError(f"truncation {chars}: expected a number of characters >= 0")
    return text if chars == 0 or len(text) <= chars else text[:chars]


def check_texts(texts: Sequence[str], reader: str) -> list[str]:
    if isinstance(texts, str):
        raise ValueError(f"reader {reader}: texts must be a sequence of strings, got one string")
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"reader {reader}: texts[{i}] is {type(text).__name__}, not str")
    return texts


def check_pairs(questions: Sequence[str], texts: Sequence[str], reader: str) -> None:
    if len(questions) != len(texts):
        raise ValueError(f"reader {reader}: {len(questions)} questions, {len(texts)} texts")


class PairReader:
    """A reader that scores many (question, text) pairs at once: ``posteriors`` is
    ``score_pairs`` with the question repeated for every text."""

    name: str

    def posteriors(self, question: str, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts, self.name)
        return self.score_pairs([question] * len(texts), texts)

    def score_pairs(self, questions: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        raise NotImplementedError


def training_set_hash(examples: Sequence[LabelledQuestion]) -> str:
    """sha256 over the examples sorted by qid: qid, label, question, context and results.
    The same set in any order hashes the same; any changed label or text changes it."""
    digest = hashlib.sha256()
    for ex in sorted(examples, key=lambda e: e.qid):
        record = [ex.qid, ex.label, ex.question, ex.context, ex.results]
        digest.update(json.dumps(record, ensure_ascii=False).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def content_hash(folder: str | os.PathLike[str]) -> str:
    """sha256 over every file under ``folder``: relative path and bytes, in path order."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a folder")
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def label_indices(examples: Sequence[LabelledQuestion]) -> np.ndarray:
    return np.array([LABEL_INDEX[ex.label] for ex in examples], dtype=np.int64)


def _is_results_section(section: str) -> bool:
    # RESULTS, MAIN RESULTS, METHODS AND RESULTS, FINDINGS, PRINCIPAL FINDINGS, ...
    upper = section.upper()
    return "RESULT" in upper or "FINDING" in upper


def load_pubmedqa(path: str | os.PathLike[str]) -> list[LabelledQuestion]:
    """The questions of a PubMedQA PQA-L file (``{pmid: {QUESTION, CONTEXTS, LABELS,
    final_decision, ...}}``), sorted by PMID. ``LONG_ANSWER`` (the conclusion, which states
    the answer) is never read."""
    path = Path(path)
    try:
        records = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable PubMedQA JSON: {exc}") from exc
    if not isinstance(records, dict):
        raise ValueError(f"{path}: expected an object keyed by PMID, got {type(records).__name__}")
    questions = []
    for qid in sorted(records, key=lambda k: (len(k), k)):
        record = records[qid]
        try:
            contexts = list(record["CONTEXTS"])
            sections = list(record.get("LABELS", []))
            question = record["QUESTION"]
            label = record["final_decision"]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{path}: question {qid}: missing field {exc}") from exc
        if sections and len(sections) != len(contexts):
            raise ValueError(
                f"{path}: question {qid}: {len(contexts)} CONTEXTS but {len(sections)} LABELS"
            )
        results = [c for c, s in zip(contexts, sections, strict=False) if _is_results_section(s)]
        try:
            questions.append(
                LabelledQuestion(
                    qid=str(qid),
                    question=question,
                    context=" ".join(contexts),
                    label=label,
                    results=" ".join(results),
                )
            )
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from exc
    return questions
