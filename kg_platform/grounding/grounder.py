"""Lexical grounding of a question onto MeSH descriptors, with no model anywhere near it.

The question is normalised, americanised (orthography rules), split into words, and matched
longest-match-first over non-overlapping word spans against every MeSH surface: descriptor
names, entry terms, de-inverted forms and supplementary-concept aliases. A single-word match
on an ordinary English word (the common-word guard) is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import polars as pl

from kg_platform.grounding.common_words import COMMON_WORD_GUARD
from kg_platform.grounding.normalise import normalise
from kg_platform.grounding.orthography import ORTHOGRAPHY_TRIGGERS, americanise, spell_greek

# When one surface names several descriptors, the strongest kind of surface wins, then the
# lowest UI (deterministic).
KIND_PRIORITY: dict[str, int] = {"name": 0, "entry": 1, "deinverted": 2, "scr_alias": 3}
TERM_COLUMNS = ("ui", "term", "normalised", "kind")


@dataclass(frozen=True)
class Grounding:
    """One descriptor found in a question: which words (``start``..``end`` exclusive, over
    the normalised question's words) matched which MeSH surface."""

    ui: str
    name: str
    surface: str
    term: str
    kind: str
    start: int
    end: int
    variant: str | None = None

    @property
    def n_words(self) -> int:
        return self.end - self.start


def surface_key(normalised_term: str) -> str:
    """The lookup key of a surface: normalised text with the orthography rules applied."""
    return americanise(normalised_term)


def question_words(question: str) -> list[str]:
    return surface_key(normalise(spell_greek(question))).split()


@dataclass(frozen=True)
class SurfaceEntry:
    ui: str
    term: str
    kind: str


def build_surface_table(terms: pl.DataFrame) -> pl.DataFrame:
    """One row per lookup key: (key, ui, term, kind), resolving clashes by KIND_PRIORITY, UI.

    This is the grounding index; the ``grounding_index`` asset writes it so the API does not
    redo it on every open."""
    missing = [c for c in TERM_COLUMNS if c not in terms.columns]
    if missing:
        raise ValueError(f"MeSH terms table: missing columns {missing} (has {terms.columns})")
    unknown = set(terms["kind"].unique().to_list()) - set(KIND_PRIORITY)
    if unknown:
        raise ValueError(f"MeSH terms table: unknown term kinds {sorted(unknown)}")
    # the rules only touch terms holding a trigger (polars would evaluate both branches of a
    # when/then, so the few that need Python are split off and mapped alone)
    needs_rules = pl.col("normalised").str.contains(ORTHOGRAPHY_TRIGGERS)
    rank = pl.col("kind").replace_strict(KIND_PRIORITY, return_dtype=pl.Int8).alias("rank")
    plain = terms.filter(~needs_rules).select(
        pl.col("normalised").alias("key"), "ui", "term", "kind", rank
    )
    ruled = terms.filter(needs_rules).select(
        pl.col("normalised").map_elements(surface_key, return_dtype=pl.Utf8).alias("key"),
        "ui",
        "term",
        "kind",
        rank,
    )
    keyed = pl.concat([plain, ruled]).filter(pl.col("key").str.len_chars() > 0)
    return (
        keyed.sort(["key", "rank", "ui"])
        .unique("key", keep="first", maintain_order=True)
        .select("key", "ui", "term", "kind")
    )


# A question names a tumour by its site and "cancer"; MeSH calls it "<site> Neoplasms".
NEOPLASM_HEADS = frozenset({"cancer", "cancers", "tumor", "tumors", "neoplasm", "carcinomas"})


def span_variants(words: list[str]) -> list[tuple[str, str]]:
    """Other spellings of a span's last word to try when the span itself names nothing:
    neoplasm heads and plural-to-singular. Returns (key, variant name) pairs."""
    *head, last = words
    prefix = " ".join(head) + " " if head else ""
    variants: list[tuple[str, str]] = []
    if last in NEOPLASM_HEADS and head:
        variants.append((prefix + "neoplasms", "neoplasm_head"))
    if last.endswith("ies") and len(last) > 4:
        variants.append((prefix + last[:-3] + "y", "singular"))
    elif last.endswith("s") and not last.endswith(("ss", "us", "is")) and len(last) > 3:
        variants.append((prefix + last[:-1], "singular"))
    # No singular-to-plural variant: on the development questions it found 27 descriptors
    # of which 3 were the article's own headings.
    return variants


class Grounder:
    """Longest-match-first lexical grounder over a surface table (see ``build_surface_table``)."""

    def __init__(
        self,
        surfaces: pl.DataFrame,
        names: Mapping[str, str],
        common_words: Iterable[str] = COMMON_WORD_GUARD,
        max_span_words: int = 10,
        variants: bool = True,
    ) -> None:
        self.variants = variants
        keys = surfaces["key"].to_list()
        entries = [
            SurfaceEntry(u, t, k)
            for u, t, k in zip(
                surfaces["ui"].to_list(),
                surfaces["term"].to_list(),
                surfaces["kind"].to_list(),
                strict=True,
            )
        ]
        self._index: dict[str, SurfaceEntry] = dict(zip(keys, entries, strict=True))
        longest = max((k.count(" ") + 1 for k in keys), default=1)
        self.max_span_words = min(max_span_words, longest)
        self.common_words = frozenset(common_words)
        self.names = dict(names)

    @classmethod
    def from_terms(
        cls,
        terms: pl.DataFrame,
        descriptors: pl.DataFrame,
        common_words: Iterable[str] = COMMON_WORD_GUARD,
    ) -> Grounder:
        names = dict(zip(descriptors["ui"].to_list(), descriptors["name"].to_list(), strict=True))
        return cls(build_surface_table(terms), names, common_words)

    def __len__(self) -> int:
        return len(self._index)

    def lookup(self, text: str) -> SurfaceEntry | None:
        return self._index.get(surface_key(normalise(text)))

    def _match(self, span: list[str]) -> tuple[SurfaceEntry, str, str | None] | None:
        key = " ".join(span)
        entry = self._index.get(key)
        if entry is not None:
            return entry, key, None
        if self.variants:
            for variant_key, variant in span_variants(span):
                entry = self._index.get(variant_key)
                if entry is not None:
                    return entry, variant_key, variant
        return None

    def ground(self, question: str) -> list[Grounding]:
        """Descriptors named in ``question``, in question order, one per descriptor."""
        words = question_words(question)
        n = len(words)
        candidates: list[tuple[int, int, SurfaceEntry, str, str | None]] = []
        for start in range(n):
            for end in range(min(n, start + self.max_span_words), start, -1):
                if end - start == 1 and words[start] in self.common_words:
                    continue
                found = self._match(words[start:end])
                if found is not None:
                    candidates.append((start, end, *found))
                    break  # the longest match starting here; shorter ones lose to it anyway
        # Longest first, then leftmost; a span keeps its words, so no overlaps.
        candidates.sort(key=lambda c: (c[0] - c[1], c[0]))
        taken = np.zeros(n, dtype=bool)
        chosen: dict[str, Grounding] = {}
        for start, end, entry, key, variant in candidates:
            if taken[start:end].any():
                continue
            taken[start:end] = True
            if entry.ui in chosen:
                continue
            chosen[entry.ui] = Grounding(
                ui=entry.ui,
                name=self.names.get(entry.ui, entry.term),
                surface=key,
                term=entry.term,
                kind=entry.kind,
                start=start,
                end=end,
                variant=variant,
            )
        return sorted(chosen.values(), key=lambda g: g.start)
