"""The answer after the ladder: a reader reads the top evidence articles and says yes, no or
maybe, with the PMIDs it read.

Rule (``RULE``): the distinct terminal PMIDs of the evidence, in rank order, are checked
against the corpus articles table (present, and title + abstract not empty); the first ``k``
that pass are read, each text cut to ``chars`` characters; the answer's posterior is the mean
of their rows, its label the largest entry (ties to the first in ``LABELS`` order) and its
probability that entry.

Citation safety is structural: the PMIDs cited are the ones this module chose to read, taken
from the evidence it was given and validated here; the reader contributes only an (n, 3)
array of numbers, aligned by position and checked by ``check_posteriors``. Nothing a reader
returns, names or carries can add a PMID.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kg_platform.answer.readers.base import LABELS, Reader, check_posteriors, truncate
from kg_platform.answer.titles import TitleLookup

RULE = "mean"
# why no answer: no reader given, the ladder refused (the reader never reads a refusal),
# no evidence article passed validation, or the reader's output broke the contract
NO_READER, REFUSED, NO_READABLE_EVIDENCE, READER_ERROR = (
    "no_reader",
    "refused",
    "no_readable_evidence",
    "reader_error",
)
# why an evidence PMID was not read
NOT_IN_CORPUS, NO_TEXT = "not_in_corpus", "no_text"

READER_HINT = (
    "no reader loaded: `kg eval pubmedqa` makes one from the reference data's PubMedQA DEV "
    "questions and prints its folder; then pass `kg ask --reader DIR` or set KG_READER=DIR"
)


@dataclass(frozen=True)
class ReadArticle:
    """One article the reader read, and what it said."""

    pmid: int
    posterior: tuple[float, float, float]  # LABELS order

    def to_json(self) -> dict:
        return {
            "pmid": self.pmid,
            **{f"p_{k}": _r(v) for k, v in zip(LABELS, self.posterior, strict=True)},
        }


@dataclass(frozen=True)
class Dropped:
    """An evidence PMID that failed validation and was not read."""

    pmid: int
    reason: str  # NOT_IN_CORPUS or NO_TEXT

    def to_json(self) -> dict:
        return {"pmid": self.pmid, "reason": self.reason}


@dataclass(frozen=True)
class Reading:
    """The reader's answer (``label`` set), or why there is none (``reason`` set)."""

    label: str | None = None
    probability: float | None = None
    posterior: tuple[float, float, float] | None = None
    k: int = 0
    reader: str | None = None
    read: tuple[ReadArticle, ...] = ()
    dropped: tuple[Dropped, ...] = ()
    reason: str | None = NO_READER
    detail: str = READER_HINT

    @property
    def answered(self) -> bool:
        return self.label is not None

    @property
    def cited(self) -> list[int]:
        return [a.pmid for a in self.read]

    def to_json(self) -> dict | None:
        if not self.answered:
            return None
        assert self.posterior is not None and self.probability is not None
        return {
            "label": self.label,
            "probability": _r(self.probability),
            "posteriors": {k: _r(v) for k, v in zip(LABELS, self.posterior, strict=True)},
            "rule": RULE,
            "k": self.k,
            "reader": self.reader,
            "read": [a.to_json() for a in self.read],
            "dropped": [d.to_json() for d in self.dropped],
        }

    def reason_json(self) -> dict | None:
        if self.answered:
            return None
        return {
            "code": self.reason,
            "detail": self.detail,
            "dropped": [d.to_json() for d in self.dropped],
        }

    def render(self) -> str:
        """One line for the text output."""
        if not self.answered:
            return f"Answer: none ({self.reason}): {self.detail}"
        read = ", ".join(
            f"{a.pmid} ({' '.join(f'{k} {v:.2f}' for k, v in zip(LABELS, a.posterior, strict=True))})"
            for a in self.read
        )
        return (
            f"Answer: {self.label} (p={self.probability:.3f}, {RULE} of {len(self.read)} "
            f"read by {self.reader}); read PMIDs {read}"
        )


def refused() -> Reading:
    return Reading(reason=REFUSED, detail="a refusal carries no label; the reader did not run")


def read_evidence(
    reader: Reader,
    question: str,
    evidence_pmids: Sequence[int],
    lookup: TitleLookup,
    k: int,
    chars: int,
) -> Reading:
    """The reader's answer over the first ``k`` evidence PMIDs that pass validation (the
    rule in the module docstring)."""
    if k < 1:
        raise ValueError(f"reader k: must be at least 1, got {k}")
    name = str(getattr(reader, "name", type(reader).__name__))
    order = list(dict.fromkeys(int(p) for p in evidence_pmids))
    found = lookup.texts(order)
    chosen: list[int] = []
    dropped: list[Dropped] = []
    for pmid in order:
        if len(chosen) == k:
            break
        if pmid not in found:
            dropped.append(Dropped(pmid, NOT_IN_CORPUS))
        elif not found[pmid].strip():
            dropped.append(Dropped(pmid, NO_TEXT))
        else:
            chosen.append(pmid)
    if not chosen:
        why = ", ".join(f"{d.pmid} {d.reason}" for d in dropped) or "no evidence"
        return Reading(
            k=k,
            reader=name,
            dropped=tuple(dropped),
            reason=NO_READABLE_EVIDENCE,
            detail=f"no evidence article could be read ({why})",
        )
    # the reader gets copies: whatever it does to them, ``chosen`` stays as validated
    read_texts = [truncate(found[p], chars) for p in chosen]
    try:
        rows = check_posteriors(reader.posteriors(question, list(read_texts)), len(chosen), name)
    except ValueError as error:
        return Reading(
            k=k, reader=name, dropped=tuple(dropped), reason=READER_ERROR, detail=str(error)
        )
    mean = rows.astype(np.float64).mean(axis=0)
    best = int(np.argmax(mean))  # the first maximum: ties go to LABELS order
    return Reading(
        label=LABELS[best],
        probability=float(mean[best]),
        posterior=_triple(mean),
        k=k,
        reader=name,
        read=tuple(ReadArticle(p, _triple(r)) for p, r in zip(chosen, rows, strict=True)),
        dropped=tuple(dropped),
        reason=None,
        detail="",
    )


def _triple(row: np.ndarray) -> tuple[float, float, float]:
    yes, no, maybe = (float(v) for v in row)
    return yes, no, maybe


def _r(value: float) -> float:
    return round(value, 6)
