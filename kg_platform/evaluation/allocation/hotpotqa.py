"""HotpotQA (distractor format) as an allocation testbed: the questions, a resident paragraph
corpus of every paragraph of every question, BM25 rankings over it, and a title-mention graph
standing in for Wikipedia's hyperlinks.

Conventions, fixed here and used everywhere:

- A paragraph is identified by (title, text); the same paragraph listed under several
  questions is one object. Objects are numbered in first-appearance order.
- Paragraph text is the concatenation of its sentences as given (they carry their own
  leading spaces). What a reader receives is ``title + "\\n" + text``.
- Token length (:func:`count_tokens`) is the number of whitespace-separated tokens of what a
  reader receives: deterministic, library-free and independent of the retriever.
- BM25 (``bm25s``, Lucene variant, k1=1.5, b=0.75; lower-cased, English stop words removed,
  no stemming) indexes ``title + text``; a question's query is its question text. The ranking
  covers the whole corpus, ties broken by object id.
- Title mentions: A -> B when A's text (not its title) contains B's title, case-sensitive at
  word boundaries, with a trailing Wikipedia disambiguator such as " (film)" removed from B's
  title; names shorter than three characters and self-links are ignored.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kg_platform.evaluation.common.bm25 import bm25_scores
from kg_platform.graph.layout import Csr
from kg_platform.retrieval.allocation import LINKS

MIN_MENTION_CHARS = 3
_DISAMBIGUATOR = re.compile(r"\s+\([^()]*\)$")


@dataclass(frozen=True)
class HotpotQuestion:
    """One question with the object ids of its supporting-fact paragraphs."""

    qid: str
    position: int
    question: str
    answer: str
    kind: str  # HotpotQA "type": bridge or comparison
    level: str
    supporting_titles: tuple[str, ...]
    supporting_ids: tuple[int, ...]
    context_ids: tuple[int, ...]


@dataclass(frozen=True)
class ParagraphCorpus:
    """The resident corpus: object i has ``titles[i]``, ``texts[i]``, ``token_lengths[i]``."""

    titles: tuple[str, ...]
    texts: tuple[str, ...]
    token_lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.titles)

    def reader_text(self, i: int) -> str:
        return f"{self.titles[i]}\n{self.texts[i]}"


@dataclass(frozen=True)
class HotpotDataset:
    path: str
    sha256: str
    questions: tuple[HotpotQuestion, ...]
    corpus: ParagraphCorpus


def count_tokens(text: str) -> int:
    """Whitespace tokens: the project's token length for a context object."""
    return len(text.split())


def _literal(value: Any, field: str, where: str) -> Any:
    """HotpotQA exports hold these fields either as JSON objects or as Python-literal strings."""
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError) as exc:
            raise ValueError(f"{where}: field {field!r} is not a readable literal ({exc})") from exc
    return value


def _titled_lists(value: Any, field: str, keys: tuple[str, str], where: str) -> list[tuple]:
    """Pairs from either the dict form ({'title': [...], key: [...]}) or the original list form
    ([[title, x], ...])."""
    value = _literal(value, field, where)
    if isinstance(value, dict):
        if not all(k in value for k in keys):
            raise ValueError(f"{where}: field {field!r} must hold keys {list(keys)}")
        first, second = value[keys[0]], value[keys[1]]
        if len(first) != len(second):
            raise ValueError(
                f"{where}: field {field!r} has {len(first)} {keys[0]}s but {len(second)} {keys[1]}"
            )
        return list(zip(first, second, strict=True))
    if isinstance(value, list) and all(isinstance(p, list | tuple) and len(p) == 2 for p in value):
        return [tuple(p) for p in value]
    raise ValueError(f"{where}: field {field!r} is neither a dict of lists nor a list of pairs")


