import numpy as np
import pytest

from kg_platform.graph.layout import Csr
from kg_platform.retrieval.allocation import (
    LINKS,
    Budget,
    RelationalParams,
    allocate_flat,
    allocate_random_neighbour,
    allocate_relational,
    rewire_degree_preserving,
)

# six objects; object 5 is long. The ranking puts it third.
LENGTHS = np.array([30, 30, 30, 30, 30, 100], dtype=np.int64)
RANKING = np.array([0, 1, 5, 2, 3, 4])


def graph_of(edges: list[tuple[int, int]], n: int = 6) -> Csr:
    return Csr.from_edges(LINKS, n, np.array(edges, dtype=np.int64).reshape(-1, 2))


def test_flat_stops_at_the_first_item_that_would_break_a_ceiling():
    two = allocate_flat(RANKING, LENGTHS, Budget(2, 1000))
    assert two.admitted == (0, 1)
    assert (two.realised_objects, two.realised_tokens) == (2, 60)
    # object 5 (100 tokens) would take 160 > 150 tokens: the walk ends there
    stopped = allocate_flat(RANKING, LENGTHS, Budget(4, 150))
    assert stopped.admitted == (0, 1)
    assert (stopped.realised_objects, stopped.realised_tokens, stopped.max_tokens) == (2, 60, 150)
    skipped = allocate_flat(RANKING, LENGTHS, Budget(4, 150), on_overflow="skip")
    assert skipped.admitted == (0, 1, 2, 3)
    assert skipped.realised_tokens == 120


def test_relational_takes_seeds_then_best_ranked_neighbours_then_fills():
    graph = graph_of([(0, 4), (0, 3), (1, 2)])
    allocation = allocate_relational(RANKING, LENGTHS, graph, Budget(2, 1000))
    # one seed (ceil(2/2)); its neighbours 3 and 4 ranked 4th and 5th: 3 first
    assert allocation.seeds == (0,)
    assert allocation.neighbours == (3,)
    assert allocation.admitted == (0, 3)
    assert allocation.params["seeds"] == 1
    assert allocation.params["seeds_rule"] == "ceil(K/2)"
    wide = allocate_relational(RANKING, LENGTHS, graph, Budget(5, 1000))
    # three seeds (0, 1, 5), neighbours {4, 3, 2} best-ranked first: 2, 3; no room to fill
    assert wide.seeds == (0, 1, 5)
    assert wide.neighbours == (2, 3)
    assert wide.admitted == (0, 1, 5, 2, 3)
    assert wide.realised_tokens == 220


def test_relational_overflow_rules():
    graph = graph_of([(0, 4), (1, 4), (1, 5)])
    stop = allocate_relational(RANKING, LENGTHS, graph, Budget(4, 150))
    # neighbour 5 is best-ranked but does not fit: the neighbour phase and the fill both end
    assert stop.admitted == (0, 1)
    skip = allocate_relational(
        RANKING, LENGTHS, graph, Budget(4, 150), RelationalParams(on_overflow="skip")
    )
    assert skip.neighbours == (4,)
    assert skip.admitted == (0, 1, 4, 2)
    assert skip.realised_tokens == 120


def test_neighbour_share_and_per_seed_cap():
    graph = graph_of([(0, 2), (0, 3), (0, 4), (1, 4)])
    shared = allocate_relational(
        RANKING, LENGTHS, graph, Budget(4, 150), RelationalParams(seeds=1, neighbour_share=0.5)
    )
    # after the seed: 3 objects / 120 tokens spare, half of it: 1 neighbour, 60 tokens
    assert shared.neighbours == (2,)
    assert shared.admitted == (0, 2, 1)
    assert shared.params["neighbour_share"] == 0.5
    capped = allocate_relational(
        RANKING, LENGTHS, graph, Budget(4, 1000), RelationalParams(seeds=2, neighbours_per_seed=1)
    )
    # seed 0 contributes only its best neighbour (2), seed 1 its only one (4)
    assert capped.neighbours == (2, 4)
    assert capped.admitted == (0, 1, 2, 4)


def test_random_neighbour_makes_the_same_number_of_admissions_reproducibly():
    lengths = np.full(40, 10, dtype=np.int64)
    ranking = np.arange(40)
    budget = Budget(4, 1000)
    first = allocate_random_neighbour(ranking, lengths, budget, 2, np.random.default_rng(7))
    again = allocate_random_neighbour(ranking, lengths, budget, 2, np.random.default_rng(7))
    other = allocate_random_neighbour(ranking, lengths, budget, 2, np.random.default_rng(8))
    assert first == again
    assert first.seeds == (0, 1)
    assert len(first.neighbours) == 2
    assert set(first.neighbours).isdisjoint(first.seeds)
    assert first.admitted[:2] == (0, 1)
    assert first.realised_objects == 4
    assert first.params["n_admissions"] == 2
    assert first.neighbours != other.neighbours


