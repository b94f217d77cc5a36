"""The agent loop (``answer/agent.py``) measured beside the one-pass pipeline on the same real
questions and the same control twins (``evaluation.ControlMaker``: one concept swapped for
a random one of its tree category, the control that cannot carry signal).

The pipeline's outcome is the agent's first attempt (hop 0 is the pipeline's ask, tested).
Reported for both: coverage (real answered), leak (twins answered), margin (real - control
on the twinned questions); and between them: rescued (real questions the pipeline refused
and the agent answered), newly leaked (twins the pipeline refused and the agent answered),
the paired differences with bootstrap CIs, and the hops used.

The top-1 similarity veto: the cosine of the question with its best evidence article
(title + abstract, the packaged encoder), over the agent's answered real questions and
twins; its AUROC (real vs control; beside it the same AUROC with the labels shuffled, the
control that cannot carry signal). As a conjunctive veto (answer only when the top-1
similarity reaches tau) tau is chosen on one half of the twinned questions (by a hash of
the question id) to maximise the margin and applied to the other half, both ways, so no
question's outcome chose its own threshold.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from kg_platform.answer.agent import DEFAULT_HOPS, AgentLoop, AgentResult
from kg_platform.answer.api import KnowledgeGraph
from kg_platform.evaluation.common.stats import auroc, bootstrap_mean_ci, bootstrap_rd_ci
from kg_platform.evaluation.refusal.evaluation import ControlMaker

Embed = Callable[[Sequence[str]], np.ndarray]


@dataclass(frozen=True)
class Attempts:
    """One question under both systems."""

    pipeline: bool  # answered by the one-pass pipeline
    agent: bool  # answered by the agent
    reason: str | None  # the agent's final refusal reason
    hops: int
    similarity: float | None  # top-1 question-evidence cosine of the agent's answer


def _attempts(result: AgentResult, similarity: float | None) -> Attempts:
    v = result.answer.verdict
    return Attempts(
        pipeline=bool(result.trace[0]["answerable"]),
        agent=v.answerable,
        reason=v.reason.value if v.reason else None,
        hops=result.hops,
        similarity=similarity,
    )


def top1_similarity(kg: KnowledgeGraph, embed: Embed, question: str, pmids: list[int]) -> float:
    """The highest cosine of the question with the text of its evidence articles (NaN when
    none has a text)."""
    found = kg.title_lookup.texts(list(dict.fromkeys(pmids)))
    texts = [t for t in (found.get(p, "") for p in dict.fromkeys(pmids)) if t.strip()]
    if not texts:
        return float("nan")
    vectors = embed([question, *texts])
    return float((vectors[1:] @ vectors[0]).max())


def half_of(qid: str) -> int:
    return hashlib.sha256(qid.encode()).digest()[0] & 1


def best_tau(
    real: np.ndarray, control: np.ndarray, answered_r: np.ndarray, answered_c: np.ndarray
) -> float:
    """The veto threshold maximising the share of real questions answered minus the share
    of twins answered, an answer kept when its similarity reaches tau (a NaN never does);
    over the observed similarities, the smallest on ties; -inf: no veto."""
    seen = np.concatenate([real[answered_r], control[answered_c]])
    candidates = np.unique(np.concatenate([seen[~np.isnan(seen)], [-np.inf]]))
    best, best_tau = -np.inf, -np.inf
    for tau in candidates:
        keep_r = answered_r & ((real >= tau) | np.isinf(tau))
        keep_c = answered_c & ((control >= tau) | np.isinf(tau))
        margin = float(keep_r.mean() - keep_c.mean())
        if margin > best + 1e-12:
            best, best_tau = margin, float(tau)
    return best_tau


@dataclass(frozen=True)
class AgentReport:
    n: int
    n_controls: int
    hops_budget: int
    real: tuple[Attempts, ...]
    controls: tuple[Attempts | None, ...]
    qids: tuple[str, ...]
    seed: int
    resamples: int

    def to_json(self) -> dict:
        seed, resamples = self.seed, self.resamples
        twinned = [i for i, c in enumerate(self.controls) if c is not None]
        pr = np.array([a.pipeline for a in self.real], dtype=np.int8)
        ar = np.array([a.agent for a in self.real], dtype=np.int8)
        pc = np.array([self.controls[i].pipeline for i in twinned], dtype=np.int8)  # type: ignore[union-attr]
        ac = np.array([self.controls[i].agent for i in twinned], dtype=np.int8)  # type: ignore[union-attr]
        pr_t, ar_t = pr[twinned], ar[twinned]

        def rd(a: np.ndarray, b: np.ndarray) -> dict:
            if not a.size:
                return {"difference": None, "ci95": None}
            lo, hi = bootstrap_rd_ci(a, b, resamples=resamples, seed=seed)
            return {"difference": _r(float(a.mean() - b.mean())), "ci95": [_r(lo), _r(hi)]}

        def system(real: np.ndarray, real_t: np.ndarray, control: np.ndarray) -> dict:
            return {
                "coverage": _r(float(real.mean())),
                "leak": _r(float(control.mean())) if control.size else None,
                "margin": _r(float(real_t.mean() - control.mean())) if control.size else None,
            }

        margin_gain = (ar_t.astype(np.int64) - ac) - (pr_t.astype(np.int64) - pc)
        margin_ci = (
            [_r(x) for x in bootstrap_mean_ci(margin_gain, resamples=resamples, seed=seed)]
            if margin_gain.size
            else None
        )
        hops = Counter(a.hops for a in self.real)
        control_hops = Counter(self.controls[i].hops for i in twinned)  # type: ignore[union-attr]
        return {
            "n": self.n,
            "n_controls": self.n_controls,
            "hops_budget": self.hops_budget,
            "pipeline": system(pr, pr_t, pc),
            "agent": system(ar, ar_t, ac),
            "rescued": int(((pr == 0) & (ar == 1)).sum()),
            "lost": int(((pr == 1) & (ar == 0)).sum()),
            "newly_leaked": int(((pc == 0) & (ac == 1)).sum()),
            "coverage_difference": rd(ar, pr),
            "leak_difference": rd(ac, pc),
            "margin_difference": {
                "difference": _r(float(margin_gain.mean())) if margin_gain.size else None,
                "ci95": margin_ci,
            },
            "hops_used": {
                "real": dict(sorted(hops.items())),
                "controls": dict(sorted(control_hops.items())),
                "real_mean": _r(float(np.mean([a.hops for a in self.real]))),
            },
            "agent_reasons": dict(
                sorted(Counter(a.reason or "answered" for a in self.real).items())
            ),
            "veto": self._veto(twinned),
            "seed": seed,
        }

    def _veto(self, twinned: list[int]) -> dict:
        """The top-1 similarity's AUROC and the cross-fitted conjunctive veto."""
        sim_r = np.array([_nan(self.real[i].similarity) for i in twinned])
        sim_c = np.array([_nan(self.controls[i].similarity) for i in twinned])  # type: ignore[union-attr]
        ar = np.array([self.real[i].agent for i in twinned], dtype=bool)
        ac = np.array([self.controls[i].agent for i in twinned], dtype=bool)  # type: ignore[union-attr]
        scores = np.concatenate([sim_r[ar], sim_c[ac]])
        labels = np.concatenate([np.ones(int(ar.sum()), bool), np.zeros(int(ac.sum()), bool)])
        ok = ~np.isnan(scores)
        shuffled = np.random.default_rng(self.seed).permutation(labels[ok])
        halves = np.array([half_of(self.qids[i]) for i in twinned], dtype=np.int8)
        kept_r, kept_c, taus = ar.copy(), ac.copy(), []
        for h in (0, 1):
            fit, apply = halves != h, halves == h
            tau = best_tau(sim_r[fit], sim_c[fit], ar[fit], ac[fit])
            taus.append(None if np.isinf(tau) else _r(tau))
            if not np.isinf(tau):  # a NaN similarity (no text) never reaches tau
                kept_r[apply] &= sim_r[apply] >= tau
                kept_c[apply] &= sim_c[apply] >= tau
        n = len(twinned)
        return {
            "answered_real": int(ar.sum()),
            "answered_controls": int(ac.sum()),
            "auroc": _r(auroc(scores[ok], labels[ok])),
            "auroc_shuffled_labels": _r(auroc(scores[ok], shuffled)),
            "tau_by_half": taus,
            "agent_with_veto": {
                "coverage_twinned": _r(float(kept_r.mean())) if n else None,
                "leak": _r(float(kept_c.mean())) if n else None,
                "margin": _r(float(kept_r.mean() - kept_c.mean())) if n else None,
            },
        }


