"""Candidate paths and their ranking on a synthetic graph with giant and tiny descriptors.

The graph is the benchmarks' synthetic corpus (Zipf descriptor frequencies: the first
descriptors sit on most articles) plus self-citations, mutual citations and duplicate
citation rows, built with the project's own ``build_graph``. Every pair's candidate set is
recomputed from the raw Parquet with polars; the ranking is recomputed with a full sort.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from benchmarks.graph import generate
from kg_platform.answer.ladder import LadderConfig, LadderInput, RefusalReason, path_counts
from kg_platform.graph import layout
from kg_platform.graph.build import build_graph
from kg_platform.graph.layout import CONCERN
from kg_platform.graph.store import KGStore, intersect_sorted
from kg_platform.retrieval import numpy_passes as reference
from kg_platform.retrieval import paths as paths_module
from kg_platform.retrieval.candidates import BRIDGE, membership
from kg_platform.retrieval.linking import ConceptPair
from kg_platform.retrieval.paths import (
    CITED_BY,
    CITES,
    DIRECT,
    NO_HOP,
    Candidates,
    collect_candidates,
    pair_evidence,
    pair_evidence_numpy,
    path_flags,
    structural_scores,
)
from kg_platform.retrieval.ranking import rank_rows, top_paths, top_rows
from kg_platform.storage.corpus import read_corpus, write_corpus_table
from kg_platform.storage.lake import Lake

N_ARTICLES = 6_000
ROW = ["kind", "source", "terminal", "relation"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[str, KGStore]:
    root = str(tmp_path_factory.mktemp("paths_large") / "lake")
    generate(root, N_ARTICLES, 60_000, 54_000, seed=5)
    lake = Lake(root)
    cites = read_corpus(lake, "citations")
    pmids = read_corpus(lake, "articles")["pmid"].to_numpy()
    rng = np.random.default_rng(3)
    own = pmids[rng.choice(pmids.size, 1_500, replace=False)]
    # mutual citations: reverse rows whose cited article is in the corpus
    inside = np.flatnonzero(np.isin(cites["cited_pmid"].to_numpy(), pmids))
    back = rng.choice(inside, 3_000, replace=False)
    again = rng.choice(cites.num_rows, 1_000, replace=False)
    extra = pa.table(
        {
            "citing_pmid": np.concatenate(
                [own, cites["cited_pmid"].to_numpy()[back], cites["citing_pmid"].to_numpy()[again]]
            ),
            "cited_pmid": np.concatenate(
                [own, cites["citing_pmid"].to_numpy()[back], cites["cited_pmid"].to_numpy()[again]]
            ),
        }
    ).cast(cites.schema)
    write_corpus_table(lake, "citations", pa.concat_tables([cites, extra]))
    build = build_graph(lake)
    layout.publish(lake, build.build_id)
    return root, KGStore.open(lake)


@pytest.fixture(scope="module")
def raw(corpus) -> dict[str, pl.DataFrame]:
    """The corpus as plain frames keyed by PMID, straight from the Parquet inputs."""
    lake = Lake(corpus[0])
    articles = pl.from_arrow(read_corpus(lake, "articles")).select("pmid", "year")
    in_corpus = articles["pmid"].implode()
    mesh = (
        pl.from_arrow(read_corpus(lake, "mesh_edges"))
        .with_columns(
            pl.col("descriptor_ui").cast(pl.Utf8).alias("ui"),
            (pl.col("descriptor_major") | pl.col("qualifier_major").fill_null(False)).alias(
                "major"
            ),
        )
        .group_by("pmid", "ui")
        .agg(pl.col("major").any())
    )
    citations = (
        pl.from_arrow(read_corpus(lake, "citations"))
        .filter(pl.col("citing_pmid").is_in(in_corpus) & pl.col("cited_pmid").is_in(in_corpus))
        .unique()
    )
    return {"articles": articles, "mesh": mesh, "citations": citations}


def _pair(a: str, b: str) -> ConceptPair:
    return ConceptPair(a, a, b, b, 0, 0)


def _reference_rows(raw: dict[str, pl.DataFrame], a: str, b: str) -> pl.DataFrame:
    """Every path of (a, b) from the raw tables: (kind, source PMID, terminal PMID, relation)."""
    mesh, citations = raw["mesh"], raw["citations"]
    carries_a = mesh.filter(pl.col("ui") == a)["pmid"].implode()
    major_a = mesh.filter((pl.col("ui") == a) & pl.col("major"))["pmid"].implode()
    major_b = mesh.filter((pl.col("ui") == b) & pl.col("major"))["pmid"].implode()
    direct = mesh.filter((pl.col("ui") == b) & pl.col("pmid").is_in(carries_a)).select(
        pl.lit(DIRECT).alias("kind"),
        pl.col("pmid").alias("source"),
        pl.col("pmid").alias("terminal"),
        pl.lit(NO_HOP).alias("relation"),
    )
    linked = citations.filter(pl.col("citing_pmid") != pl.col("cited_pmid"))

    def hops(about_a: str, about_b: str, relation: int) -> pl.DataFrame:
        """Links whose ``about_a`` end is a major a-article and ``about_b`` end a b one."""
        return linked.filter(
            pl.col(about_a).is_in(major_a) & pl.col(about_b).is_in(major_b)
        ).select(
            pl.lit(BRIDGE).alias("kind"),
            pl.col(about_a).alias("source"),
            pl.col(about_b).alias("terminal"),
            pl.lit(relation).alias("relation"),
        )

    cites = hops("citing_pmid", "cited_pmid", CITES)
    cited_by = hops("cited_pmid", "citing_pmid", CITED_BY)
    frames = [f.cast(pl.Int64) for f in (direct, cites, cited_by)]
    return pl.concat(frames).sort(ROW)


def _rows(store: KGStore, c: Candidates) -> pl.DataFrame:
    pmids = np.asarray(store.array("pmids"), dtype=np.int64)
    return pl.DataFrame(
        {
            "kind": c.kind.astype(np.int64),
            "source": pmids[c.source],
            "terminal": pmids[c.terminal],
            "relation": c.relation.astype(np.int64),
        }
    )


@pytest.fixture(scope="module")
def descriptors(raw) -> list[str]:
    """Three giant descriptors, two mid-sized and two rare ones (major on a few articles)."""
    counts = (
        raw["mesh"]
        .group_by("ui")
        .agg(pl.len().alias("n"), pl.col("major").sum().alias("majors"))
        .sort("n", "ui", descending=[True, False])
    )
    giant = counts.head(3)["ui"].to_list()
    mid = counts.filter(pl.col("n").is_between(40, 80)).head(2)["ui"].to_list()
    rare = counts.filter(pl.col("n").is_between(3, 8) & (pl.col("majors") >= 1))
    return giant + mid + rare.head(2)["ui"].to_list()


@pytest.fixture(scope="module")
def pairs(descriptors) -> list[ConceptPair]:
    # both orders: a lopsided pair is expanded from its a side one way, its b side the other
    return [_pair(a, b) for a in descriptors for b in descriptors]


def test_the_graph_has_the_shapes_under_test(raw, descriptors) -> None:
    counts = dict(
        raw["mesh"].group_by("ui").agg(pl.len()).filter(pl.col("ui").is_in(descriptors)).rows()
    )
    assert len(descriptors) == 7
    assert counts[descriptors[0]] > N_ARTICLES // 2  # on most articles
    assert counts[descriptors[-1]] <= 8
    self_cites = raw["citations"].filter(pl.col("citing_pmid") == pl.col("cited_pmid")).height
    assert self_cites == 1_500


def test_candidates_equal_the_raw_recount_for_every_pair(corpus, raw, pairs) -> None:
    store = corpus[1]
    sizes = []
    for pair in pairs:
        c = collect_candidates(store, pair)
        assert c.source.dtype == c.terminal.dtype == np.int64
        assert c.kind.dtype == c.relation.dtype == np.int8
        got = _rows(store, c)
        assert got.sort(ROW).equals(_reference_rows(raw, pair.a_ui, pair.b_ui)), pair
        assert got.is_unique().all(), pair
        # rows come in blocks: DIRECT, then CITES, then CITED_BY
        assert np.all(np.diff(c.relation) >= 0), pair
        sizes.append(len(c))
    assert max(sizes) > 5_000  # giant pairs
    assert min(sizes) < 10  # lopsided and rare pairs


def _reference_scores(
    store: KGStore, raw: dict[str, pl.DataFrame], c: Candidates, filters: list[str]
) -> np.ndarray:
    """The structural score as the plain formula, with in-degrees and years from the raw
    tables and filter membership from the raw MeSH rows."""
    pmids = np.asarray(store.array("pmids"), dtype=np.int64)
    terminal = pl.DataFrame({"pmid": pmids[c.terminal]})
    in_degree = raw["citations"].group_by("cited_pmid").agg(pl.len().alias("in_degree"))
    per_terminal = terminal.join(
        in_degree, left_on="pmid", right_on="cited_pmid", how="left", maintain_order="left"
    ).join(raw["articles"], on="pmid", how="left", maintain_order="left")
    degree = per_terminal["in_degree"].fill_null(0).to_numpy().astype(np.float64)
    years = per_terminal["year"].to_numpy().astype(np.float64)
    concern = (store.array("flags")[c.source] | store.array("flags")[c.terminal]) & CONCERN != 0
    score = np.where(c.kind == DIRECT, 2.0, 1.0)
    for ui in filters:
        carriers = raw["mesh"].filter(pl.col("ui") == ui)["pmid"].implode()
        score += 0.5 * terminal.select(pl.col("pmid").is_in(carriers))["pmid"].to_numpy()
    score += 0.1 * np.log1p(degree)
    score += np.clip(years - 1900.0, 0.0, 200.0) / 2000.0
    score -= 0.5 * concern
    return score


def _reference_order(
    c: Candidates, keep: np.ndarray, scores: np.ndarray, similarity: np.ndarray | None
) -> np.ndarray:
    """The full ranking the way the first implementation made it: candidate rows in their
    canonical order (kind, relation, source, terminal), then a stable sort by (similarity
    present, similarity, score) descending and terminal ascending."""
    if similarity is None:
        similarity = np.zeros(len(c))
    frame = pl.DataFrame(
        {
            "row": np.arange(len(c)),
            "kind": c.kind,
            "relation": c.relation,
            "source": c.source,
            "terminal": c.terminal,
            "score": scores,
            "has_vector": ~np.isnan(similarity),
            "similarity": np.nan_to_num(similarity, nan=0.0),
        }
    ).filter(pl.Series(keep, dtype=pl.Boolean))
    canonical = frame.sort("kind", "relation", "source", "terminal")
    ranked = canonical.sort(
        ["has_vector", "similarity", "score", "terminal"],
        descending=[True, True, True, False],
        maintain_order=True,
    )
    return ranked["row"].to_numpy()


def _rows_at(c: Candidates, rows: np.ndarray) -> Candidates:
    return Candidates(c.pair, c.kind[rows], c.source[rows], c.terminal[rows], c.relation[rows])


def _similarity(store: KGStore, c: Candidates) -> np.ndarray:
    """A made-up question similarity per terminal with many exact ties and some NaN (no
    vector): a function of the terminal's PMID only."""
    pmids = np.asarray(store.array("pmids"), dtype=np.int64)[c.terminal]
    sim = ((pmids * 37) % 11).astype(np.float64) / 10.0 - 0.5
    sim[pmids % 7 == 0] = np.nan
    return sim


