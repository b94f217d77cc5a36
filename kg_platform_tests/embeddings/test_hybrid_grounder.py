import numpy as np
import polars as pl
import pytest

from kg_platform.embeddings.concepts import concept_surfaces
from kg_platform.grounding.grounder import question_words
from kg_platform.grounding.hybrid import (
    DENSE_KIND,
    FUNCTION_WORDS,
    candidate_spans,
)
from kg_platform_tests.support.hybrid import hybrid_grounder, mesh_terms

QUESTION = "Does aspirin reduce cardiac infarctions in people with raised blood pressure?"


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    return hybrid_grounder(str(tmp_path_factory.mktemp("concepts")))


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
            mesh_terms(),
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
