"""Dual-bounded context allocation: spend an object ceiling K and a token ceiling T on a
relevance-ranked candidate list, either flat (down the ranking) or relationally (a few
seeds, then their graph neighbours, then the ranking again).

Every arm returns an :class:`Allocation` that records what it admitted, the realised object
and token counts and the ceilings, so the matching of budgets across arms can be audited.

Admission rule, shared by every phase of every arm (``on_overflow``):

- ``"stop"`` (default, the literal rule "take items until either ceiling would be exceeded"):
  a phase ends at the first candidate that would break a ceiling;
- ``"skip"``: a candidate that would break the token ceiling is passed over and the walk
  continues, so short items further down can still use the allowance.

The random-neighbour control always skips, because its definition is "the same number of
admissions" and a single long random draw must not end it early.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np

from kg_platform.graph.layout import Csr, EdgeKind

OnOverflow = Literal["stop", "skip"]

ARM_FLAT = "flat"
ARM_RELATIONAL = "relational"
ARM_RANDOM_NEIGHBOUR = "random_neighbour"
ARM_SHUFFLED_GRAPH = "shuffled_graph"
ARMS = (ARM_FLAT, ARM_RELATIONAL, ARM_RANDOM_NEIGHBOUR, ARM_SHUFFLED_GRAPH)
# the directed links between retrievable objects (paragraphs), a square Csr over them
LINKS = EdgeKind("links", "links", rows_are_articles=False, columns_are_articles=False)


def _check_on_overflow(on_overflow: str) -> None:
    if on_overflow not in ("stop", "skip"):
        raise ValueError(f"on_overflow must be 'stop' or 'skip', got {on_overflow!r}")


@dataclass(frozen=True)
class Budget:
    """The two ceilings every arm must respect: at most ``max_objects`` admitted objects
    whose token lengths sum to at most ``max_tokens``."""

    max_objects: int
    max_tokens: int

    def __post_init__(self) -> None:
        if int(self.max_objects) < 1:
            raise ValueError(f"budget max_objects must be >= 1, got {self.max_objects}")
        if int(self.max_tokens) < 1:
            raise ValueError(f"budget max_tokens must be >= 1, got {self.max_tokens}")


@dataclass(frozen=True)
class RelationalParams:
    """Named parameters of the relational rule, recorded with every result.

    ``seeds``: how many top-ranked items become seeds (``None``: ceil(K / 2), i.e. half the
    object budget goes to seeds and half to their neighbours).
    ``neighbours_per_seed``: at most this many neighbours admitted per seed (``None``: no cap).
    ``neighbour_share``: the fraction of the allowance left after the seeds (objects and
    tokens alike) that neighbours may spend; the rest is filled from the ranking.
    """

    seeds: int | None = None
    neighbours_per_seed: int | None = None
    neighbour_share: float = 1.0
    on_overflow: OnOverflow = "stop"

    def __post_init__(self) -> None:
        if self.seeds is not None and int(self.seeds) < 1:
            raise ValueError(f"relational seeds must be >= 1 or None, got {self.seeds}")
        if self.neighbours_per_seed is not None and int(self.neighbours_per_seed) < 0:
            raise ValueError(
                f"relational neighbours_per_seed must be >= 0 or None, got {self.neighbours_per_seed}"
            )
        if not 0.0 <= float(self.neighbour_share) <= 1.0:
            raise ValueError(
                f"relational neighbour_share must be in [0, 1], got {self.neighbour_share}"
            )
        _check_on_overflow(self.on_overflow)

    def seeds_for(self, budget: Budget) -> int:
        if self.seeds is None:
            return max(1, math.ceil(budget.max_objects / 2))
        return min(int(self.seeds), budget.max_objects)


@dataclass(frozen=True)
class Allocation:
    """What one arm admitted for one question, with the ceilings it ran under."""

    arm: str
    admitted: tuple[int, ...]
    realised_objects: int
    realised_tokens: int
    max_objects: int
    max_tokens: int
    seeds: tuple[int, ...] = ()
    neighbours: tuple[int, ...] = ()
    params: dict = field(default_factory=dict)

    @property
    def within_ceilings(self) -> bool:
        return self.realised_objects <= self.max_objects and self.realised_tokens <= self.max_tokens

    def to_dict(self) -> dict:
        return asdict(self)


class _Admission:
    """The running state of one allocation: admitted ids in order and spent tokens."""

    def __init__(self, token_lengths: np.ndarray, budget: Budget) -> None:
        self.token_lengths = token_lengths
        self.budget = budget
        self.admitted: list[int] = []
        self.admitted_set: set[int] = set()
        self.tokens = 0

    def fits(self, item: int, object_cap: int, token_cap: int) -> bool:
        return (
            len(self.admitted) + 1 <= object_cap
            and self.tokens + int(self.token_lengths[item]) <= token_cap
        )

    def admit(self, item: int) -> None:
        self.admitted.append(item)
        self.admitted_set.add(item)
        self.tokens += int(self.token_lengths[item])

    def walk(
        self,
        candidates: list[int] | np.ndarray,
        on_overflow: OnOverflow,
        object_cap: int | None = None,
        token_cap: int | None = None,
        limit: int | None = None,
    ) -> list[int]:
        """Admit candidates in order under the caps; return what this walk admitted."""
        object_cap = self.budget.max_objects if object_cap is None else object_cap
        token_cap = self.budget.max_tokens if token_cap is None else token_cap
        taken: list[int] = []
        for raw in candidates:
            item = int(raw)
            if item in self.admitted_set:
                continue
            if (limit is not None and len(taken) >= limit) or len(self.admitted) >= object_cap:
                break
            if not self.fits(item, object_cap, token_cap):
                if on_overflow == "stop":
                    break
                continue
            self.admit(item)
            taken.append(item)
        return taken


def allocate_flat(
    ranking: np.ndarray | list[int],
    token_lengths: np.ndarray,
    budget: Budget,
    on_overflow: OnOverflow = "stop",
) -> Allocation:
    """Take items down the ranking until either ceiling would be exceeded."""
    ranking, token_lengths = _check_inputs(ranking, token_lengths)
    _check_on_overflow(on_overflow)
    state = _Admission(token_lengths, budget)
    state.walk(ranking, on_overflow)
    return _result(ARM_FLAT, state, params={"on_overflow": on_overflow})


def allocate_relational(
    ranking: np.ndarray | list[int],
    token_lengths: np.ndarray,
    graph: Csr,
    budget: Budget,
    params: RelationalParams | None = None,
    arm: str = ARM_RELATIONAL,
) -> Allocation:
    """Seeds from the top of the ranking, then their graph neighbours best-ranked first
    within ``neighbour_share`` of the remaining allowance, then the ranking again."""
    params = params or RelationalParams()
    ranking, token_lengths = _check_inputs(ranking, token_lengths)
    if graph.n_rows != token_lengths.size:
        raise ValueError(
            f"graph has {graph.n_rows} nodes but token_lengths covers {token_lengths.size} objects"
        )
    state = _Admission(token_lengths, budget)
    seeds = state.walk(ranking, params.on_overflow, limit=params.seeds_for(budget))
    object_cap, token_cap = _neighbour_caps(state, budget, params)
    rank_of = _rank_positions(ranking, token_lengths.size)
    candidates = _neighbour_candidates(seeds, graph, rank_of, state.admitted_set, params)
    neighbours = state.walk(candidates, params.on_overflow, object_cap, token_cap)
    state.walk(ranking, params.on_overflow)
    return _result(arm, state, seeds, neighbours, _params_record(params, budget))


def allocate_random_neighbour(
    ranking: np.ndarray | list[int],
    token_lengths: np.ndarray,
    budget: Budget,
    n_admissions: int,
    rng: np.random.Generator,
    params: RelationalParams | None = None,
) -> Allocation:
    """Control: the relational seeds, then ``n_admissions`` objects drawn uniformly at random
    from all objects (instead of graph neighbours) under the same caps, then the ranking."""
    params = params or RelationalParams()
    ranking, token_lengths = _check_inputs(ranking, token_lengths)
    if n_admissions < 0:
        raise ValueError(f"n_admissions must be >= 0, got {n_admissions}")
    state = _Admission(token_lengths, budget)
    seeds = state.walk(ranking, params.on_overflow, limit=params.seeds_for(budget))
    object_cap, token_cap = _neighbour_caps(state, budget, params)
    draws = rng.permutation(token_lengths.size)
    randoms = state.walk(draws, "skip", object_cap, token_cap, limit=n_admissions)
    state.walk(ranking, params.on_overflow)
    record = _params_record(params, budget) | {"n_admissions": int(n_admissions)}
    return _result(ARM_RANDOM_NEIGHBOUR, state, seeds, randoms, record)


def rewire_degree_preserving(graph: Csr, seed: int, swaps_per_edge: int = 10) -> tuple[Csr, int]:
    """A degree-preserving randomisation of a directed graph by edge swaps.

    Repeatedly picks two edges a->b and c->d and replaces them by a->d and c->b, rejecting a
    swap that would create a self-loop or a duplicate edge; out- and in-degrees of every node
    are unchanged by construction. Returns the rewired graph and the number of accepted swaps.
    """
    edges = graph.edges()
    n_edges = edges.shape[0]
    if n_edges < 2:
        return Csr.from_edges(LINKS, graph.n_rows, edges), 0
    rng = np.random.default_rng(seed)
    attempts = swaps_per_edge * n_edges
    picks = rng.integers(0, n_edges, size=(attempts, 2))
    sources = edges[:, 0].tolist()
    targets = edges[:, 1].tolist()
    present = set(zip(sources, targets, strict=True))
    accepted = 0
    for i, j in picks.tolist():
        if i == j:
            continue
        a, b, c, d = sources[i], targets[i], sources[j], targets[j]
        if a == d or c == b or (a, d) in present or (c, b) in present:
            continue
        present.difference_update(((a, b), (c, d)))
        present.update(((a, d), (c, b)))
        targets[i], targets[j] = d, b
        accepted += 1
    rewired = np.stack([np.asarray(sources), np.asarray(targets)], axis=1)
    return Csr.from_edges(LINKS, graph.n_rows, rewired), accepted


# -- internals ------------------------------------------------------------------------------


def _check_inputs(
    ranking: np.ndarray | list[int], token_lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    token_lengths = np.asarray(token_lengths)
    if token_lengths.ndim != 1 or not np.issubdtype(token_lengths.dtype, np.integer):
        raise ValueError("token_lengths must be a 1-D integer array, one length per object")
    if token_lengths.size and token_lengths.min() < 0:
        raise ValueError("token_lengths must be non-negative")
    ranking = np.asarray(ranking, dtype=np.int64).reshape(-1)
    if ranking.size and (ranking.min() < 0 or ranking.max() >= token_lengths.size):
        raise ValueError(
            f"ranking holds an object id outside [0, {token_lengths.size}) (token_lengths size)"
        )
    if np.unique(ranking).size != ranking.size:
        raise ValueError("ranking lists an object more than once")
    return ranking, token_lengths


def _neighbour_caps(state: _Admission, budget: Budget, params: RelationalParams) -> tuple[int, int]:
    """Absolute caps for the neighbour phase: the seeds' spend plus the share of what is left."""
    spare_objects = budget.max_objects - len(state.admitted)
    spare_tokens = budget.max_tokens - state.tokens
    share = float(params.neighbour_share)
    return (
        len(state.admitted) + math.floor(share * spare_objects),
        state.tokens + math.floor(share * spare_tokens),
    )