def load_hotpotqa(path: str | Path) -> HotpotDataset:
    """Read a HotpotQA distractor-format JSON file into questions and a resident corpus."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: HotpotQA file not found")
    raw = path.read_bytes()
    try:
        records = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a JSON file ({exc})") from exc
    if not isinstance(records, list) or not records:
        raise ValueError(f"{path}: expected a non-empty JSON list of questions")

    object_of: dict[tuple[str, str], int] = {}
    titles: list[str] = []
    texts: list[str] = []
    questions: list[HotpotQuestion] = []
    required = ("question", "answer", "type", "supporting_facts", "context")
    for position, record in enumerate(records):
        where = f"{path.name}: question {position}"
        if not isinstance(record, dict):
            raise ValueError(f"{where}: expected an object, got {type(record).__name__}")
        missing = [k for k in required if k not in record]
        if missing:
            raise ValueError(f"{where}: missing field(s) {missing}")
        context = _titled_lists(record["context"], "context", ("title", "sentences"), where)
        facts = _titled_lists(
            record["supporting_facts"], "supporting_facts", ("title", "sent_id"), where
        )
        context_ids: list[int] = []
        id_of_title: dict[str, int] = {}
        for title, sentences in context:
            if not isinstance(title, str) or not isinstance(sentences, list):
                raise ValueError(f"{where}: context entries must be (title, [sentences])")
            text = "".join(sentences)
            key = (title, text)
            if key not in object_of:
                object_of[key] = len(titles)
                titles.append(title)
                texts.append(text)
            context_ids.append(object_of[key])
            id_of_title.setdefault(title, object_of[key])
        supporting_titles = tuple(dict.fromkeys(str(title) for title, _ in facts))
        absent = [t for t in supporting_titles if t not in id_of_title]
        if absent:
            raise ValueError(f"{where}: supporting-fact title(s) {absent} not in its context")
        if not supporting_titles:
            raise ValueError(f"{where}: no supporting facts")
        questions.append(
            HotpotQuestion(
                qid=str(record.get("_id", position)),
                position=position,
                question=str(record["question"]),
                answer=str(record["answer"]),
                kind=str(record["type"]),
                level=str(record.get("level", "")),
                supporting_titles=supporting_titles,
                supporting_ids=tuple(id_of_title[t] for t in supporting_titles),
                context_ids=tuple(context_ids),
            )
        )
    token_lengths = np.array(
        [count_tokens(f"{t}\n{x}") for t, x in zip(titles, texts, strict=True)], dtype=np.int64
    )
    corpus = ParagraphCorpus(tuple(titles), tuple(texts), token_lengths)
    return HotpotDataset(str(path), hashlib.sha256(raw).hexdigest(), tuple(questions), corpus)


def mention_name(title: str) -> str:
    """The surface form a link to ``title`` is searched by: its disambiguator removed."""
    return _DISAMBIGUATOR.sub("", title).strip()


def build_title_mention_graph(corpus: ParagraphCorpus) -> Csr:
    """A -> B when A's text mentions B's title (see the module docstring for the rule)."""
    separator = "\n\x00\n"  # never part of a title, so no match spans two paragraphs
    starts: list[int] = []
    pieces: list[str] = []
    offset = 0
    for text in corpus.texts:
        starts.append(offset)
        pieces.append(text)
        offset += len(text) + len(separator)
    joined = separator.join(pieces)

    targets_of_name: dict[str, list[int]] = {}
    for target, title in enumerate(corpus.titles):
        name = mention_name(title)
        if len(name) >= MIN_MENTION_CHARS:
            targets_of_name.setdefault(name, []).append(target)

    edges: list[tuple[int, int]] = []
    for name, targets in targets_of_name.items():
        sources = {bisect_right(starts, at) - 1 for at in _whole_word_occurrences(joined, name)}
        edges.extend((s, t) for s in sorted(sources) for t in targets if s != t)
    return Csr.from_edges(LINKS, len(corpus), np.array(edges, dtype=np.int64).reshape(-1, 2))


def _whole_word_occurrences(haystack: str, needle: str) -> list[int]:
    """Start offsets of ``needle`` not flanked by word characters (substring search, then a
    boundary check: far faster than a look-behind regex over the whole corpus)."""
    found = []
    at = haystack.find(needle)
    while at != -1:
        end = at + len(needle)
        before_ok = at == 0 or not _is_word_char(haystack[at - 1])
        after_ok = end == len(haystack) or not _is_word_char(haystack[end])
        if before_ok and after_ok:
            found.append(at)
        at = haystack.find(needle, at + 1)
    return found


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def bm25_rankings(corpus: ParagraphCorpus, queries: list[str]) -> list[np.ndarray]:
    """For each query, every object id of the corpus ordered by BM25 score (best first,
    ties by id)."""
    documents = [f"{t} {x}" for t, x in zip(corpus.titles, corpus.texts, strict=True)]
    ids = np.arange(len(corpus))
    rankings = []
    for scores in bm25_scores(documents, queries):
        # lexsort: last key is primary; descending score, then ascending id
        rankings.append(np.lexsort((ids, -scores)).astype(np.int64))
    return rankings
