"""The refusal ladder: gates in a fixed order, each with a named reason, run before any
generator could. The verdict carries the reason, the counts at every stage and one line a
person can read."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from kg_platform.answer.verifier import Verifier


class RefusalReason(StrEnum):
    NO_MESH_ENTRY_POINT = "no_mesh_entry_point"  # gate 1
    TOO_FEW_SPECIFIC_CONCEPTS = "too_few_specific_concepts"  # gate 2
    NO_PATH = "no_path"  # gate 3
    NO_QUOTABLE_TERMINAL = "no_quotable_terminal"  # gate 4
    ONLY_RETRACTED_EVIDENCE = "only_retracted_evidence"  # gate 5
    NO_EVIDENCE_AS_OF_DATE = "no_evidence_as_of_date"  # gate 5, with an as-of year
    INSUFFICIENT_PATHS = "insufficient_paths"  # gate 6
    VERIFIER_NOINFO = "verifier_noinfo"  # gate 7, after ranking, with a verifier
    # gates 3-6 would refuse on what a path search cut short by its time budget had read
    # (``KnowledgeGraph.ask(path_budget_ms=...)``): not a finding about the graph
    PATH_SEARCH_CUT = "path_search_cut"


GATE_OF: dict[RefusalReason, int] = {
    RefusalReason.NO_MESH_ENTRY_POINT: 1,
    RefusalReason.TOO_FEW_SPECIFIC_CONCEPTS: 2,
    RefusalReason.NO_PATH: 3,
    RefusalReason.NO_QUOTABLE_TERMINAL: 4,
    RefusalReason.ONLY_RETRACTED_EVIDENCE: 5,
    RefusalReason.NO_EVIDENCE_AS_OF_DATE: 5,
    RefusalReason.INSUFFICIENT_PATHS: 6,
    RefusalReason.VERIFIER_NOINFO: 7,
    RefusalReason.PATH_SEARCH_CUT: 3,
}
# gate 7 refuses when P(NOINFO) on every verified evidence article is above this
DEFAULT_VERIFIER_TAU = 0.5


@dataclass(frozen=True)
class LadderConfig:
    # gate 6: fewer surviving evidence paths than this is a refusal
    min_paths: int = 1
    # gates switched off (the refusal ablation): their condition is not looked at at all,
    # e.g. without ONLY_RETRACTED_EVIDENCE retracted paths count as evidence
    disabled: frozenset[RefusalReason] = frozenset()
    # gate 7 (only with a verifier): None switches it off
    verifier_tau: float | None = DEFAULT_VERIFIER_TAU

    def __post_init__(self) -> None:
        if self.min_paths < 0:
            raise ValueError(f"min_paths {self.min_paths}: must be at least 0")
        if self.verifier_tau is not None and not 0.0 <= self.verifier_tau <= 1.0:
            raise ValueError(f"verifier tau {self.verifier_tau}: must be in [0, 1]")

    def on(self, reason: RefusalReason) -> bool:
        return reason not in self.disabled


@dataclass(frozen=True)
class LadderInput:
    """What the ladder looks at, gathered by the question path."""

    n_groundings: int
    n_bridge_concepts: int  # BRIDGE concepts the graph knows
    n_candidates: int
    quotable: np.ndarray  # per candidate path
    retracted: np.ndarray
    year: np.ndarray  # newest year on each path, 0 = unknown
    as_of: int | None = None


@dataclass(frozen=True)
class Verdict:
    answerable: bool
    reason: RefusalReason | None
    gate: int | None
    explanation: str
    counts: dict[str, int]
    # which ranker orders the evidence ("dense" or "structural"); set by the question path
    ranker: str | None = None
    # dense ranking signals of the surviving candidates (top-1 and mean top-8 similarity);
    # None when structural or refused before ranking
    signals: dict[str, float | int | None] | None = None
    # gate 7's reading (``VerifierCheck.to_json``); None without a verifier or when an
    # earlier gate refused
    verifier: dict | None = None

    def to_json(self) -> dict:
        return {
            "answerable": self.answerable,
            "reason": self.reason.value if self.reason else None,
            "gate": self.gate,
            "explanation": self.explanation,
            "counts": dict(self.counts),
            "ranker": self.ranker,
            "signals": dict(self.signals) if self.signals is not None else None,
            "verifier": dict(self.verifier) if self.verifier is not None else None,
        }


@dataclass(frozen=True)
class PathCounts:
    """How many candidate paths pass each of gates 3-6's conditions, in the ladder's order:
    every candidate, quotable terminal, then alive after gate 5's retraction filter (when on)
    and after the as-of cutoff (when given and on); ``evidence`` is what survives all of
    them. The question path can count these in one compiled pass
    (``retrieval.paths.pair_evidence``) without keeping a mask per candidate."""

    candidates: int
    quotable: int
    unretracted: int
    as_of: int
    evidence: int


def path_counts(inp: LadderInput, config: LadderConfig) -> tuple[PathCounts, np.ndarray]:
    """The counts of ``inp``'s candidates and the mask of those alive after gates 4-5 (and
    the as-of cutoff), each gate's condition looked at only when it is on."""
    quotable = np.asarray(inp.quotable, dtype=bool)
    if config.on(RefusalReason.NO_QUOTABLE_TERMINAL):
        alive = quotable.copy()
    else:
        alive = np.ones(inp.n_candidates, dtype=bool)
    unretracted = as_of = 0
    if config.on(RefusalReason.ONLY_RETRACTED_EVIDENCE):
        alive &= ~np.asarray(inp.retracted, dtype=bool)
        unretracted = int(alive.sum())
    if inp.as_of is not None and config.on(RefusalReason.NO_EVIDENCE_AS_OF_DATE):
        year = np.asarray(inp.year)
        alive &= (year > 0) & (year <= inp.as_of)
        as_of = int(alive.sum())
    counts = PathCounts(inp.n_candidates, int(quotable.sum()), unretracted, as_of, int(alive.sum()))
    return counts, alive