@pytest.mark.parametrize("filters", [[], ["giant"], ["mid", "rare"]])
def test_scores_and_top_rows_equal_a_full_sort(corpus, raw, pairs, descriptors, filters) -> None:
    store = corpus[1]
    named = {"giant": descriptors[1], "mid": descriptors[3], "rare": descriptors[5]}
    filter_uis = [named[f] for f in filters]
    filter_idx = [store.desc_idx(ui) for ui in filter_uis]
    tied_in_top = 0
    for pair in pairs:
        c = collect_candidates(store, pair)
        flags = path_flags(store, c)
        keep = flags["quotable"] & ~flags["retracted"]
        scores = structural_scores(store, c, filter_idx, flags["concern"])
        # bit for bit: the ranking compares these floats exactly
        assert np.array_equal(scores, _reference_scores(store, raw, c, filter_uis)), pair
        for similarity in (None, _similarity(store, c)):
            full = _reference_order(c, keep, scores, similarity)
            assert np.array_equal(rank_rows(c, keep, scores, similarity), full), pair
            # the same candidates in another row order rank the same paths the same way
            shuffle = np.random.default_rng(len(c)).permutation(len(c))
            shuffled = _rows_at(c, shuffle)
            sim_shuffled = None if similarity is None else similarity[shuffle]
            for top_k in sorted({1, 2, 3, 10, 57, 1_000, max(full.size, 1), full.size + 5}):
                got = top_rows(c, keep, scores, top_k, similarity)
                assert np.array_equal(got, full[:top_k]), (pair, top_k)
                got = top_rows(shuffled, keep[shuffle], scores[shuffle], top_k, sim_shuffled)
                assert np.array_equal(shuffle[got], full[:top_k]), (pair, top_k)
            # rows the score and terminal alone do not order: same terminal, same score
            head = full[:57]
            keys = set()
            for r in head:
                key = (float(scores[r]), int(c.terminal[r]))
                tied_in_top += key in keys
                keys.add(key)
    assert tied_in_top > 0


