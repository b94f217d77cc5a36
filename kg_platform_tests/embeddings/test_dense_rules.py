"""The lexical grounder's MeSH vocabulary rules applied to dense links, on real thesaurus rows.

The concept index's surfaces carry two MeSH facts (not embedded): whether a term of the
surface belongs to its descriptor's preferred concept, and NLM's lexical tag of the term
embedded. A lone word of a non-preferred concept ("Self" of Ego) is no surface a span can
link to; an ABB/ACR term ("ICSI") links only where the question writes it as MeSH does.
Real MeSH 2024 thesaurus rows, the packaged MiniLM, no mocks.
"""

from __future__ import annotations

from functools import lru_cache

import polars as pl
import pytest

from kg_platform.embeddings.concepts import (
    CONCEPT_SURFACES,
    MESH_TERMS,
    ConceptIndex,
    build_concept_index,
    concept_surfaces,
)
from kg_platform.embeddings.feeder import FeederSettings
from kg_platform.evaluation.grounding.hybrid import provide_concept_index, surfaces_digest
from kg_platform.grounding.grounder import Grounder, build_surface_table
from kg_platform.grounding.hybrid import (
    DENSE_KIND,
    NO_DENSE_RULES,
    DenseRules,
    HybridGrounder,
    allowed_surfaces,
)
from kg_platform.mesh.tsv import read_thesaurus_tsv
from kg_platform.storage.lake import Lake
from kg_platform.text.normalise import normalise
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.embeddings.models import packaged_encoder

INLINE = FeederSettings(workers=0)
EGO, ICSI, ASPIRIN = "D004532", "D020554", "D001241"


@lru_cache(maxsize=1)
def _thesaurus_terms() -> pl.DataFrame:
    """Every term of Ego, Sperm Injections, Intracytoplasmic and Aspirin from the real
    thesaurus table, as the MeSH loader lays them out (the record-preferred term is the
    name row, every other term an entry)."""
    path = require_reference("mesh", "thesaurus", "desc2024_terms.tsv.gz")
    entries = read_thesaurus_tsv(str(path))["entries"]
    rows = entries.filter(pl.col("ui").is_in([EGO, ICSI, ASPIRIN]))
    return rows.select(
        "ui",
        "term",
        pl.col("term").map_elements(normalise, return_dtype=pl.Utf8).alias("normalised"),
        pl.when(pl.col("record_preferred")).then(pl.lit("name")).otherwise(pl.lit("entry"))
        .alias("kind"),
        "concept_ui",
        "term_ui",
        "concept_preferred",
        "permuted",
        "lexical_tag",
    )  # fmt: skip


def test_index_surfaces_carry_the_preferred_concept_flag_and_the_lexical_tag():
    surfaces = concept_surfaces(_thesaurus_terms())
    ego = surfaces.filter(pl.col("ui") == EGO)
    assert ego.rows() == [
        (EGO, "Ego", "ego", "name", True, "NON"),
        (EGO, "Egos", "egos", "entry", True, "NON"),
        # the preferred term of Ego's second concept, M0007132
        (EGO, "Self", "self", "entry", False, "NON"),
    ]
    icsi = surfaces.filter(pl.col("ui") == ICSI, pl.col("lexical_tag") != "NON")
    assert icsi.rows() == [(ICSI, "ICSI", "icsi", "entry", True, "ACR")]
    # a terms table without concepts (the descriptor TSV): every surface is the preferred
    # concept's and has no tag
    bare = concept_surfaces(_thesaurus_terms().select("ui", "term", "normalised", "kind"))
    assert bare.filter(pl.col("normalised") == "self").rows() == [
        (EGO, "Self", "self", "entry", True, None)
    ]
    assert bare.select("ui", "term").rows() == surfaces.select("ui", "term").rows()