def _nan(value: float | None) -> float:
    return float("nan") if value is None else value


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def evaluate_agent(
    kg: KnowledgeGraph,
    questions: Sequence[tuple[str, str]],
    hops: int = DEFAULT_HOPS,
    seed: int = 0,
    resamples: int = 10_000,
    embed: Embed | None = None,
) -> AgentReport:
    """The agent and the pipeline on ``questions`` ((qid, text)) and their twins made with
    ``seed``; ``embed`` (default: the packaged encoder, loaded when a question is answered)
    gives the top-1 similarity."""
    if not questions:
        raise ValueError("agent evaluation: no questions")
    loop = AgentLoop(kg, hops)
    maker = ControlMaker(kg)
    top_k = kg.config.verifier_k
    state: dict[str, Embed] = {}

    def run(text: str) -> Attempts:
        result = loop.run(text, top_k=top_k)
        similarity = None
        if result.answer.verdict.answerable:
            if "embed" not in state:
                if embed is None:
                    from kg_platform.embeddings.encoder import Encoder

                    state["embed"] = Encoder().encode
                else:
                    state["embed"] = embed
            pmids = [e.path.terminal.pmid for e in result.answer.evidence]
            similarity = top1_similarity(kg, state["embed"], text, pmids)
        return _attempts(result, similarity)

    twins = [maker.make(qid, text, seed) for qid, text in questions]
    real = tuple(run(t.real) for t in twins)
    controls = tuple(run(t.control) if t.control else None for t in twins)
    return AgentReport(
        n=len(twins),
        n_controls=sum(c is not None for c in controls),
        hops_budget=hops,
        real=real,
        controls=controls,
        qids=tuple(qid for qid, _ in questions),
        seed=seed,
        resamples=resamples,
    )