def _rank_positions(ranking: np.ndarray, n_objects: int) -> np.ndarray:
    """Rank of every object; unranked objects come after every ranked one."""
    rank_of = np.full(n_objects, ranking.size, dtype=np.int64)
    rank_of[ranking] = np.arange(ranking.size, dtype=np.int64)
    return rank_of


def _neighbour_candidates(
    seeds: list[int],
    graph: Csr,
    rank_of: np.ndarray,
    admitted: set[int],
    params: RelationalParams,
) -> list[int]:
    """Union of the seeds' neighbours, best-ranked first (ties by id); with a per-seed cap,
    each seed contributes only its best-ranked ``neighbours_per_seed`` unadmitted neighbours."""
    chosen: set[int] = set()
    for seed_id in seeds:
        neighbours = [int(v) for v in graph.neighbours(seed_id) if int(v) not in admitted]
        neighbours.sort(key=lambda v: (rank_of[v], v))
        if params.neighbours_per_seed is not None:
            neighbours = neighbours[: int(params.neighbours_per_seed)]
        chosen.update(neighbours)
    return sorted(chosen, key=lambda v: (rank_of[v], v))


def _params_record(params: RelationalParams, budget: Budget) -> dict:
    return {
        "seeds": params.seeds_for(budget),
        "seeds_rule": "ceil(K/2)" if params.seeds is None else "fixed",
        "neighbours_per_seed": params.neighbours_per_seed,
        "neighbour_share": float(params.neighbour_share),
        "on_overflow": params.on_overflow,
    }


def _result(
    arm: str,
    state: _Admission,
    seeds: list[int] | None = None,
    neighbours: list[int] | None = None,
    params: dict | None = None,
) -> Allocation:
    allocation = Allocation(
        arm=arm,
        admitted=tuple(state.admitted),
        realised_objects=len(state.admitted),
        realised_tokens=state.tokens,
        max_objects=state.budget.max_objects,
        max_tokens=state.budget.max_tokens,
        seeds=tuple(seeds or ()),
        neighbours=tuple(neighbours or ()),
        params=params or {},
    )
    # a broken ceiling is a bug in this module, never a property of the input
    assert allocation.within_ceilings, allocation
    return allocation
