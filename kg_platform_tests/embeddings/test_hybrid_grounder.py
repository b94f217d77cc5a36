from functools import lru_cache

import numpy as np
import polars as pl
import pytest

from kg_platform.embeddings.concepts import ConceptIndex, build_concept_index, concept_surfaces
from kg_platform.embeddings.feeder import FeederSettings
from kg_platform.grounding.grounder import Grounder, build_surface_table, question_words
from kg_platform.grounding.hybrid import (
    DENSE_KIND,
    FUNCTION_WORDS,
    HybridGrounder,
    candidate_spans,
)
from kg_platform.storage.lake import Lake
from kg_platform.text.normalise import normalise
from kg_platform_tests.embeddings.models import packaged_encoder

# a few real MeSH 2024 descriptors with some of their entry terms
DESCRIPTORS = {
    "D001241": ("Aspirin", ["Acetylsalicylic Acid"]),
    "D009203": ("Myocardial Infarction", ["Heart Attack", "Cardiovascular Stroke"]),
    "D006973": ("Hypertension", ["High Blood Pressure"]),
    "D003920": ("Diabetes Mellitus", []),
}
QUESTION = "Does aspirin reduce cardiac infarctions in people with raised blood pressure?"


def _terms() -> pl.DataFrame:
    rows = []
    for ui, (name, entries) in DESCRIPTORS.items():
        rows.append((ui, name, normalise(name), "name"))
        rows += [(ui, e, normalise(e), "entry") for e in entries]
    return pl.DataFrame(rows, schema=["ui", "term", "normalised", "kind"], orient="row")


@lru_cache(maxsize=1)
def _hybrid(tmp: str) -> HybridGrounder:
    lake = Lake(tmp)
    lake.write_parquet("mesh/terms.parquet", _terms().to_arrow())
    build = build_concept_index(lake, packaged_encoder(), FeederSettings(workers=0))
    assert (build.surfaces, build.descriptors) == (8, 4)
    names = {ui: name for ui, (name, _) in DESCRIPTORS.items()}
    lexical = Grounder(build_surface_table(_terms()), names)
    return HybridGrounder(lexical, packaged_encoder(), ConceptIndex.open(lake), threshold=0.5)


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    return _hybrid(str(tmp_path_factory.mktemp("concepts")))


def test_candidate_spans_never_start_or_end_on_a_function_word_or_cross_a_lexical_hit():
    words = question_words(QUESTION)
    covered = np.zeros(len(words), dtype=bool)
    covered[1] = True  # "aspirin", grounded lexically
    spans = candidate_spans(words, covered, max_span_words=4)
    texts = [" ".join(words[s:e]) for s, e in spans]
    assert all(
        words[s] not in FUNCTION_WORDS and words[e - 1] not in FUNCTION_WORDS for s, e in spans
    )
    assert not any(s <= 1 < e for s, e in spans)
    assert "cardiac infarctions" in texts and "people with raised blood" in texts
    assert "infarctions in" not in texts and "does" not in texts
    assert texts[:4] == ["reduce", "reduce cardiac", "reduce cardiac infarctions", "cardiac"]


def test_concept_surfaces_keep_names_and_entry_terms_once_per_descriptor():
    terms = pl.concat(
        [
            _terms(),
            pl.DataFrame(
                [("D001241", "Aspirin", "aspirin", "deinverted")],
                schema=["ui", "term", "normalised", "kind"],
                orient="row",
            ),
        ]
    )
    surfaces = concept_surfaces(terms)
    aspirin = surfaces.filter(pl.col("ui") == "D001241")
    assert aspirin.select("kind", "normalised").rows() == [
        ("name", "aspirin"),
        ("entry", "acetylsalicylic acid"),
    ]
    assert surfaces.height == 8


def test_dense_links_add_to_lexical_groundings_and_never_replace_them(hybrid):
    lexical = hybrid.lexical.ground(QUESTION)
    assert [(g.ui, g.start, g.end) for g in lexical] == [("D001241", 1, 2)]
    grounded = hybrid.ground(QUESTION)
    assert grounded[: len(lexical)] == lexical
    dense = [g for g in grounded if g.kind == DENSE_KIND]
    links = {link.span: link for link in hybrid.span_links(QUESTION)}
    by_ui = {g.ui: g for g in dense}
    assert set(by_ui) == {"D009203", "D006973"}
    assert by_ui["D009203"].surface == "cardiac infarctions"
    assert by_ui["D006973"].surface in ("raised blood pressure", "blood pressure")
    for g in dense:
        assert links[g.surface].score >= 0.5
        assert g.variant == f"cosine={links[g.surface].score:.3f}"
    # a threshold above every link leaves the lexical answer exactly as it was
    assert hybrid.with_threshold(1.0).ground(QUESTION) == lexical