def render_agent(doc: dict) -> list[str]:
    p, a = doc["pipeline"], doc["agent"]
    cov, leak, margin = doc["coverage_difference"], doc["leak_difference"], doc["margin_difference"]
    v = doc["veto"]

    def ci(d: dict) -> str:
        if d["difference"] is None:
            return "n/a"
        lo, hi = d["ci95"]
        return f"{d['difference']:+.3f} [{lo:+.3f}, {hi:+.3f}]"

    return [
        f"  agent loop (hop budget {doc['hops_budget']}) vs the one-pass pipeline, "
        f"{doc['n']} questions, {doc['n_controls']} twins:",
        f"    pipeline coverage {p['coverage']}, leak {p['leak']}, margin {p['margin']}",
        f"    agent    coverage {a['coverage']}, leak {a['leak']}, margin {a['margin']}",
        f"    rescued {doc['rescued']}, newly leaked {doc['newly_leaked']}, lost {doc['lost']}; "
        f"coverage {ci(cov)}, leak {ci(leak)}, margin {ci(margin)}",
        f"    hops used (real) {doc['hops_used']['real']}",
        f"    top-1 similarity veto: AUROC real vs control {v['auroc']} (shuffled labels "
        f"{v['auroc_shuffled_labels']}), tau by half {v['tau_by_half']}, agent with veto "
        f"{v['agent_with_veto']}",
    ]