def test_top_paths_are_the_head_of_the_full_ranking(corpus, pairs) -> None:
    store = corpus[1]
    pmids = store.array("pmids")
    for pair in pairs[:9]:
        c = collect_candidates(store, pair)
        flags = path_flags(store, c)
        keep = flags["quotable"] & ~flags["retracted"]
        scores = structural_scores(store, c, [], flags["concern"])
        full = rank_rows(c, keep, scores)
        for top_k in (1, 10, 200):
            paths = top_paths(store, c, keep, scores, flags, top_k)
            assert [(p.hops[0].pmid, p.terminal.pmid, p.kind) for p in paths] == [
                (
                    int(pmids[c.source[r]]),
                    int(pmids[c.terminal[r]]),
                    "BRIDGE" if c.kind[r] else "DIRECT",
                )
                for r in full[:top_k]
            ]
            assert [p.score for p in paths] == [round(float(scores[r]), 6) for r in full[:top_k]]


def test_top_rows_of_nothing_and_bad_top_k(corpus, pairs) -> None:
    store = corpus[1]
    c = collect_candidates(store, pairs[0])
    scores = structural_scores(store, c, [], np.zeros(len(c), dtype=bool))
    none = np.zeros(len(c), dtype=bool)
    assert top_rows(c, none, scores, 10).size == 0
    with pytest.raises(ValueError, match="top_k: must be at least 1, got 0"):
        top_rows(c, none, scores, 0)


