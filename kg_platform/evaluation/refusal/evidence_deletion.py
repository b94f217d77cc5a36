"""Refusal under evidence deletion: does the ladder refuse when the evidence is gone?

Real questions are asked on a graph that holds each question's source article (a PubMedQA
question's key is its article's PMID), then asked again with articles deleted
(``KnowledgeGraph.ask(excluded=...)``, ``retrieval/exclusion.py``), nothing else changed:

- **T0** the full graph;
- **T1** without the source article;
- **T2** also without every article carrying both concepts of the pair the linker chose at
  T0 (the pair's DIRECT evidence);
- **T3** also without every terminal of that pair's BRIDGE paths.

A question the linker found no pair for at T0 has only its source deleted at T2 and T3.
The sets are nested, but the refusal rates are not monotone by construction: with a pair's
paths gone the linker tries the next pair, which may answer.

The control that cannot carry signal: at each of T1-T3 the same number of articles, drawn
at random from the whole graph (seeded by question), is deleted instead. Refusal under a
random deletion should stay at T0's; a tier above its control is refusal that tracks the
evidence. Reported: refusal per tier with a bootstrap CI over questions, the paired
differences T1-T0, T2-T1, T3-T2 and each tier against its control with bootstrap CIs, the
reasons per tier, and how many answers at a tier came from another pair than T0's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kg_platform.answer.api import KnowledgeGraph
from kg_platform.answer.question import Answer
from kg_platform.evaluation.common.stats import bootstrap_mean_ci, bootstrap_rd_ci
from kg_platform.retrieval.exclusion import excluded_nodes, pair_paths
from kg_platform.retrieval.linking import ConceptPair

DELETION_TIERS = ("T0", "T1", "T2", "T3")
ANSWERED = "answered"


@dataclass(frozen=True)
class DeletionSets:
    """A question's nested exclusion sets (node indices, ascending), T0's empty."""

    pair: ConceptPair | None
    tiers: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def deletion_sets(kg: KnowledgeGraph, source: int, pair: ConceptPair | None) -> DeletionSets:
    """T0-T3 exclusion sets of a question whose source article is node ``source`` and whose
    pair chosen on the full graph is ``pair`` (None: no pair)."""
    t0 = np.zeros(0, dtype=np.int64)
    t1 = np.array([source], dtype=np.int64)
    if pair is None:
        return DeletionSets(None, (t0, t1, t1, t1))
    direct, terminals = pair_paths(kg.store, pair)
    t2 = np.union1d(t1, direct).astype(np.int64)
    t3 = np.union1d(t2, terminals).astype(np.int64)
    return DeletionSets(pair, (t0, t1, t2, t3))


def random_deletion(n_articles: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` distinct articles of the graph drawn uniformly, ascending."""
    size = min(size, n_articles)
    return np.sort(rng.choice(n_articles, size, replace=False)).astype(np.int64)


@dataclass(frozen=True)
class DeletionOutcome:
    """One question: the outcome at T0-T3 and under the size-matched random deletions
    (T1-T3), each "answered" or the refusal reason."""

    qid: str
    pair: tuple[str, str] | None
    excluded: tuple[int, ...]  # articles deleted at T0-T3
    tiers: tuple[str, ...]
    controls: tuple[str, ...]
    other_pair: tuple[bool, ...]  # T0-T3: answered through a pair other than T0's


def _outcome(answer: Answer) -> str:
    verdict = answer.verdict
    return ANSWERED if verdict.answerable else str(verdict.reason.value if verdict.reason else "")


def _pair_key(pair: ConceptPair | None) -> tuple[str, str] | None:
    return None if pair is None else (pair.a_ui, pair.b_ui)


def ask_deleted(
    kg: KnowledgeGraph, qid: str, source: int, text: str, seed: int = 0
) -> DeletionOutcome:
    """Ask ``text`` at T0-T3 and under the random deletions of the same sizes."""
    top_k = kg.config.verifier_k
    full = kg.ask(text, top_k=top_k)
    sets = deletion_sets(kg, source, full.chosen_pair)
    key = _pair_key(full.chosen_pair)
    tiers, other = [_outcome(full)], [False]
    for excluded in sets.tiers[1:]:
        answer = kg.ask(text, top_k=top_k, excluded=excluded)
        tiers.append(_outcome(answer))
        other.append(answer.verdict.answerable and _pair_key(answer.chosen_pair) != key)
    rng = np.random.default_rng([seed, int(source)])
    controls = [
        _outcome(
            kg.ask(
                text,
                top_k=top_k,
                excluded=random_deletion(kg.store.n_articles, excluded.size, rng),
            )
        )
        for excluded in sets.tiers[1:]
    ]
    return DeletionOutcome(
        qid,
        key,
        tuple(int(s.size) for s in sets.tiers),
        tuple(tiers),
        tuple(controls),
        tuple(other),
    )


