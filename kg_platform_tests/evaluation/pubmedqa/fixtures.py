"""Shared pieces of the PubMedQA harness tests: a tiny lexical reader and the real DEV file."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from kg_platform.answer.readers.base import load_pubmedqa
from kg_platform_tests.conftest import require_reference

WORD = re.compile(r"[a-z]+")
NEGATIONS = {"not", "no", "without", "neither", "nor", "none"}
HEDGES = {"may", "might", "unclear", "possibly", "suggest", "suggests"}


class LexicalReader:
    """A real, deterministic function of the text: yes grows with question-word overlap, no
    with negations, maybe with hedges."""

    def __init__(self, name: str = "lexical") -> None:
        self.name = name

    def posteriors(self, question: str, texts: Sequence[str]) -> np.ndarray:
        asked = set(WORD.findall(question.lower()))
        out = []
        for text in texts:
            words = WORD.findall(text.lower())
            overlap = len(asked.intersection(words))
            out.append(
                [
                    1.0 + overlap,
                    1.0 + 2 * sum(w in NEGATIONS for w in words),
                    1.0 + 2 * sum(w in HEDGES for w in words),
                ]
            )
        values = np.asarray(out, dtype=np.float64).reshape(-1, 3)
        return (values / values.sum(axis=1, keepdims=True)).astype(np.float32)


def dev_file():
    return require_reference("pubmedqa", "pqal_dev400.json")


def dev_questions():
    return load_pubmedqa(dev_file())