@pytest.mark.parametrize(
    ("members", "lookups", "n_nodes"),
    [
        (50, 10, 10_000_000),
        (5_000, 200_000, 50_000),
        (0, 1_000, 2_000),
        (2_000, 0, 2_000),
        (1_900, 3_000, 2_048),  # dense: whole words set, bit 63 of each among them
    ],
)
def test_membership_and_intersection_agree_with_numpy(members, lookups, n_nodes) -> None:
    # the first case takes the binary search, the second the table over every node
    rng = np.random.default_rng(members + lookups)
    ascending = np.sort(rng.choice(n_nodes, members, replace=False)).astype(np.int32)
    values = rng.integers(0, n_nodes, lookups).astype(np.int32)
    values[: lookups // 2] = rng.choice(ascending, lookups // 2) if members else 0
    found = membership(ascending, lookups, n_nodes)(values)
    assert np.array_equal(found, np.isin(values, ascending))
    other = np.unique(values)
    pairs = [(ascending, other), (other, ascending), (ascending, ascending[::3])]
    pairs += [(ascending[::50], ascending), (ascending, other[::50])]  # binary search
    for a, b in pairs:
        # lists at most 16 times apart take the table when dense, the merge when sparse
        for nodes in (n_nodes, n_nodes * 1_000):
            common = intersect_sorted(a, b, nodes)
            assert np.array_equal(common, np.intersect1d(a, b))
        # the compiled merge (or search, when lopsided) `kg serve` uses: the same values
        from kg_platform.graph import path_passes

        common = path_passes.intersect(a, b)
        assert common.dtype == a.dtype and np.array_equal(common, np.intersect1d(a, b))
        # by a bit table of one list or of both (`kg serve`'s largest lists): the same
        bits_a, bits_b = path_passes.bitset(a, n_nodes), path_passes.bitset(b, n_nodes)
        none = np.zeros(0, dtype=np.uint64)
        for x, y in ((bits_a, bits_b), (bits_a, none), (none, bits_b)):
            common = path_passes.intersect_bits(a, x, b, y)
            assert common.dtype == a.dtype and np.array_equal(common, np.intersect1d(a, b))


def test_major_reads_and_the_bit_table_equal_their_plain_recount(corpus, raw, descriptors) -> None:
    """Each descriptor's citations read from its major articles (kept per store, made per
    descriptor or all at once) equal a recount from the raw citation rows; the far side's
    bit table marks exactly its nodes."""
    from kg_platform.graph import path_passes

    store = corpus[1]
    lake = Lake(corpus[0])
    pmids = read_corpus(lake, "articles")["pmid"].to_numpy()
    links = raw["citations"].filter(pl.col("citing_pmid") != pl.col("cited_pmid"))
    self_cited = raw["citations"].filter(pl.col("citing_pmid") == pl.col("cited_pmid"))
    degree = (
        pl.concat([links["citing_pmid"], links["cited_pmid"]])
        .value_counts(name="n")
        .rename({"citing_pmid": "pmid"})
    )
    # a self-citation is one row in each direction of the graph
    degree = (
        pl.concat(
            [
                degree,
                self_cited.select(
                    pl.col("citing_pmid").alias("pmid"), pl.lit(2, pl.UInt32).alias("n")
                ),
            ]
        )
        .group_by("pmid")
        .agg(pl.col("n").sum())
    )
    wanted = [store.desc_idx(ui) for ui in descriptors]
    per_descriptor = paths_module.major_reads(store, np.array(wanted))
    for ui, got in zip(descriptors, per_descriptor.tolist(), strict=True):
        majors = raw["mesh"].filter((pl.col("ui") == ui) & pl.col("major")).select("pmid")
        want = majors.join(degree, on="pmid", how="left")["n"].fill_null(0).sum()
        assert got == want, ui
    every = paths_module.major_reads(store)
    assert every.size == store.n_descriptors and (every >= 0).all()
    assert np.array_equal(every[wanted], per_descriptor)
    far = store.articles_of(wanted[0], major_only=True)
    bits = path_passes.bitset(far, store.n_articles)
    table = np.unpackbits(bits.view(np.uint8), bitorder="little")[: store.n_articles]
    assert np.array_equal(np.flatnonzero(table), far) and pmids.size == store.n_articles


def test_major_lists_are_kept_per_build_up_to_their_byte_limit(
    corpus, descriptors, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A descriptor's major articles, once read, are kept with the store (the same array
    again) until the kept lists reach ``MAJOR_LISTS_BYTES``; past it they are read anew."""
    from kg_platform.retrieval import linking

    store = KGStore.open(Lake(corpus[0]))  # a store of its own: nothing kept yet
    giant, small = store.desc_idx(descriptors[0]), store.desc_idx(descriptors[3])
    want = store.articles_of(giant, major_only=True)
    monkeypatch.setattr(linking, "MAJOR_LISTS_BYTES", want.nbytes + 4)
    first = linking.major_articles(store, giant)
    assert np.array_equal(first, want) and first.size > 100 and not first.flags.writeable
    assert linking.major_articles(store, giant) is first
    over = linking.major_articles(store, small)  # would pass the limit: not kept
    assert np.array_equal(over, store.articles_of(small, major_only=True)) and over.size > 4
    assert linking.major_articles(store, small) is not over


def _forced_lookup(mode: str):
    """``_far_lookup`` always answering with a bit table over every node, or never."""

    def lookup(far: np.ndarray, lookups: int, n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
        from kg_platform.graph import path_passes

        if mode == "binary search":
            return np.zeros(0, dtype=np.uint64), far
        return path_passes.bitset(far, n_nodes), far[:0]

    return lookup


@pytest.mark.parametrize("lookup", ["as chosen", "table", "binary search"])
def test_compiled_passes_equal_the_numpy_reference(
    corpus, pairs, descriptors, monkeypatch: pytest.MonkeyPatch, lookup: str
) -> None:
    """The compiled passes give today's numpy passes' rows in the same order, the same
    flags, the same scores bit for bit and the same top paths, for every pair and FILTER
    set, whichever way the far side is looked up."""
    store = corpus[1]
    if lookup != "as chosen":
        monkeypatch.setattr(paths_module, "_far_lookup", _forced_lookup(lookup))
    filter_sets = [[], [descriptors[1]], [descriptors[3], descriptors[5]], descriptors[:3]]
    for pair in pairs:
        c, ref = collect_candidates(store, pair), reference.collect_candidates(store, pair)
        for name in ("kind", "source", "terminal", "relation"):
            got, want = getattr(c, name), getattr(ref, name)
            assert got.dtype == want.dtype and np.array_equal(got, want), (pair, name)
        flags, ref_flags = path_flags(store, c), reference.path_flags(store, ref)
        assert list(flags) == list(ref_flags)
        for name, want in ref_flags.items():
            assert flags[name].dtype == want.dtype, name
            assert np.array_equal(flags[name], want), (pair, name)
        keep = flags["quotable"] & ~flags["retracted"]
        for uis in filter_sets:
            filters = [store.desc_idx(ui) for ui in uis]
            scores = structural_scores(store, c, filters, flags["concern"])
            want = reference.structural_scores(store, ref, filters, ref_flags["concern"])
            assert scores.dtype == want.dtype and np.array_equal(scores, want), (pair, uis)
            for top_k in (1, 10, 200):
                assert top_paths(store, c, keep, scores, flags, top_k) == top_paths(
                    store, ref, keep, want, ref_flags, top_k
                ), (pair, uis, top_k)


# the gates pair_evidence takes, and the ladder configuration that means the same
GATES = [
    ({}, frozenset(), None),
    ({"as_of": 2005}, frozenset(), 2005),
    ({"quotable_gate": False}, frozenset({RefusalReason.NO_QUOTABLE_TERMINAL}), None),
    (
        {"retracted_gate": False, "as_of": 1990},
        frozenset({RefusalReason.ONLY_RETRACTED_EVIDENCE}),
        1990,
    ),
    (
        {"quotable_gate": False, "retracted_gate": False},
        frozenset({RefusalReason.NO_QUOTABLE_TERMINAL, RefusalReason.ONLY_RETRACTED_EVIDENCE}),
        None,
    ),
]


def test_pair_evidence_equals_collecting_flagging_the_ladder_and_ranking(
    corpus, pairs, descriptors
) -> None:
    """The structural question path's one pass gives, for every pair, FILTER set, gate
    setting and top_k, the ladder's counts over every candidate and the head of the full
    ranking of the survivors: same rows, same order, scores bit for bit."""
    store = corpus[1]
    filter_sets = [[], [descriptors[3]], descriptors[3:5]]
    bites = {"quotable": 0, "unretracted": 0, "as_of": 0}
    for pair in pairs:
        c = collect_candidates(store, pair)
        flags = path_flags(store, c)
        for filters in filter_sets:
            idx = [store.desc_idx(d) for d in filters]
            scores = structural_scores(store, c, idx, flags["concern"])
            for gates, disabled, as_of in GATES:
                inp = LadderInput(
                    1, 2, len(c), flags["quotable"], flags["retracted"], flags["year"], as_of
                )
                counts, alive = path_counts(inp, LadderConfig(disabled=disabled))
                full = rank_rows(c, alive, scores)
                bites["quotable"] += counts.candidates - counts.quotable
                if RefusalReason.ONLY_RETRACTED_EVIDENCE not in disabled:
                    quotable_gate = RefusalReason.NO_QUOTABLE_TERMINAL not in disabled
                    before = counts.quotable if quotable_gate else counts.candidates
                    bites["unretracted"] += before - counts.unretracted
                if as_of:
                    uncut, _ = path_counts(
                        dataclasses.replace(inp, as_of=None), LadderConfig(disabled=disabled)
                    )
                    bites["as_of"] += uncut.evidence - counts.evidence
                for top_k in sorted({1, 10, 57, len(c) + 5}):
                    got = pair_evidence(store, pair, idx, top_k, **gates)
                    assert got.counts == dataclasses.asdict(counts), (pair, gates)
                    head = full[:top_k]
                    assert _rows(store, got.top).equals(_rows(store, _rows_at(c, head))), (
                        pair,
                        filters,
                        gates,
                        top_k,
                    )
                    assert got.scores.tobytes() == scores[head].tobytes(), (pair, top_k)
    # every gate removed paths somewhere, so each condition was tested
    assert min(bites.values()) > 0, bites


def test_pair_evidence_of_a_pair_without_paths_and_bad_top_k(corpus, pairs) -> None:
    store = corpus[1]
    empty = [p for p in pairs if len(collect_candidates(store, p)) == 0]
    assert empty, "the graph has a pair without any path"
    got = pair_evidence(store, empty[0], [], 10)
    assert got.counts == {
        "candidates": 0,
        "quotable": 0,
        "unretracted": 0,
        "as_of": 0,
        "evidence": 0,
    }
    assert len(got.top) == 0 and got.scores.size == 0
    with pytest.raises(ValueError, match="top_k: must be at least 1, got 0"):
        pair_evidence(store, pairs[0], [], 0)


def test_numpy_pair_evidence_equals_the_compiled_pass(corpus, pairs, descriptors) -> None:
    """A cold `kg ask` finds a small pair's evidence by the numpy passes instead of loading
    the compiled ones: the same counts, rows, order and scores bit for bit, for every
    pair, FILTER set, gate setting and top_k (an empty pair included)."""
    store = corpus[1]
    for pair in pairs:
        for filters in ([], [descriptors[3]], descriptors[3:5]):
            idx = [store.desc_idx(d) for d in filters]
            for gates, _, _ in GATES:
                for top_k in (1, 10, 57, 10_000):
                    want = pair_evidence(store, pair, idx, top_k, **gates)
                    got = pair_evidence_numpy(store, pair, idx, top_k, **gates)
                    assert got.counts == want.counts, (pair, gates)
                    for name in ("kind", "source", "terminal", "relation"):
                        a, b = getattr(got.top, name), getattr(want.top, name)
                        assert (a.dtype, a.tolist()) == (b.dtype, b.tolist()), (pair, name)
                    assert got.scores.tobytes() == want.scores.tobytes(), (pair, top_k)
    with pytest.raises(ValueError, match="top_k: must be at least 1, got 0"):
        pair_evidence_numpy(store, pairs[0], [], 0)


def test_a_budgeted_search_reads_in_slices_and_stops_at_its_deadline(
    corpus, pairs, descriptors
) -> None:
    """With its deadline far off, a search read in slices of any size gives the single
    pass's counts, rows, order and scores bit for bit, and says it read every link. With
    its deadline passed, a giant pair's search stops after its first slice and says so:
    its counts and rows are exactly the ladder's and the ranking's over the DIRECT paths
    and the links of the first slice's articles, recounted from every candidate."""
    store = corpus[1]
    later = time.perf_counter() + 3600.0
    sliced = 0
    for pair in pairs:
        for filters in ([], descriptors[3:5]):
            idx = [store.desc_idx(d) for d in filters]
            for gates, _, _ in GATES[:2]:
                want = pair_evidence(store, pair, idx, 10, **gates)
                assert (want.cut, want.links_read) == (False, want.links)
                for slice_links in (1, 97, 1_000):
                    got = pair_evidence(
                        store, pair, idx, 10, **gates, deadline=later, slice_links=slice_links
                    )
                    assert (got.counts, got.cut) == (want.counts, False), (pair, slice_links)
                    assert (got.links_read, got.links) == (want.links, want.links)
                    assert _rows(store, got.top).equals(_rows(store, want.top)), pair
                    assert got.scores.tobytes() == want.scores.tobytes(), pair
                    sliced += len(paths_module._slices(paths_module._bridge_plan(store, pair), 97))
    assert sliced > 2 * len(pairs) * 4  # most pairs were read in several slices

    giant = _pair(descriptors[0], descriptors[1])
    plan = paths_module._bridge_plan(store, giant)
    _, first_end, first_links = paths_module._slices(plan, 1_000)[0]
    got = pair_evidence(store, giant, [], 10, deadline=time.perf_counter(), slice_links=1_000)
    assert (got.cut, got.links_read, got.links) == (True, first_links, plan.reads)
    assert 0 < first_links < plan.reads
    c = collect_candidates(store, giant)
    # a BRIDGE row's article on the expanded side is its terminal when expanded from b
    near_end = c.terminal if plan.from_b else c.source
    read = np.flatnonzero((c.kind == DIRECT) | np.isin(near_end, plan.near[:first_end]))
    assert 0 < read.size < len(c)
    part = _rows_at(c, read)
    flags = path_flags(store, part)
    inp = LadderInput(1, 2, len(part), flags["quotable"], flags["retracted"], flags["year"])
    counts, alive = path_counts(inp, LadderConfig())
    assert got.counts == dataclasses.asdict(counts)
    scores = structural_scores(store, part, [], flags["concern"])
    head = rank_rows(part, alive, scores)[:10]
    assert _rows(store, got.top).equals(_rows(store, _rows_at(part, head)))
    assert got.scores.tobytes() == scores[head].tobytes()
    with pytest.raises(ValueError, match="slice_links: must be at least 1, got 0"):
        pair_evidence(store, giant, [], 10, deadline=later, slice_links=0)


@pytest.mark.parametrize("sparse_share", [0, 10**9], ids=["branch", "no branch"])
def test_packed_links_give_the_same_evidence_and_are_kept_up_to_their_limit(
    corpus, pairs, descriptors, monkeypatch: pytest.MonkeyPatch, sparse_share: int
) -> None:
    """In a process that keeps packed links (`kg serve`), a near side's links are copied
    out once, in order (each node's links exactly the graph's list), and the search read
    from them gives the graph-read search's counts, rows, order and scores bit for bit,
    in one pass or in slices, with a branch per kept row (a sparse far side) or without;
    past the byte limit nothing more is kept and the graph's lists are read."""
    monkeypatch.setattr(paths_module, "SPARSE_SHARE", sparse_share)
    later = time.perf_counter() + 3600.0
    plain = corpus[1]
    store = KGStore.open(Lake(corpus[0]))  # a store of its own: nothing kept yet
    monkeypatch.setattr(paths_module, "PACK_MIN_LINKS", 1)
    assert paths_module.packed_links(store, 0, store.articles_of(0), 10) is paths_module._NOT_PACKED
    paths_module.keep_packed(store)
    packed_sides = set()
    for pair in pairs:
        plan = paths_module._bridge_plan(store, pair)
        assert plan.sparse == (sparse_share == 0)
        packed = paths_module.packed_links(store, plan.near_d, plan.near, plan.reads)
        if plan.reads:
            assert packed is not paths_module._NOT_PACKED, pair
            packed_sides.add(plan.near_d)
            for kind, (ptr, links) in packed.items():
                indptr, indices = store.array(f"{kind}_indptr"), store.array(f"{kind}_indices")
                assert links.dtype == np.int32 and ptr.size == plan.near.size + 1
                for k in range(0, plan.near.size, 7):
                    node = plan.near[k]
                    want = indices[indptr[node] : indptr[node + 1]]
                    assert np.array_equal(links[ptr[k] : ptr[k + 1]], want), (pair, kind)
            again = paths_module.packed_links(store, plan.near_d, plan.near, plan.reads)
            assert again is packed  # kept
            for slice_links in (1, 97, 1_000):  # counted from the packed offsets: the same
                want = paths_module._slices(plan, slice_links)
                assert paths_module._slices(plan, slice_links, packed) == want
        for filters in ([], descriptors[3:5]):
            idx = [store.desc_idx(d) for d in filters]
            for gates, _, _ in GATES[:2]:
                want = pair_evidence(plain, pair, idx, 10, **gates)
                for deadline, slice_links in ((None, 65_536), (later, 97)):
                    got = pair_evidence(
                        store, pair, idx, 10, **gates, deadline=deadline, slice_links=slice_links
                    )
                    assert (got.counts, got.cut, got.links) == (want.counts, False, want.links)
                    assert _rows(store, got.top).equals(_rows(plain, want.top)), pair
                    assert got.scores.tobytes() == want.scores.tobytes(), pair
    assert len(packed_sides) >= 3
    # a store whose limit holds nothing reads the graph's lists
    tight = KGStore.open(Lake(corpus[0]))
    paths_module.keep_packed(tight, 100)
    plan = paths_module._bridge_plan(tight, pairs[0])
    assert plan.reads > 0
    packed = paths_module.packed_links(tight, plan.near_d, plan.near, plan.reads)
    assert packed is paths_module._NOT_PACKED
    with pytest.raises(ValueError, match="limit -1 bytes, must be 0 or more"):
        paths_module.keep_packed(KGStore.open(Lake(corpus[0])), -1)