def test_every_arm_respects_both_ceilings_on_random_inputs():
    rng = np.random.default_rng(2024)
    for trial in range(300):
        n = int(rng.integers(1, 40))
        lengths = rng.integers(0, 200, size=n)
        ranked = rng.permutation(n)[: int(rng.integers(0, n + 1))]
        edges = rng.integers(0, n, size=(int(rng.integers(0, 4 * n)), 2))
        graph = Csr.from_edges(LINKS, n, edges)
        budget = Budget(int(rng.integers(1, 7)), int(rng.integers(1, 600)))
        params = RelationalParams(
            seeds=None if rng.random() < 0.5 else int(rng.integers(1, 4)),
            neighbours_per_seed=None if rng.random() < 0.5 else int(rng.integers(0, 3)),
            neighbour_share=float(rng.choice([0.0, 0.5, 1.0])),
            on_overflow="stop" if rng.random() < 0.5 else "skip",
        )
        relational = allocate_relational(ranked, lengths, graph, budget, params)
        arms = [
            allocate_flat(ranked, lengths, budget, params.on_overflow),
            relational,
            allocate_random_neighbour(
                ranked, lengths, budget, len(relational.neighbours), rng, params
            ),
        ]
        for allocation in arms:
            admitted = list(allocation.admitted)
            assert len(set(admitted)) == len(admitted), trial
            assert allocation.realised_objects == len(admitted) <= budget.max_objects, trial
            assert allocation.realised_tokens == int(lengths[admitted].sum()), trial
            assert allocation.realised_tokens <= budget.max_tokens, trial
            assert (allocation.max_objects, allocation.max_tokens) == (
                budget.max_objects,
                budget.max_tokens,
            )
        assert len(arms[2].neighbours) <= len(relational.neighbours)


def test_rewiring_preserves_every_degree_exactly():
    rng = np.random.default_rng(11)
    edges = rng.integers(0, 60, size=(400, 2))
    edges = edges[edges[:, 0] != edges[:, 1]]
    graph = Csr.from_edges(LINKS, 60, edges)
    rewired, accepted = rewire_degree_preserving(graph, seed=5, swaps_per_edge=10)
    assert accepted > graph.n_edges
    np.testing.assert_array_equal(np.diff(rewired.indptr), np.diff(graph.indptr))
    np.testing.assert_array_equal(
        np.bincount(rewired.indices, minlength=60), np.bincount(graph.indices, minlength=60)
    )
    new_edges = rewired.edges()
    assert rewired.n_edges == graph.n_edges
    assert not np.any(new_edges[:, 0] == new_edges[:, 1])
    assert len({tuple(e) for e in new_edges.tolist()}) == rewired.n_edges
    overlap = {tuple(e) for e in new_edges.tolist()} & {tuple(e) for e in graph.edges().tolist()}
    assert len(overlap) < graph.n_edges // 2
    same, _ = rewire_degree_preserving(graph, seed=5, swaps_per_edge=10)
    other, _ = rewire_degree_preserving(graph, seed=6, swaps_per_edge=10)
    assert same.sha256() == rewired.sha256()
    assert other.sha256() != rewired.sha256()


def test_csr_graph_from_edges_and_identity():
    graph = graph_of([(2, 1), (0, 3), (0, 1), (0, 3)], n=4)
    np.testing.assert_array_equal(graph.indptr, [0, 2, 2, 3, 3])
    np.testing.assert_array_equal(graph.indices, [1, 3, 1])
    assert graph.neighbours(0).tolist() == [1, 3]
    import hashlib

    expected = hashlib.sha256(
        np.array([0, 2, 2, 3, 3], dtype="<i8").tobytes()
        + np.array([1, 3, 1], dtype="<i8").tobytes()
    ).hexdigest()
    assert graph.sha256() == expected


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: Budget(0, 10), "max_objects"),
        (lambda: Budget(2, 0), "max_tokens"),
        (lambda: allocate_flat([0, 9], LENGTHS, Budget(2, 10)), "outside"),
        (lambda: allocate_flat([0, 0], LENGTHS, Budget(2, 10)), "more than once"),
        (lambda: allocate_flat([0], LENGTHS.astype(float), Budget(2, 10)), "integer"),
        (lambda: allocate_flat([0], LENGTHS, Budget(2, 10), on_overflow="drop"), "on_overflow"),
        (lambda: RelationalParams(neighbour_share=1.5), "neighbour_share"),
        (lambda: Csr(LINKS, np.array([0, 2]), np.array([0]), 1, 1), "runs from 0 to 2"),
        (
            lambda: Csr(LINKS, np.array([0, 1]), np.array([3]), 1, 1).check(full=True),
            "out of range",
        ),
        (
            lambda: allocate_relational(RANKING, LENGTHS, graph_of([], n=3), Budget(2, 10)),
            "3 nodes",
        ),
    ],
)
def test_bad_inputs_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()
