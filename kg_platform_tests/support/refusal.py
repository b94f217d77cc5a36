"""What the refusal and verifier-gate tests share: a verifier with fixed scores, and four
questions for the question graph."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class FixedVerifier:
    """A tiny verifier: P(NOINFO) per text from a table keyed by the text's first line."""

    name = "fixed"

    def __init__(self, noinfo: dict[str, float]) -> None:
        self.noinfo = noinfo
        self.seen: list[tuple[str, list[str]]] = []

    def scores(self, claim: str, texts: Sequence[str]) -> np.ndarray:
        self.seen.append((claim, list(texts)))
        p = np.array([self.noinfo[t.split("\n")[0]] for t in texts])
        return np.stack([(1 - p) / 2, (1 - p) / 2, p], axis=1).astype(np.float32)


QUESTIONS = [
    ("q1", "Does aspirin prevent myocardial infarction?"),
    ("q2", "Does warfarin prevent stroke?"),
    ("q3", "Is the sky blue?"),
    ("q4", "Does ibuprofen worsen asthma?"),
]