@dataclass(frozen=True)
class DeletionResult:
    n: int  # questions whose source article is in the graph
    missing_sources: tuple[str, ...]  # question ids whose article the graph does not hold
    outcomes: tuple[DeletionOutcome, ...]
    seed: int
    resamples: int

    def refused(self, tier: int) -> np.ndarray:
        return np.array([o.tiers[tier] != ANSWERED for o in self.outcomes], dtype=np.int8)

    def control_refused(self, tier: int) -> np.ndarray:
        """Refused under the random deletion matched to ``tier`` (1-3)."""
        return np.array([o.controls[tier - 1] != ANSWERED for o in self.outcomes], dtype=np.int8)

    def to_json(self) -> dict:
        if not self.outcomes:
            return {
                "n": 0,
                "missing_sources": len(self.missing_sources),
                "tiers": None,
            }
        seed, resamples = self.seed, self.resamples

        def ci(values: np.ndarray) -> list[float]:
            return [round(x, 6) for x in bootstrap_mean_ci(values, resamples=resamples, seed=seed)]

        def rd(a: np.ndarray, b: np.ndarray) -> dict:
            lo, hi = bootstrap_rd_ci(a, b, resamples=resamples, seed=seed)
            return {
                "difference": round(float(a.mean() - b.mean()), 6),
                "ci95": [round(lo, 6), round(hi, 6)],
            }

        tiers = []
        for i, name in enumerate(DELETION_TIERS):
            refused = self.refused(i)
            row: dict[str, object] = {
                "tier": name,
                "refused": int(refused.sum()),
                "refusal_rate": round(float(refused.mean()), 6),
                "refusal_ci95": ci(refused),
                "excluded_mean": round(float(np.mean([o.excluded[i] for o in self.outcomes])), 3),
                "reasons": dict(sorted(Counter(o.tiers[i] for o in self.outcomes).items())),
                "answered_by_another_pair": sum(o.other_pair[i] for o in self.outcomes),
            }
            if i:
                control = self.control_refused(i)
                row["control_refusal_rate"] = round(float(control.mean()), 6)
                row["control_refusal_ci95"] = ci(control)
                row["minus_control"] = rd(refused, control)
                row["minus_previous"] = rd(refused, self.refused(i - 1))
            tiers.append(row)
        return {
            "n": self.n,
            "missing_sources": len(self.missing_sources),
            "with_pair_at_t0": sum(o.pair is not None for o in self.outcomes),
            "tiers": tiers,
            "seed": seed,
        }


def evaluate_evidence_deletion(
    kg: KnowledgeGraph,
    questions: Sequence[tuple[str, str]],
    seed: int = 0,
    resamples: int = 10_000,
) -> DeletionResult:
    """T0-T3 and their random-deletion controls over ``questions`` ((qid, text), the qid
    the source article's PMID); a question whose article is not in the graph is left out
    and counted."""
    if not questions:
        raise ValueError("evidence deletion: no questions")
    outcomes, missing = [], []
    for qid, text in questions:
        source = excluded_nodes(kg.store, [int(qid)]) if qid.isdigit() else np.zeros(0)
        if source.size == 0:
            missing.append(qid)
            continue
        outcomes.append(ask_deleted(kg, qid, int(source[0]), text, seed))
    return DeletionResult(len(outcomes), tuple(missing), tuple(outcomes), seed, resamples)


def render_deletion(doc: dict) -> list[str]:
    """The evidence-deletion lines of the text report."""
    if doc["tiers"] is None:
        return [
            f"  evidence deletion: no question's source article is in the graph "
            f"({doc['missing_sources']} missing)"
        ]
    lines = [
        f"  evidence deletion: {doc['n']} questions with their source article in the graph "
        f"({doc['missing_sources']} without), {doc['with_pair_at_t0']} with a pair at T0",
        "    tier  refused  95% CI           random deletion  tier - previous",
    ]
    for t in doc["tiers"]:
        lo, hi = t["refusal_ci95"]
        line = f"    {t['tier']}    {t['refusal_rate']:.3f}    [{lo:.3f}, {hi:.3f}]"
        if "control_refusal_rate" in t:
            prev = t["minus_previous"]
            line += (
                f"   {t['control_refusal_rate']:.3f}            {prev['difference']:+.3f} "
                f"[{prev['ci95'][0]:+.3f}, {prev['ci95'][1]:+.3f}]"
            )
        lines.append(line)
        lines.append(f"          reasons {t['reasons']}")
    return lines
