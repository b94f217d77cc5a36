"""Lexical grounding of a question onto MeSH descriptors, with no model anywhere near it.

The question is normalised, americanised (orthography rules), split into words, and matched
longest-match-first over non-overlapping word spans against every MeSH surface: descriptor
names, entry terms, de-inverted forms and supplementary-concept aliases, plus the few
surfaces the index derives from them (``DERIVED_SURFACE_RULES``). A span that names nothing
as written gets its variants tried in turn: a neoplasm head, the singular, "of" inversion,
then one word in a derived form (``morphology``). A single-word match on an ordinary English
word (the common-word guard) is dropped. Which MeSH terms become surfaces, and which only
as written, is decided from MeSH's own facts about each term (``vocabulary``).
"""

from __future__ import annotations

import copy
import gc
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np

from kg_platform.grounding.common_words import COMMON_WORD_GUARD
from kg_platform.grounding.morphology import derived_forms
from kg_platform.grounding.orthography import (
    ORTHOGRAPHY_CANDIDATES,
    ORTHOGRAPHY_TRIGGERS,
    americanise,
    spell_greek,
)
from kg_platform.text.normalise import normalise
from kg_platform.text.vocabulary import (
    ABBREVIATION_TAGS,
    DEFAULT_RULES,
    VocabularyRules,
    usable_terms,
)

if TYPE_CHECKING:
    import polars as pl

# When one surface names several descriptors, the strongest kind of surface wins, then the
# lowest UI (deterministic).
KIND_PRIORITY: dict[str, int] = {"name": 0, "entry": 1, "deinverted": 2, "scr_alias": 3}
TERM_COLUMNS = ("ui", "term", "normalised", "kind")

# Surfaces the index derives from descriptor names and entry terms (see DERIVED_SURFACE_RULES);
# they rank below every MeSH surface and only fill keys nothing else claims.
DERIVED_KIND = "derived"
_DERIVED_RANK = len(KIND_PRIORITY)
# (name, regex over a key, replacement, which keys it applies to). Measured on the 400
# development questions (BRIDGE groundings made, correct/all):
# - "x_ray": usage drops MeSH's "X-Ray" qualifier: "computed tomography" is Tomography,
#   X-Ray Computed, "micro computed tomography" X-Ray Microtomography (2/3, and the 3
#   questions had grounded the bare "tomography" wrongly before);
# - "symbol_head": a gene or protein symbol (a key with a digit) names its descriptor
#   without the generic head: "ki 67" is Ki-67 Antigen, "ca 19 9" CA-19-9 Antigen (3/3).
#   Keys without a digit keep their head ("dietary" must not become Dietary Proteins).
DERIVED_SURFACE_RULES: tuple[tuple[str, str, str, str], ...] = (
    ("x_ray", r"\s*\bx ray\b\s*", " ", r"\bx ray\b"),
    (
        "symbol_head",
        r" (antigen|antigens|protein|proteins|gene|genes)$",
        "",
        r"\d.* (antigen|antigens|protein|proteins|gene|genes)$",
    ),
)


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


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while many acyclic objects are made, then as it was."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def surface_key(normalised_term: str) -> str:
    """The lookup key of a surface: normalised text with the orthography rules applied."""
    return americanise(normalised_term)


def question_words(question: str) -> list[str]:
    return surface_key(normalise(spell_greek(question))).split()


class SurfaceEntry(NamedTuple):
    """One surface of the index (a tuple: ~700k of them are made per grounder)."""

    ui: str
    term: str
    kind: str
    # an abbreviation or acronym: it matches only where the question writes ``term`` itself
    as_written: bool = False


