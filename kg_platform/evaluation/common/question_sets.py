"""Question sets as lake objects, keyed by file name plus a content-hash prefix.

``kg build`` registers the reference question files it finds; each becomes one
``questions/<kind>/<key><suffix>`` object (``pqal_dev400-1a2b3c4d``) and one partition of
the reports that read it, so a changed file is a new partition, never a silent overwrite.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kg_platform.answer.readers.base import LabelledQuestion, load_pubmedqa
from kg_platform.checks import CheckOutcome
from kg_platform.pubmed.tables import local_copy
from kg_platform.storage.lake import Lake
from kg_platform.storage.studies import QUESTIONS

# kind -> the file suffix its objects keep (SciFact claims and corpora are CSV files)
SUFFIXES = {
    "pubmedqa": ".json",
    "hotpotqa": ".json",
    "scifact": ".csv",
    "scifact_corpus": ".csv.gz",
}
KINDS = tuple(SUFFIXES)


def question_set_key(path: str | Path) -> str:
    path = Path(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:8]
    stem = path.name.split(".")[0].replace(" ", "_")
    return f"{stem}-{digest}"


def lake_key(kind: str, key: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"question set kind {kind!r}: expected one of {KINDS}")
    return f"{QUESTIONS}/{kind}/{key}{SUFFIXES[kind]}"


def register_question_set(lake: Lake, kind: str, path: str | Path) -> str:
    """Copy ``path`` into the lake under its key (once); returns the key."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such question file")
    key = question_set_key(path)
    target = lake_key(kind, key)
    if not lake.exists(target):
        lake.copy_in(target, str(path))
    return key


def question_set_object(lake: Lake, kind: str, key: str) -> str:
    """The lake key of a registered question set, or a clear error naming it."""
    target = lake_key(kind, key)
    if not lake.exists(target):
        raise FileNotFoundError(
            f"question set {key}: {lake.path(target)} is missing; register it with `kg build`"
        )
    return target


@dataclass(frozen=True)
class QuestionSet:
    """A registered question set read from the lake, with a local path to its file."""

    key: str
    path: Path
    questions: list[LabelledQuestion]

    @property
    def labels(self) -> dict[str, str]:
        return {q.qid: q.label for q in self.questions}


@contextmanager
def open_question_set(lake: Lake, key: str) -> Iterator[QuestionSet]:
    with local_copy(lake, question_set_object(lake, "pubmedqa", key)) as path:
        yield QuestionSet(key, Path(path), load_pubmedqa(path))


def check_question_set_matches_key(question_set: QuestionSet) -> CheckOutcome:
    """The file's sha256 starts with its key's hash suffix: the lake copy is the file that
    was registered, not an altered one."""
    digest = hashlib.sha256(question_set.path.read_bytes()).hexdigest()
    expected = question_set.key.rsplit("-", 1)[-1]
    return CheckOutcome(
        "question_set_matches_key",
        digest.startswith(expected),
        f"{question_set.key}: file sha256 {digest[:16]}..., key expects {expected}",
    )
