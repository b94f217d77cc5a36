"""Which MeSH terms become grounding surfaces, using what MeSH says about each term.

The thesaurus gives every term its concept, whether it is its concept's preferred term,
whether NLM generated it as a permuted variant, and a lexical tag (NON, ABB/ACR
abbreviations and acronyms, TRD trade names, LAB lab numbers, EPO eponyms, ...). These are
MeSH's own facts about a term, not lists of question words, so rules over them carry to
questions nobody here has seen. Each rule was measured on the development questions
(``benchmarks/grounding_versions.py``: chosen on its ``fit`` fold, checked on ``held``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the table functions import it when called: grounding a question needs none
    import polars as pl

# abbreviations and acronyms as NLM tags them: "WHO", "MS", "CAT" are also English words
ABBREVIATION_TAGS = ("ABB", "ACR")


@dataclass(frozen=True)
class VocabularyRules:
    """Switches over the terms table; the defaults are the measured choice."""

    # a single word that names a descriptor's non-preferred concept ("self" -> Ego,
    # "conception" -> Fertilization) does not ground: such concepts are narrower or only
    # related, and alone a word carries nothing else to confirm them
    lone_words_from_preferred_concept: bool = True
    # an abbreviation or acronym term grounds only where the question writes it as MeSH
    # does (case and all): "WHO" the organisation, never "who"
    abbreviations_as_written: bool = True
    # when one key names several descriptors, the one whose preferred concept holds it wins
    # (then its concept's preferred term), before the lowest UI. Off: it changed no
    # grounding of the development questions.
    clash_by_concept: bool = False


DEFAULT_RULES = VocabularyRules()
NO_RULES = VocabularyRules(False, False, False)

# the versions measured, in order (see benchmarks/grounding_versions.py)
VOCABULARY_RULES: dict[str, VocabularyRules] = {
    "v1_all_concepts": NO_RULES,
    "v2_lone_words_preferred_concept": VocabularyRules(True, False, False),
    "v3_abbreviations_as_written": VocabularyRules(True, True, False),
    "v4_clash_by_concept": VocabularyRules(True, True, True),
}


def with_concept_features(terms: pl.DataFrame) -> pl.DataFrame:
    """``preferred_concept``: the term belongs to its descriptor's preferred concept (the
    concept of the name row). True where the source gives no concepts (descriptors TSV:
    its entry terms are the preferred concept's) and for supplementary aliases."""
    import polars as pl

    if "concept_ui" not in terms.columns:
        return terms.with_columns(
            pl.lit(True).alias("preferred_concept"),
            pl.lit(None, dtype=pl.Boolean).alias("concept_preferred"),
            pl.lit(None, dtype=pl.Utf8).alias("lexical_tag"),
        )
    preferred = (
        terms.filter((pl.col("kind") == "name") & pl.col("concept_ui").is_not_null())
        .select("ui", pl.col("concept_ui").alias("_preferred_concept"))
        .unique("ui", keep="first")
    )
    return (
        terms.join(preferred, on="ui", how="left")
        .with_columns(
            (
                pl.col("concept_ui").is_null()
                | pl.col("_preferred_concept").is_null()
                | (pl.col("concept_ui") == pl.col("_preferred_concept"))
            ).alias("preferred_concept")
        )
        .drop("_preferred_concept")
    )


def usable_terms(terms: pl.DataFrame, rules: VocabularyRules = DEFAULT_RULES) -> pl.DataFrame:
    """The terms that may become surfaces under ``rules``, with ``preferred_concept``."""
    import polars as pl

    featured = with_concept_features(terms)
    if rules.lone_words_from_preferred_concept:
        lone = ~pl.col("normalised").str.contains(" ", literal=True)
        featured = featured.filter(~(lone & ~pl.col("preferred_concept")))
    return featured