def build_surface_table(
    terms: pl.DataFrame, rules: VocabularyRules = DEFAULT_RULES
) -> pl.DataFrame:
    """One row per lookup key: (key, ui, term, kind, as_written), resolving clashes by
    KIND_PRIORITY, then (with ``rules.clash_by_concept``) the descriptor whose preferred
    concept holds the key and its concept's preferred term, then UI. The terms are those
    ``vocabulary.usable_terms`` keeps under ``rules``.

    This is the grounding index; the ``grounding_index`` asset writes it, and its load-ready
    form (``surface_index``), so the API does not redo it on every open."""
    import polars as pl

    missing = [c for c in TERM_COLUMNS if c not in terms.columns]
    if missing:
        raise ValueError(f"MeSH terms table: missing columns {missing} (has {terms.columns})")
    unknown = set(terms["kind"].unique().to_list()) - set(KIND_PRIORITY)
    if unknown:
        raise ValueError(f"MeSH terms table: unknown term kinds {sorted(unknown)}")
    terms = usable_terms(terms, rules)
    # the rules change only terms where a rule's pattern matches: those few are mapped
    # through Python alone. The rows stay in the order of the needle split (the terms without
    # a needle, then those with one), which the sort below keeps among equal (key, rank, ui).
    kind_rank = pl.col("kind").replace_strict(KIND_PRIORITY, return_dtype=pl.Int8)
    if rules.clash_by_concept:
        # 0..3 within a kind: preferred concept first, then its concept's preferred term
        concept_rank = (~pl.col("preferred_concept")).cast(pl.Int8) * 2 + (
            ~pl.col("concept_preferred").fill_null(True)
        ).cast(pl.Int8)
        rank = (kind_rank * 4 + concept_rank).cast(pl.Int8).alias("rank")
    else:
        rank = (kind_rank * 4).cast(pl.Int8).alias("rank")
    as_written = (
        pl.col("lexical_tag").is_in(ABBREVIATION_TAGS).fill_null(False)
        if rules.abbreviations_as_written
        else pl.lit(False)
    ).alias("as_written")
    columns = ["ui", "term", "kind", rank, as_written, "preferred_concept"]
    has_needle = pl.col("normalised").str.contains(ORTHOGRAPHY_TRIGGERS)
    ordered = pl.concat([terms.filter(~has_needle), terms.filter(has_needle)])
    keys = ordered["normalised"]
    ruled = keys.str.contains(ORTHOGRAPHY_CANDIDATES).arg_true()
    if ruled.len():
        americanised = [surface_key(k) for k in keys.gather(ruled).to_list()]
        keys = keys.scatter(ruled, pl.Series(americanised, dtype=pl.Utf8))
    keyed = (
        ordered.with_columns(keys.alias("normalised"))
        .select(pl.col("normalised").alias("key"), *columns)
        .filter(pl.col("key").str.len_chars() > 0)
    )
    keyed = pl.concat([keyed, derived_surfaces(keyed)])
    return (
        keyed.sort(["key", "rank", "ui"])
        .unique("key", keep="first", maintain_order=True)
        .select("key", "ui", "term", "kind", "as_written")
    )


def derived_surfaces(keyed: pl.DataFrame) -> pl.DataFrame:
    """Extra (key, ui, term, kind, rank) rows from DERIVED_SURFACE_RULES over descriptor
    names, entry terms and de-inverted forms (never supplementary aliases). A derived key
    is kept only when no MeSH surface claims it and it names a single descriptor."""
    import polars as pl

    source = keyed.filter(pl.col("kind") != "scr_alias")
    if "preferred_concept" in source.columns:
        # the rules were measured on the preferred concept's terms (all the descriptor TSV
        # had); from other concepts "diagnostic x ray" made "diagnostic" Radiography, 1/4
        source = source.filter(pl.col("preferred_concept"))
    parts = [
        source.filter(pl.col("key").str.contains(applies)).with_columns(
            pl.col("key")
            .str.replace_all(pattern, replacement)
            .str.replace_all(r"\s+", " ")
            .str.strip_chars()
        )
        for _, pattern, replacement, applies in DERIVED_SURFACE_RULES
    ]
    derived = (
        pl.concat(parts)
        .filter(pl.col("key").str.len_chars() > 2)
        .join(keyed.select("key").unique(), on="key", how="anti")
    )
    unambiguous = (
        derived.group_by("key").agg(pl.col("ui").n_unique().alias("n")).filter(pl.col("n") == 1)
    )
    return (
        derived.join(unambiguous.select("key"), on="key", how="semi")
        .sort(["key", "rank", "ui"])
        .unique("key", keep="first", maintain_order=True)
        .with_columns(
            pl.lit(DERIVED_KIND).alias("kind"),
            pl.lit(_DERIVED_RANK * 4, dtype=pl.Int8).alias("rank"),
        )
        .select(keyed.columns)
    )


# A question names a tumour by its site and "cancer"; MeSH calls it "<site> Neoplasms".
# "carcinoma" joined the list on the development questions: "gallbladder carcinoma",
# "oropharyngeal carcinoma" and "colorectal carcinoma" became the site's Neoplasms, all
# three the article's own headings (a carcinoma MeSH names itself, "hepatocellular
# carcinoma", still matches as written first).
NEOPLASM_HEADS = frozenset(
    {"cancer", "cancers", "tumor", "tumors", "neoplasm", "carcinoma", "carcinomas"}
)


def span_variants(words: list[str]) -> list[tuple[str, str]]:
    """Other spellings of a span to try when the span itself names nothing: neoplasm heads
    and plural-to-singular of its last word, and "of" inversion. Returns (key, variant
    name) pairs."""
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
    inverted = of_inversion(words)
    if inverted is not None:
        variants.append((inverted, "of_inversion"))
    return variants