def test_a_change_of_flags_alone_reuses_every_cached_vector(tmp_path):
    encoder = packaged_encoder()
    bare = _thesaurus_terms().select("ui", "term", "normalised", "kind")
    lake = Lake(str(tmp_path / "lake"))
    lake.write_parquet(MESH_TERMS, bare.to_arrow())
    first = build_concept_index(lake, encoder, INLINE)
    lake.write_parquet(MESH_TERMS, _thesaurus_terms().to_arrow())
    second = build_concept_index(lake, encoder, INLINE)
    assert (first.surfaces, first.embedded, first.reused) == (30, 30, 0)
    assert (second.surfaces, second.embedded, second.reused) == (30, 0, 30)
    surfaces = pl.from_arrow(lake.read_parquet(CONCEPT_SURFACES))
    assert surfaces.columns == [
        "ui",
        "term",
        "normalised",
        "kind",
        "preferred_concept",
        "lexical_tag",
    ]
    index = ConceptIndex.open(lake)
    assert index.has_flags
    assert index.preferred_concept[index.terms.index("Self")] is False
    assert index.lexical_tags[index.terms.index("ICSI")] == "ACR"

    # the evaluation's cached index is named by the flags too: a new one, built from the
    # vector cache alone
    root = tmp_path / "cache"
    _, info = provide_concept_index(bare, encoder, None, root)
    assert (info.built_now, info.embedded, info.reused) == (True, 30, 0)
    _, info = provide_concept_index(_thesaurus_terms(), encoder, None, root)
    assert (info.built_now, info.embedded, info.reused) == (True, 0, 30)
    assert surfaces_digest(bare, encoder.fingerprint) != surfaces_digest(
        _thesaurus_terms(), encoder.fingerprint
    )


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> ConceptIndex:
    lake = Lake(str(tmp_path_factory.mktemp("dense_rules")))
    lake.write_parquet(MESH_TERMS, _thesaurus_terms().to_arrow())
    build_concept_index(lake, packaged_encoder(), INLINE)
    return ConceptIndex.open(lake)


def _hybrid(index: ConceptIndex, rules: DenseRules) -> HybridGrounder:
    # the lexical grounder knows Aspirin only, so Ego and ICSI can only come as dense links
    aspirin = _thesaurus_terms().filter(pl.col("ui") == ASPIRIN)
    names = {EGO: "Ego", ICSI: "Sperm Injections, Intracytoplasmic", ASPIRIN: "Aspirin"}
    lexical = Grounder(build_surface_table(aspirin), names)
    return HybridGrounder(lexical, packaged_encoder(), index, threshold=0.9, rules=rules)


def _dense(hybrid: HybridGrounder, question: str) -> list[tuple[str, str, str]]:
    return [(g.ui, g.surface, g.term) for g in hybrid.ground(question) if g.kind == DENSE_KIND]


def test_allowed_surfaces_drop_lone_words_of_non_preferred_concepts_only(index):
    allowed = allowed_surfaces(index, DenseRules())
    blocked = [term for term, ok in zip(index.terms, allowed, strict=True) if not ok]
    # Aspirin's one-word trade names (TRD, each its own concept) and Ego's "Self"; Aspirin's
    # multi-word terms and Ego's own name stay
    trade_names = [
        "Acetysal", "Acylpyrin", "Aloxiprimum", "Colfarit", "Dispril", "Easprin", "Ecotrin",
        "Endosprin", "Magnecyl", "Micristin", "Polopirin", "Polopiryna", "Solprin", "Solupsan",
        "Zorprin",
    ]  # fmt: skip
    assert blocked == [*trade_names, "Self"]
    assert {index.lexical_tags[index.terms.index(t)] for t in trade_names} == {"TRD"}
    assert len(allowed) - len(blocked) == 14
    assert allowed_surfaces(index, NO_DENSE_RULES) is None
    # an index written before the flags were carried: no rule can be read, every row links
    unflagged = ConceptIndex(index.uis, index.terms, index.vectors, index.fingerprint)
    assert not unflagged.has_flags and allowed_surfaces(unflagged, DenseRules()) is None
    assert allowed_surfaces(index, DenseRules(False, True)) is None


def test_a_dense_link_to_a_lone_word_of_a_non_preferred_concept_is_dropped(index):
    question = "Does self matter after aspirin?"
    assert _dense(_hybrid(index, NO_DENSE_RULES), question) == [(EGO, "self", "Self")]
    ruled = _hybrid(index, DenseRules())
    assert _dense(ruled, question) == []
    # the span links to its best other surface instead, far below the threshold
    link = next(link for link in ruled.span_links(question) if link.span == "self")
    assert (link.term, round(link.score, 3)) == ("Ego", 0.635)
    # a lone word of the preferred concept still links
    assert _dense(ruled, "Does the ego matter after aspirin?") == [(EGO, "ego", "Ego")]


def test_an_abbreviation_links_only_where_written_as_mesh_writes_it(index):
    ruled = _hybrid(index, DenseRules())
    assert _dense(ruled, "Is ICSI better than aspirin?") == [(ICSI, "icsi", "ICSI")]
    assert _dense(ruled, "Is icsi better than aspirin?") == []
    [link] = [
        link for link in ruled.span_links("Is icsi better than aspirin?") if link.span == "icsi"
    ]
    assert (link.term, link.written, round(link.score, 3)) == ("ICSI", False, 1.0)
    # without the rule the lower-case word links too
    assert _dense(_hybrid(index, DenseRules(True, False)), "Is icsi better than aspirin?") == [
        (ICSI, "icsi", "ICSI")
    ]
