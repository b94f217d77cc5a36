"""Are the ladder's refusals right? Three measurements on any lake's graph:

- **Control questions.** Each real question gets a twin with one grounded BRIDGE concept
  (one the graph knows) swapped for a random BRIDGE descriptor of the same MeSH tree
  category that the graph also knows. A system that answers the twins as often as the real
  questions is not using the graph. Reported: answered share, real vs control, and the
  paired difference (real - control) with a bootstrap CI (``evaluation/common/stats.py``).
- **The min_paths sweep.** Requiring k = 1..8 surviving evidence paths: coverage of the real
  questions vs the leak (controls answered). One ask per question: gate 6 is the last gate
  before the verifier and the verifier does not depend on k, so a question is answered at k
  exactly when it is answered at k = 1 with at least k evidence paths.
- **Refusal under evidence deletion** (``evidence_deletion.py``): the real questions asked
  again with their source article, then the chosen pair's DIRECT articles, then its BRIDGE
  terminals deleted (T0-T3), beside random deletions of the same sizes.
- **The gate-class tables.** Gates switched on cumulatively (``TIERS``: gates 1-2, 1-6, 1-6
  with the as-of cutoff, 1-7) on question sets built from the graph to fail one gate class
  each (``FAILURE_CLASSES``); each built question is kept only when the full ladder refuses
  it for its own class. The gate sets are nested and a gate switched on can only shrink the
  surviving paths, so the rates are monotone by construction: the tables check that each
  gate is wired to its class, not that refusal tracks evidence (the deletion tiers do).
  The verifier NOINFO class needs a verifier on the graph (gate 7 on, with its tau);
  without one it is empty, its rate None.

The twin of a question is a function of (question, seed) on a given graph.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from kg_platform.answer.api import KnowledgeGraph
from kg_platform.answer.examples import TEMPLATES, graph_questions
from kg_platform.answer.ladder import RefusalReason as R
from kg_platform.evaluation.common.stats import bootstrap_rd_ci, paired_counts
from kg_platform.evaluation.refusal.evidence_deletion import (
    DeletionResult,
    evaluate_evidence_deletion,
    render_deletion,
)
from kg_platform.graph.layout import RETRACTED
from kg_platform.grounding.grounder import question_words
from kg_platform.grounding.roles import Role
from kg_platform.retrieval.linking import concepts_in_graph
from kg_platform.storage.mesh import read_mesh

SWEEP_KS = tuple(range(1, 9))
MAX_SWAP_TRIES = 25
FAILURE_CLASSES = (
    "unknown_concept",
    "no_path",
    "as_of_cutoff",
    "retracted_only",
    "verifier_noinfo",
)
# every reason that is not a gate of a tier stays off in that tier; gates_1_7 is the full ladder
# (gate 7 there does nothing without a verifier)
TIERS: tuple[tuple[str, frozenset[R]], ...] = (
    ("gates_1_2", frozenset({R.NO_MESH_ENTRY_POINT, R.TOO_FEW_SPECIFIC_CONCEPTS})),
    (
        "gates_1_6",
        frozenset(
            {
                R.NO_MESH_ENTRY_POINT,
                R.TOO_FEW_SPECIFIC_CONCEPTS,
                R.NO_PATH,
                R.NO_QUOTABLE_TERMINAL,
                R.INSUFFICIENT_PATHS,
            }
        ),
    ),
)
TIERS += (("gates_1_6_as_of", TIERS[1][1] | {R.NO_EVIDENCE_AS_OF_DATE}),)
TIERS += (("gates_1_7", TIERS[2][1] | {R.ONLY_RETRACTED_EVIDENCE, R.VERIFIER_NOINFO}),)
# the reasons that mean "built to fail this class" (the full ladder's first failing gate)
CLASS_REASONS = {
    "unknown_concept": {R.NO_MESH_ENTRY_POINT, R.TOO_FEW_SPECIFIC_CONCEPTS},
    "no_path": {R.NO_PATH},
    "as_of_cutoff": {R.NO_EVIDENCE_AS_OF_DATE},
    "retracted_only": {R.ONLY_RETRACTED_EVIDENCE},
    "verifier_noinfo": {R.VERIFIER_NOINFO},
}
UNKNOWN_PLACEHOLDER = "zyxoquantrel"  # no MeSH term: the fallback unknown concept


def question_seed(question: str, seed: int) -> np.random.Generator:
    digest = int.from_bytes(hashlib.sha256(question.encode()).digest()[:8], "big")
    return np.random.default_rng([seed, digest])


@dataclass(frozen=True)
class ControlQuestion:
    """A real question and its twin (None when no swap could be made)."""

    qid: str
    real: str
    control: str | None
    swapped_ui: str | None = None
    replacement_ui: str | None = None


class ControlMaker:
    """Swaps one grounded BRIDGE concept of a question for a random BRIDGE descriptor of the
    same MeSH tree category (the tree number's letter) that the graph knows."""

    def __init__(self, kg: KnowledgeGraph) -> None:
        self.kg = kg
        tree = pl.from_arrow(read_mesh(kg.lake, "tree"))
        self.categories: dict[str, set[str]] = {}
        for ui, number in zip(tree["ui"].to_list(), tree["tree_number"].to_list(), strict=True):
            self.categories.setdefault(ui, set()).add(number[:1])
        self.graph_bridges = graph_bridge_uis(kg)
        self.by_category: dict[str, list[str]] = {}
        for ui in self.graph_bridges:
            for category in sorted(self.categories.get(ui, ())):
                self.by_category.setdefault(category, []).append(ui)

    def make(self, qid: str, question: str, seed: int) -> ControlQuestion:
        kg = self.kg
        roled = kg.ground(question)
        bridges = [r.grounding for r in roled if r.role == Role.BRIDGE]
        known = sorted(
            (c.grounding for c in concepts_in_graph(kg.store, bridges)), key=lambda g: g.ui
        )
        if not known:
            return ControlQuestion(qid, question, None)
        rng = question_seed(question, seed)
        swapped = known[int(rng.integers(len(known)))]
        present = {g.ui for g in (r.grounding for r in roled)}
        pool = sorted(
            {
                ui
                for c in sorted(self.categories.get(swapped.ui, ()))
                for ui in self.by_category.get(c, ())
            }
            - present
        )
        words = question_words(question)
        for i in rng.permutation(len(pool))[:MAX_SWAP_TRIES]:
            ui = pool[int(i)]
            name = kg.grounder.names[ui]
            text = " ".join([*words[: swapped.start], name, *words[swapped.end :]]) + "?"
            grounded = {r.grounding.ui for r in kg.ground(text) if r.role == Role.BRIDGE}
            if ui in grounded and swapped.ui not in grounded:
                return ControlQuestion(qid, question, text, swapped.ui, ui)
        return ControlQuestion(qid, question, None, swapped.ui)


def graph_bridge_uis(kg: KnowledgeGraph) -> list[str]:
    """BRIDGE descriptors that index at least one article of the graph, sorted."""
    store = kg.store
    uis = np.char.decode(np.asarray(store.array("mesh_uis")), "ascii")
    counts = np.asarray(store.array("mesh_article_count"))
    return sorted(
        str(u)
        for u, n in zip(uis, counts, strict=True)
        if n > 0 and kg.roles.get(str(u), ("",))[0] == Role.BRIDGE
    )


# --- asking --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What the ladder (with min_paths = 1) did with one question."""

    answerable: bool
    reason: str | None
    evidence_paths: int

    def answered_at(self, k: int) -> bool:
        return self.answerable and self.evidence_paths >= k


def _top_k(kg: KnowledgeGraph) -> int:
    # the evidence a verifier (gate 7) reads, when there is one; the verdict needs no more
    return kg.config.verifier_k


def verifier_gate_on(kg: KnowledgeGraph) -> bool:
    """Whether gate 7 can refuse on this graph: a verifier, a tau and the gate not off."""
    ladder = kg.config.ladder
    return (
        kg.verifier is not None and ladder.verifier_tau is not None and ladder.on(R.VERIFIER_NOINFO)
    )


def without_verifier_gate(kg: KnowledgeGraph) -> KnowledgeGraph:
    """The same graph with gate 7 switched off (gates 1-6 as they are)."""
    ladder = replace(kg.config.ladder, disabled=kg.config.ladder.disabled | {R.VERIFIER_NOINFO})
    return kg.with_config(replace(kg.config, ladder=ladder))


def ask_outcome(kg: KnowledgeGraph, question: str, as_of: int | None = None) -> Outcome:
    verdict = kg.ask(question, as_of=as_of, top_k=_top_k(kg)).verdict
    reason = verdict.reason.value if verdict.reason else None
    return Outcome(verdict.answerable, reason, int(verdict.counts.get("evidence_paths", 0)))


def with_min_paths(kg: KnowledgeGraph, k: int) -> KnowledgeGraph:
    return kg.with_config(replace(kg.config, ladder=replace(kg.config.ladder, min_paths=k)))


# --- control questions and the sweep -------------------------------------------------------


@dataclass(frozen=True)
class SweepRow:
    k: int
    real_answered: float
    control_answered: float
    real_answered_paired: float  # over the questions that have a twin


@dataclass(frozen=True)
class ControlResult:
    n: int
    n_controls: int
    min_paths: int
    real_answered: float
    control_answered: float
    difference: float  # real - control over the twinned questions
    ci: tuple[float, float] | None
    counts: dict[str, int]  # improve / tie / harm of real over control
    sweep: tuple[SweepRow, ...]
    real_reasons: dict[str, int]
    control_reasons: dict[str, int]
    controls: tuple[ControlQuestion, ...] = field(repr=False, default=())
    # the ladder's outcome (min_paths 1) on each real question, in question order
    real: tuple[Outcome, ...] = field(repr=False, default=())


def evaluate_controls(
    kg: KnowledgeGraph,
    questions: Sequence[tuple[str, str]],
    min_paths: int,
    seed: int = 0,
    resamples: int = 10_000,
) -> ControlResult:
    """Real vs control answered shares over ``questions`` ((qid, text) pairs) at ``min_paths``
    and over the sweep; the twins are made with ``seed``."""
    if not questions:
        raise ValueError("refusal evaluation: no questions")
    one = with_min_paths(kg, 1)
    maker = ControlMaker(kg)
    controls = [maker.make(qid, text, seed) for qid, text in questions]
    real = [ask_outcome(one, c.real) for c in controls]
    twin = [ask_outcome(one, c.control) if c.control else None for c in controls]
    paired = [i for i, t in enumerate(twin) if t is not None]

    def share(outcomes: Sequence[Outcome | None], k: int, rows: Sequence[int]) -> float:
        if not rows:
            return 0.0
        return sum(bool(outcomes[i] and outcomes[i].answered_at(k)) for i in rows) / len(rows)

    everyone = range(len(controls))
    sweep = tuple(
        SweepRow(k, share(real, k, everyone), share(twin, k, paired), share(real, k, paired))
        for k in SWEEP_KS
    )
    r = np.array([int(real[i].answered_at(min_paths)) for i in paired], dtype=np.int8)
    c = np.array([int(twin[i].answered_at(min_paths)) for i in paired], dtype=np.int8)  # type: ignore[union-attr]
    counts = paired_counts(r, c)
    ci = bootstrap_rd_ci(r, c, resamples=resamples, seed=seed) if len(paired) else None
    return ControlResult(
        n=len(controls),
        n_controls=len(paired),
        min_paths=min_paths,
        real_answered=share(real, min_paths, everyone),
        control_answered=share(twin, min_paths, paired),
        difference=counts.risk_difference,
        ci=ci,
        counts={"improve": counts.improve, "tie": counts.tie, "harm": counts.harm},
        sweep=sweep,
        real_reasons=_reasons(real),
        control_reasons=_reasons([t for t in twin if t is not None]),
        controls=tuple(controls),
        real=tuple(real),
    )


def _reasons(outcomes: Sequence[Outcome]) -> dict[str, int]:
    counted = Counter(o.reason or "answered" for o in outcomes)
    return dict(sorted(counted.items()))


# --- the gate-class tables --------------------------------------------------------------------


@dataclass(frozen=True)
class BuiltQuestion:
    failure_class: str
    text: str
    as_of: int | None = None


def _fails_as(kg: KnowledgeGraph, q: BuiltQuestion) -> bool:
    verdict = kg.ask(q.text, as_of=q.as_of, top_k=_top_k(kg)).verdict
    return verdict.reason in CLASS_REASONS[q.failure_class]


def build_failure_sets(
    kg: KnowledgeGraph, per_class: int = 50, seed: int = 0
) -> dict[str, list[BuiltQuestion]]:
    """Up to ``per_class`` questions per failure class, each refused by the full ladder (at
    the kg's own min_paths) for that class; a class the graph cannot produce (e.g. no
    retracted article, or no verifier for verifier NOINFO) stays empty."""
    rng = np.random.default_rng(seed)
    names = kg.grounder.names
    made = graph_questions(kg, 20 * per_class, seed).questions
    # the graph-made questions that pass gates 1-6 (the verifier is not run on them here)
    unverified = without_verifier_gate(kg)
    passing = [q for q in made if unverified.ask(q.text, top_k=_top_k(kg)).verdict.answerable]
    answerable = passing[:per_class]
    sets: dict[str, list[BuiltQuestion]] = {c: [] for c in FAILURE_CLASSES}

    seen: set[tuple[str, str, int | None]] = set()

    def keep(q: BuiltQuestion) -> None:
        key = (q.failure_class, q.text, q.as_of)
        if key in seen or len(sets[q.failure_class]) == per_class:
            return
        seen.add(key)
        if _fails_as(kg, q):
            sets[q.failure_class].append(q)

    # unknown concept: one concept replaced by a BRIDGE descriptor the graph has no article for
    in_graph = set(graph_bridge_uis(kg))
    unknown = sorted(
        u for u, (role, _) in kg.roles.items() if role == Role.BRIDGE and u not in in_graph
    )
    for i, q in enumerate(answerable):
        other = names[unknown[int(rng.integers(len(unknown)))]] if unknown else UNKNOWN_PLACEHOLDER
        keep(BuiltQuestion("unknown_concept", TEMPLATES[i % 3].format(a=names[q.a_ui], b=other)))
    # no path: random pairs of graph concepts that share no article and no citation
    bridges = sorted(in_graph)
    if len(bridges) >= 2:
        for i in range(50 * per_class):
            if len(sets["no_path"]) == per_class:
                break
            a, b = rng.choice(len(bridges), 2, replace=False)
            text = TEMPLATES[i % 3].format(a=names[bridges[int(a)]], b=names[bridges[int(b)]])
            keep(BuiltQuestion("no_path", text))
    # as-of cutoff: an answerable question asked the year before its oldest evidence
    for q in answerable:
        years = [e.path.terminal.year for e in unverified.ask(q.text, top_k=10**6).evidence]
        years = [y for y in years if y and y > 1000]
        if years:
            keep(BuiltQuestion("as_of_cutoff", q.text, min(years) - 1))
    # retracted-only: the major BRIDGE pairs of retracted articles
    flags = np.asarray(kg.store.array("flags"))
    for i in np.flatnonzero(flags & RETRACTED)[
        rng.permutation(int((flags & RETRACTED != 0).sum()))
    ]:
        uis = sorted(
            u
            for u in (kg.store.mesh_ui(int(d)) for d in kg.store.mesh_of(int(i), major_only=True))
            if u in in_graph
        )
        if len(uis) >= 2:
            keep(
                BuiltQuestion(
                    "retracted_only", TEMPLATES[0].format(a=names[uis[0]], b=names[uis[1]])
                )
            )
        if len(sets["retracted_only"]) == per_class:
            break
    # verifier NOINFO: a question passing gates 1-6 whose top evidence the verifier finds
    # no information in (P(NOINFO) above tau on every article it read)
    if verifier_gate_on(kg):
        for q in passing:
            if len(sets["verifier_noinfo"]) == per_class:
                break
            keep(BuiltQuestion("verifier_noinfo", q.text))
    return sets


@dataclass(frozen=True)
class TierResult:
    tier: str
    gates: tuple[str, ...]
    refusal_rate: float | None  # over every built question
    per_class: dict[str, float | None]


def evaluate_ablation(
    kg: KnowledgeGraph, sets: dict[str, list[BuiltQuestion]]
) -> tuple[TierResult, ...]:
    """Refusal rates per tier, over all built questions and per failure class."""
    every_reason = frozenset(R)
    results = []
    for tier, on in TIERS:
        ladder = replace(kg.config.ladder, disabled=every_reason - on)
        tiered = kg.with_config(replace(kg.config, ladder=ladder))
        per_class: dict[str, float | None] = {}
        refused_all = total = 0
        for name in FAILURE_CLASSES:
            questions = sets.get(name, [])
            refused = sum(
                not tiered.ask(q.text, as_of=q.as_of, top_k=_top_k(tiered)).verdict.answerable
                for q in questions
            )
            per_class[name] = refused / len(questions) if questions else None
            refused_all += refused
            total += len(questions)
        results.append(
            TierResult(
                tier,
                tuple(sorted(r.value for r in on)),
                refused_all / total if total else None,
                per_class,
            )
        )
    return tuple(results)


def is_monotone(tiers: Sequence[TierResult]) -> bool:
    rates = [t.refusal_rate for t in tiers if t.refusal_rate is not None]
    per_class = [
        [t.per_class[c] for t in tiers if t.per_class[c] is not None] for c in FAILURE_CLASSES
    ]
    return all(a <= b for seq in [rates, *per_class] for a, b in zip(seq, seq[1:], strict=False))


# --- the report ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RefusalReport:
    controls: ControlResult
    ablation: tuple[TierResult, ...]
    set_sizes: dict[str, int]
    seed: int
    deletion: DeletionResult | None = None

    def to_json(self) -> dict:
        c = self.controls
        return {
            "n": c.n,
            "n_controls": c.n_controls,
            "min_paths": c.min_paths,
            "real_answered": round(c.real_answered, 6),
            "control_answered": round(c.control_answered, 6),
            "difference": round(c.difference, 6),
            "difference_ci95": [round(x, 6) for x in c.ci] if c.ci else None,
            "paired_counts": dict(c.counts),
            "sweep": [
                {
                    "k": r.k,
                    "real_answered": round(r.real_answered, 6),
                    "control_answered": round(r.control_answered, 6),
                    "real_answered_paired": round(r.real_answered_paired, 6),
                }
                for r in c.sweep
            ],
            "real_reasons": dict(c.real_reasons),
            "control_reasons": dict(c.control_reasons),
            "ablation": [_r(t.refusal_rate) for t in self.ablation],
            "ablation_tiers": [
                {
                    "tier": t.tier,
                    "gates": list(t.gates),
                    "refusal_rate": _r(t.refusal_rate),
                    "per_class": {k: _r(v) for k, v in t.per_class.items()},
                }
                for t in self.ablation
            ],
            "ablation_sets": dict(self.set_sizes),
            "ablation_monotone": is_monotone(self.ablation),
            "seed": self.seed,
            "evidence_deletion": self.deletion.to_json() if self.deletion else None,
        }


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def evaluate_refusal(
    kg: KnowledgeGraph,
    questions: Sequence[tuple[str, str]],
    min_paths: int | None = None,
    seed: int = 0,
    per_class: int = 50,
    resamples: int = 10_000,
) -> RefusalReport:
    """Controls, the sweep and evidence deletion on ``questions``, and the gate-class tables
    on failure sets built from the graph; ``min_paths`` defaults to the kg's own."""
    k = kg.config.ladder.min_paths if min_paths is None else min_paths
    if k < 1:
        raise ValueError(f"min_paths {k}: must be at least 1")
    controls = evaluate_controls(kg, questions, k, seed, resamples)
    graph = with_min_paths(kg, k)
    sets = build_failure_sets(graph, per_class, seed)
    ablation = evaluate_ablation(graph, sets)
    deletion = evaluate_evidence_deletion(graph, questions, seed, resamples)
    sizes = {c: len(v) for c, v in sets.items()}
    return RefusalReport(controls, ablation, sizes, seed, deletion)


def render_report(doc: dict, source: str) -> str:
    """The terminal summary of a refusal report's document (RefusalReport.to_json)."""
    lo_hi = doc["difference_ci95"]
    ci = f" (95% CI {lo_hi[0]:+.3f} to {lo_hi[1]:+.3f})" if lo_hi else ""
    lines = [
        f"refusal evaluation: {source}, {doc['n']} questions, {doc['n_controls']} with a twin",
        f"  min_paths {doc['min_paths']}: real answered {doc['real_answered']:.3f}, "
        f"controls answered (leak) {doc['control_answered']:.3f}, "
        f"real - control {doc['difference']:+.3f}{ci}",
        "  sweep   k  real  control",
    ]
    lines += [
        f"         {r['k']}  {r['real_answered']:.3f}  {r['control_answered']:.3f}"
        for r in doc["sweep"]
    ]
    lines.append(f"  real refusals: {doc['real_reasons']}")
    if doc["evidence_deletion"] is not None:
        lines += render_deletion(doc["evidence_deletion"])
    lines.append(f"  gate-class tables (a wiring check), built sets: {doc['ablation_sets']}")
    for t in doc["ablation_tiers"]:
        rate = "n/a" if t["refusal_rate"] is None else f"{t['refusal_rate']:.3f}"
        lines.append(f"  {t['tier']} refused {rate}  per class {t['per_class']}")
    return "\n".join(lines) + "\n"