# articles dropped after "of" when a phrase is turned round ("resection of the prostate")
_ARTICLES = frozenset({"the", "a", "an"})


def of_inversion(words: list[str]) -> str | None:
    """ "<head> of [the] <modifier>" read as "<modifier> <head>", the order MeSH terms use:
    "ossification of the posterior longitudinal ligament" -> "posterior longitudinal
    ligament ossification". Only a span with exactly one inner "of". On the development
    questions it found 4 BRIDGE descriptors, 3 of them the article's own headings. (The
    plain two-word swap, "a b" -> "b a", found 1, wrong: "factor a" became Vitamin B 12.)"""
    if words.count("of") != 1:
        return None
    at = words.index("of")
    head, modifier = words[:at], words[at + 1 :]
    if modifier and modifier[0] in _ARTICLES:
        modifier = modifier[1:]
    if not head or not modifier:
        return None
    return " ".join([*modifier, *head])


def derived_variants(words: list[str]) -> list[tuple[str, str]]:
    """The span with one word in a derived form (``morphology.SUFFIX_RULES``), for a span
    that named nothing as written: "laparoscopic" -> "laparoscopy". Returns (key, variant
    name) pairs, leftmost word first."""
    variants: list[tuple[str, str]] = []
    for i, word in enumerate(words):
        for form, rule in derived_forms(word):
            key = " ".join([*words[:i], form, *words[i + 1 :]])
            variants.append((key, "suffix_" + rule))
    return variants


def written_in(entry: SurfaceEntry, question: str) -> bool:
    """False for an abbreviation the question does not write as MeSH does ("who" is not
    WHO); True for every other surface."""
    if not entry.as_written:
        return True
    return (
        re.search(rf"(?<![A-Za-z0-9]){re.escape(entry.term)}(?![A-Za-z0-9])", question) is not None
    )


class SurfaceLookup(Protocol):
    """What the grounder asks of its index: the load-ready ``surface_index.SurfaceIndex``
    answers as the dict made from a surface table does."""

    longest_key_words: int

    def get(self, key: str, default: None = None) -> SurfaceEntry | None: ...

    def __len__(self) -> int: ...


class Grounder:
    """Longest-match-first lexical grounder over a surface table (see ``build_surface_table``),
    or over the load-ready index of one (``surface_index.SurfaceIndex``), with the same
    groundings."""

    def __init__(
        self,
        surfaces: pl.DataFrame | SurfaceLookup,
        names: Mapping[str, str],
        common_words: Iterable[str] = COMMON_WORD_GUARD,
        max_span_words: int = 10,
        variants: bool = True,
    ) -> None:
        self.variants = variants
        self.common_words = frozenset(common_words)
        if hasattr(surfaces, "longest_key_words"):
            self._index: Mapping[str, SurfaceEntry] | SurfaceLookup = surfaces
            self.max_span_words = min(max_span_words, surfaces.longest_key_words)
            # the index's own Mapping, read per lookup: never copied into a dict
            self.names = names
            return
        keys = surfaces["key"].to_list()
        # an index written before abbreviations were marked has no as_written column
        as_written = (
            surfaces["as_written"].fill_null(False).to_list()
            if "as_written" in surfaces.columns
            else [False] * surfaces.height
        )
        columns = (surfaces["ui"].to_list(), surfaces["term"].to_list(), surfaces["kind"].to_list())
        entries = map(SurfaceEntry._make, zip(*columns, as_written, strict=True))
        # ~800k tuples: the cyclic collector would walk the whole heap every few thousand of
        # them (4x the time); tuples of strings make no cycles
        with gc_paused():
            self._index = dict(zip(keys, entries, strict=True))
        spaces = surfaces["key"].str.count_matches(" ", literal=True).max()
        longest = 1 if spaces is None else int(spaces) + 1  # type: ignore[arg-type]
        self.max_span_words = min(max_span_words, longest)
        self.names = dict(names)

    def with_common_words(self, common_words: Iterable[str]) -> Grounder:
        """The same surfaces (the index shared, not rebuilt) behind another common-word guard."""
        other = copy.copy(self)
        other.common_words = frozenset(common_words)
        return other

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

    def _match(self, span: list[str], question: str) -> tuple[SurfaceEntry, str, str | None] | None:
        key = " ".join(span)
        entry = self._index.get(key)
        if entry is not None and written_in(entry, question):
            return entry, key, None
        if self.variants:
            for variant_key, variant in (*span_variants(span), *derived_variants(span)):
                entry = self._index.get(variant_key)
                if entry is not None and written_in(entry, question):
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
                found = self._match(words[start:end], question)
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