def run_ladder(
    inp: LadderInput, config: LadderConfig = LadderConfig()
) -> tuple[Verdict, np.ndarray]:
    """The verdict and the mask of candidate paths that survive every gate."""
    paths, alive = path_counts(inp, config)
    verdict = decide(inp.n_groundings, inp.n_bridge_concepts, paths, inp.as_of, config)
    return verdict, alive if verdict.answerable else np.zeros(inp.n_candidates, dtype=bool)


def decide(
    n_groundings: int,
    n_bridge_concepts: int,
    paths: PathCounts,
    as_of: int | None,
    config: LadderConfig = LadderConfig(),
) -> Verdict:
    """Gates 1-6 in order on the counts: the first gate that is on and whose condition
    fails refuses, with the counts of every stage reached."""
    counts = {"groundings": n_groundings, "bridge_concepts": n_bridge_concepts}

    def refuse(reason: RefusalReason, explanation: str) -> Verdict:
        return Verdict(False, reason, GATE_OF[reason], explanation, counts)

    if n_groundings == 0 and config.on(RefusalReason.NO_MESH_ENTRY_POINT):
        return refuse(
            RefusalReason.NO_MESH_ENTRY_POINT, "No MeSH concept was recognised in the question."
        )
    if n_bridge_concepts < 2 and config.on(RefusalReason.TOO_FEW_SPECIFIC_CONCEPTS):
        return refuse(
            RefusalReason.TOO_FEW_SPECIFIC_CONCEPTS,
            f"The question names {n_bridge_concepts} specific concept(s) the graph knows; "
            "linking needs two.",
        )
    counts["candidate_paths"] = paths.candidates
    if paths.candidates == 0 and config.on(RefusalReason.NO_PATH):
        return refuse(
            RefusalReason.NO_PATH,
            "No article carries both concepts and no citation links articles about them.",
        )
    counts["quotable_paths"] = paths.quotable
    if config.on(RefusalReason.NO_QUOTABLE_TERMINAL) and paths.quotable == 0:
        return refuse(
            RefusalReason.NO_QUOTABLE_TERMINAL,
            f"All {paths.candidates} paths end at articles without an abstract to quote.",
        )
    if config.on(RefusalReason.ONLY_RETRACTED_EVIDENCE):
        counts["unretracted_paths"] = paths.unretracted
        if paths.unretracted == 0:
            return refuse(
                RefusalReason.ONLY_RETRACTED_EVIDENCE,
                f"Every quotable path ({counts['quotable_paths']}) runs through a retracted "
                "article.",
            )
    if as_of is not None and config.on(RefusalReason.NO_EVIDENCE_AS_OF_DATE):
        counts["as_of_paths"] = paths.as_of
        if paths.as_of == 0:
            return refuse(
                RefusalReason.NO_EVIDENCE_AS_OF_DATE,
                f"No usable evidence was published in or before {as_of}.",
            )
    counts["evidence_paths"] = paths.evidence
    if paths.evidence < config.min_paths and config.on(RefusalReason.INSUFFICIENT_PATHS):
        return refuse(
            RefusalReason.INSUFFICIENT_PATHS,
            f"{paths.evidence} evidence path(s) survive; at least {config.min_paths} are required.",
        )
    return Verdict(
        True, None, None, f"{paths.evidence} evidence path(s) support the concept pair.", counts
    )


def verifier_gate(verdict: Verdict, check: dict, p_noinfo: np.ndarray, tau: float) -> Verdict:
    """Gate 7 on an answerable verdict: refuse with ``verifier_noinfo`` when the verifier read
    at least one evidence article and found P(NOINFO) above ``tau`` on every one; ``check``
    (the verifier's reading) is attached either way."""
    p = np.asarray(p_noinfo, dtype=np.float64)
    if verdict.answerable and p.size and bool((p > tau).all()):
        return replace(
            verdict,
            answerable=False,
            reason=RefusalReason.VERIFIER_NOINFO,
            gate=GATE_OF[RefusalReason.VERIFIER_NOINFO],
            explanation=(
                f"The verifier found no information on the claim in any of the {p.size} top "
                f"evidence article(s) (lowest P(NOINFO) {p.min():.3f} > {tau})."
            ),
            verifier=check,
        )
    return replace(verdict, verifier=check)


def gate_tau(given: float | None, verifier: object | None) -> float:
    """Gate 7's tau: ``--verifier-tau`` when given, else the one saved with the verifier
    (fitted on SciFact training folds), else the ladder's default."""
    if given is not None:
        return given
    saved = getattr(verifier, "tau", None)
    return DEFAULT_VERIFIER_TAU if saved is None else float(saved)


def open_verifier(folder: str | None) -> Verifier | None:
    """Gate 7's verifier of `--verifier DIR` (None: none); a ValueError names the folder."""
    if folder is None:
        return None
    from kg_platform.answer.verifier import load_verifier

    try:
        return load_verifier(folder)
    except (OSError, ValueError) as error:
        raise ValueError(f"--verifier: {folder}: {error}") from None
