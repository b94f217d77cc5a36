"""Hybrid grounding: the lexical grounder first, then dense links for the words it left.

Candidate spans are runs of up to ``max_span_words`` words that no lexical grounding covers
and that neither start nor end on a function word ("the risk of" is not a concept; "risk"
might be). All spans of a question are embedded in one batch and compared with every
concept surface (``concept_index``); a span links to its best descriptor when the cosine
reaches ``threshold``. Spans are then taken best first without overlap. Lexical groundings
are never replaced or moved, and a descriptor already grounded lexically is not added twice.

The lexical grounder's vocabulary rules (``vocabulary``) hold for dense links too
(``DenseRules``), read from the MeSH facts the concept index carries per surface: a lone
word of a descriptor's non-preferred concept ("self" of Ego) is not a surface a span can
link to (the span links to its best other surface), and a surface whose term NLM tags
ABB/ACR links only where the question writes that term as MeSH does.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from kg_platform.embeddings.concepts import ConceptIndex
from kg_platform.embeddings.encoder import Encoder
from kg_platform.grounding.grounder import (
    Grounder,
    Grounding,
    SurfaceEntry,
    question_words,
    written_in,
)
from kg_platform.text.vocabulary import ABBREVIATION_TAGS

DENSE_KIND = "dense"
DEFAULT_THRESHOLD = 0.90

# Closed-class English words: articles, pronouns, prepositions, conjunctions, auxiliaries,
# question words and quantifiers. A span may hold them inside ("quality of life"), never at
# an edge.
FUNCTION_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "i",
        "me",
        "my",
        "we",
        "our",
        "you",
        "your",
        "he",
        "him",
        "his",
        "she",
        "her",
        "it",
        "its",
        "they",
        "them",
        "their",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "why",
        "how",
        "when",
        "where",
        "whether",
        "if",
        "then",
        "than",
        "so",
        "as",
        "of",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "without",
        "within",
        "into",
        "onto",
        "from",
        "to",
        "up",
        "down",
        "out",
        "over",
        "under",
        "about",
        "above",
        "below",
        "between",
        "among",
        "through",
        "during",
        "before",
        "after",
        "against",
        "along",
        "across",
        "around",
        "toward",
        "towards",
        "upon",
        "via",
        "per",
        "versus",
        "vs",
        "and",
        "or",
        "nor",
        "but",
        "yet",
        "both",
        "either",
        "neither",
        "not",
        "no",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "do",
        "does",
        "did",
        "doing",
        "done",
        "have",
        "has",
        "had",
        "having",
        "can",
        "could",
        "may",
        "might",
        "must",
        "shall",
        "should",
        "will",
        "would",
        "any",
        "all",
        "each",
        "every",
        "some",
        "such",
        "more",
        "most",
        "less",
        "least",
        "many",
        "much",
        "few",
        "other",
        "another",
        "same",
        "own",
        "very",
        "also",
        "only",
        "just",
        "too",
    ]
)


@dataclass(frozen=True)
class DenseRules:
    """The vocabulary rules over the concept index's surfaces (the defaults: the lexical
    grounder's, v3)."""

    # a lone word (one-word normalised surface) of a non-preferred concept is no surface
    lone_words_from_preferred_concept: bool = True
    # an ABB/ACR-tagged term links only where the question writes it as MeSH does
    abbreviations_as_written: bool = True


DEFAULT_DENSE_RULES = DenseRules()
NO_DENSE_RULES = DenseRules(False, False)
# the settings measured (benchmarks/grounding_versions.py --hybrid --dense-rules)
DENSE_RULES: dict[str, DenseRules] = {
    "none": NO_DENSE_RULES,
    "v2_lone_words_preferred_concept": DenseRules(True, False),
    "v3_abbreviations_as_written": DEFAULT_DENSE_RULES,
}


def allowed_surfaces(concepts: ConceptIndex, rules: DenseRules) -> np.ndarray | None:
    """Per surface row, whether a span may link to it under ``rules`` (None: every row,
    also for an index that carries no flags)."""
    if not rules.lone_words_from_preferred_concept or not concepts.has_flags:
        return None
    assert concepts.normalised is not None and concepts.preferred_concept is not None
    lone = np.fromiter((" " not in n for n in concepts.normalised), bool, len(concepts.uis))
    preferred = np.asarray(concepts.preferred_concept, dtype=bool)
    return ~(lone & ~preferred)


@dataclass(frozen=True)
class SpanLink:
    """A dense link considered for a question (kept or not), for evaluation reports."""

    start: int
    end: int
    span: str
    ui: str
    term: str
    score: float
    # False: an abbreviation the question does not write as MeSH does (never grounds)
    written: bool = True


