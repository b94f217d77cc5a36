"""Pair scoring and candidate paths on the small real-shaped graph."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kg_platform.graph.store import KGStore
from kg_platform.grounding.grounder import Grounding
from kg_platform.retrieval.candidates import BRIDGE
from kg_platform.retrieval.linking import concepts_in_graph, score_pairs
from kg_platform.retrieval.paths import CITED_BY, CITES, DIRECT, collect_candidates
from kg_platform.storage.lake import Lake
from kg_platform_tests.answer.graph_fixture import ASPIRIN, HEPARIN, MI, build_question_graph


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> KGStore:
    lake = Lake(str(tmp_path_factory.mktemp("linking") / "lake"))
    build_question_graph(lake)
    return KGStore.open(lake)


def _g(ui: str, name: str, start: int) -> Grounding:
    return Grounding(ui, name, name.lower(), name, "name", start, start + 1)


def test_pairs_are_scored_by_major_co_annotation(store: KGStore) -> None:
    concepts = concepts_in_graph(
        store,
        [_g(HEPARIN, "Heparin", 0), _g(ASPIRIN, "Aspirin", 1), _g(MI, "Myocardial Infarction", 2),
         _g("D999999", "Unknown", 3)],
    )  # fmt: skip
    assert [c.grounding.ui for c in concepts] == [HEPARIN, ASPIRIN, MI]
    pairs = score_pairs(store, concepts)
    assert [(p.a_ui, p.b_ui, p.major_co_annotations) for p in pairs] == [
        (ASPIRIN, MI, 1),
        (HEPARIN, ASPIRIN, 0),
        (HEPARIN, MI, 0),
    ]


def test_every_candidate_is_collected(store: KGStore) -> None:
    pair = score_pairs(
        store, concepts_in_graph(store, [_g(ASPIRIN, "Aspirin", 0), _g(MI, "MI", 1)])
    )[0]
    c = collect_candidates(store, pair)
    pmids = store.array("pmids")
    rows = sorted(
        zip(
            c.kind.tolist(),
            pmids[c.source].tolist(),
            pmids[c.terminal].tolist(),
            c.relation.tolist(),
            strict=True,
        )
    )
    assert rows == [(DIRECT, 100, 100, 0), (BRIDGE, 100, 400, CITED_BY), (BRIDGE, 200, 300, CITES)]
    assert np.all(c.kind[c.relation == 0] == DIRECT)


def test_scored_pairs_carry_their_direct_articles_for_the_path_search(store: KGStore) -> None:
    """With the compiled passes loaded (`kg serve`), ``score_pairs`` keeps each pair's
    articles carrying both (the DIRECT articles the path search would intersect again);
    not when some articles are excluded. The pair compares equal either way."""
    from kg_platform.graph import path_passes  # noqa: F401 (loads the compiled passes)

    concepts = concepts_in_graph(
        store, [_g(HEPARIN, "Heparin", 0), _g(ASPIRIN, "Aspirin", 1), _g(MI, "MI", 2)]
    )
    pmids = store.array("pmids")
    pairs = score_pairs(store, concepts)
    assert [(p.a_ui, p.b_ui, pmids[p.direct].tolist()) for p in pairs] == [
        (ASPIRIN, MI, [100]),
        (HEPARIN, ASPIRIN, []),
        (HEPARIN, MI, []),
    ]
    aspirin_mi = pairs[0]
    assert [p.co_annotations for p in pairs] == [p.direct.size for p in pairs]
    excluded = np.flatnonzero(pmids == 100)
    without = score_pairs(store, concepts, excluded)
    assert all(p.direct is None for p in without)
    (kept,) = [p for p in without if (p.a_ui, p.b_ui) == (ASPIRIN, MI)]
    assert kept == dataclasses.replace(aspirin_mi, co_annotations=0, major_co_annotations=0)
    # the same pair without them finds the same DIRECT rows
    bare = dataclasses.replace(aspirin_mi, direct=None)
    assert bare == aspirin_mi
    c, c_bare = collect_candidates(store, aspirin_mi), collect_candidates(store, bare)
    assert c.source.tolist() == c_bare.source.tolist() and c.kind.tolist() == c_bare.kind.tolist()


def test_the_largest_lists_kept_as_bit_tables_give_the_same_pairs(store: KGStore) -> None:
    """With bit tables kept for the lists on at least 1/64 of the articles (`kg serve`),
    the pairs, their counts and their DIRECT articles are the same; each table is made
    once; a limit that holds none keeps none."""
    from kg_platform.graph import path_passes  # noqa: F401 (loads the compiled passes)
    from kg_platform.retrieval import linking

    concepts = concepts_in_graph(
        store, [_g(HEPARIN, "Heparin", 0), _g(ASPIRIN, "Aspirin", 1), _g(MI, "MI", 2)]
    )
    want = score_pairs(store, concepts)
    fresh = KGStore.open(store.lake)  # a store of its own: nothing kept yet
    assert linking.article_bits(fresh, concepts[0].d, fresh.articles_of(concepts[0].d)) is None
    linking.keep_article_bits(fresh)
    got = score_pairs(fresh, concepts)
    assert got == want
    assert [p.direct.tolist() for p in got] == [p.direct.tolist() for p in want]
    kept = linking._ARTICLE_BITS[fresh]
    assert sorted(d for d in kept if isinstance(d, int)) == sorted(c.d for c in concepts)
    table = linking.article_bits(fresh, concepts[1].d, fresh.articles_of(concepts[1].d))
    assert table is kept[concepts[1].d]
    assert (
        np.flatnonzero(np.unpackbits(table.view(np.uint8), bitorder="little")).tolist()
        == fresh.articles_of(concepts[1].d).tolist()
    )
    tight = KGStore.open(store.lake)
    linking.keep_article_bits(tight, 7)
    assert score_pairs(tight, concepts) == want and len(linking._ARTICLE_BITS[tight]) == 2
    with pytest.raises(ValueError, match="limit -1 bytes, must be 0 or more"):
        linking.keep_article_bits(tight, -1)