def candidate_spans(
    words: list[str],
    covered: np.ndarray,
    max_span_words: int = 4,
    common_words: frozenset[str] = frozenset(),
) -> list[tuple[int, int]]:
    """Word spans (start, end exclusive) clear of lexical groundings, with no function word
    at either edge, not made of digits alone, and not a lone word of the lexical grounder's
    common-word guard: without that, "affect", "role" or "disease" came straight back as
    exact dense matches (cosine 1.0) to Affect, Role and Disease, 72 links of which 66 were
    not the article's headings on the development questions."""
    spans = []
    n = len(words)
    for start in range(n):
        if covered[start] or words[start] in FUNCTION_WORDS or words[start].isdigit():
            continue
        for end in range(start + 1, min(n, start + max_span_words) + 1):
            if covered[end - 1]:
                break
            last = words[end - 1]
            if last in FUNCTION_WORDS or last.isdigit():
                continue
            if end - start == 1 and words[start] in common_words:
                continue
            spans.append((start, end))
    return spans


class HybridGrounder:
    """Lexical groundings plus dense span links above ``threshold``."""

    def __init__(
        self,
        lexical: Grounder,
        encoder: Encoder,
        concepts: ConceptIndex,
        threshold: float = DEFAULT_THRESHOLD,
        max_span_words: int = 4,
        rules: DenseRules = DEFAULT_DENSE_RULES,
    ) -> None:
        if concepts.fingerprint and concepts.fingerprint != encoder.fingerprint:
            raise ValueError(
                f"concept index was built by {concepts.fingerprint}, encoder is {encoder.fingerprint}"
            )
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold {threshold}: must be in (0, 1]")
        self.lexical = lexical
        self.encoder = encoder
        self.concepts = concepts
        self.threshold = threshold
        self.max_span_words = max_span_words
        self.rules = rules
        self.allowed = allowed_surfaces(concepts, rules)
        self._abbreviations = (
            frozenset(
                i for i, tag in enumerate(concepts.lexical_tags or ()) if tag in ABBREVIATION_TAGS
            )
            if rules.abbreviations_as_written
            else frozenset()
        )

    def with_threshold(self, threshold: float) -> HybridGrounder:
        other = copy.copy(self)  # the same index and rule masks, another threshold
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold {threshold}: must be in (0, 1]")
        other.threshold = threshold
        return other

    def span_links(self, question: str, lexical: list[Grounding] | None = None) -> list[SpanLink]:
        """Every candidate span's best concept, whatever its score (best first)."""
        words = question_words(question)
        lexical = self.lexical.ground(question) if lexical is None else lexical
        covered = np.zeros(len(words), dtype=bool)
        for g in lexical:
            covered[g.start : g.end] = True
        spans = candidate_spans(words, covered, self.max_span_words, self.lexical.common_words)
        if not spans:
            return []
        texts = [" ".join(words[s:e]) for s, e in spans]
        rows, scores = self.concepts.best(self.encoder.encode(texts), allowed=self.allowed)
        links = [
            SpanLink(
                s,
                e,
                t,
                self.concepts.uis[r],
                self.concepts.terms[r],
                float(score),
                self._written(int(r), question),
            )
            for (s, e), t, r, score in zip(spans, texts, rows, scores, strict=True)
        ]
        return sorted(links, key=lambda link: (-link.score, link.start, link.end))

    def _written(self, row: int, question: str) -> bool:
        if row not in self._abbreviations:
            return True
        entry = SurfaceEntry(self.concepts.uis[row], self.concepts.terms[row], "entry", True)
        return written_in(entry, question)

    def ground(self, question: str) -> list[Grounding]:
        lexical = self.lexical.ground(question)
        links = self.span_links(question, lexical)
        return lexical + self.select(links, lexical, len(question_words(question)))

    def select(
        self, links: list[SpanLink], lexical: list[Grounding], n_words: int
    ) -> list[Grounding]:
        """Dense groundings from ranked span links: above threshold, no overlap with each
        other or with the lexical ones, one per descriptor, none to an abbreviation the
        question does not write as MeSH does."""
        taken = np.zeros(n_words, dtype=bool)
        for g in lexical:
            taken[g.start : g.end] = True
        seen = {g.ui for g in lexical}
        out = []
        for link in links:
            if link.score < self.threshold:
                break
            if not link.written or taken[link.start : link.end].any() or link.ui in seen:
                continue
            taken[link.start : link.end] = True
            seen.add(link.ui)
            out.append(
                Grounding(
                    ui=link.ui,
                    name=self.lexical.names.get(link.ui, link.term),
                    surface=link.span,
                    term=link.term,
                    kind=DENSE_KIND,
                    start=link.start,
                    end=link.end,
                    variant=f"cosine={link.score:.3f}",
                )
            )
        return sorted(out, key=lambda g: g.start)
