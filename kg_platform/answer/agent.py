"""The agent loop: plan, retrieve, grade, refine, generate, verify, adjudicate; a measured
ablation beside the one-pass pipeline (``kg eval refusal --agent``), not the default.

- **plan**: ground the question and give the groundings their roles, as the pipeline does.
- **retrieve** and **grade**: the pipeline's question path on the planned concepts
  (``KnowledgeGraph.ask(grounded=...)``): the linker picks the pair, the ladder grades the
  evidence (gates 1-6).
- **refine**, when the ladder refused and hops remain: one change per hop, each kind at most
  once, in this order, skipping a kind that cannot apply:
  1. *broaden*: the most specific BRIDGE concept (fewest articles in the graph, a concept
     the graph does not know has none; then the deepest tree number; then question order)
     becomes its nearest ancestor up the MeSH tree that the roles call BRIDGE, that the
     graph indexes and that the question does not already name. The broadened concept
     keeps its provenance: the descriptor it came from and every tree number walked.
  2. *drop*: the weakest concept (least co-annotation support with the other concepts, then
     fewest articles) leaves the plan, when at least three BRIDGE concepts the graph knows
     remain before the drop.
  3. *halve min_paths*, once: ``max(1, min_paths // 2)``, when that is lower.
- **generate**: the reader reads the evidence of an answerable attempt (when there is one).
- **verify**: gate 7 (when the graph has a verifier) on that attempt.
- **adjudicate**: the first attempt the ladder and the verifier let through is the answer;
  when none does, the last attempt's refusal stands.

Every attempt and every change is recorded in the trace: the hop, the step, what it changed
and why (the refusal it answered). A question the pipeline answers takes no hop.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from kg_platform.answer.api import KnowledgeGraph
from kg_platform.answer.ladder import RefusalReason
from kg_platform.answer.question import Answer, RoledGrounding
from kg_platform.grounding.roles import Role
from kg_platform.storage.mesh import read_mesh

DEFAULT_HOPS = 3
STEPS = ("broaden", "drop", "halve_min_paths")
# a refusal no refinement can answer: nothing was grounded
FINAL = frozenset({RefusalReason.NO_MESH_ENTRY_POINT})


@dataclass(frozen=True)
class AgentResult:
    """The adjudicated answer, the hops used and the trace of every step."""

    answer: Answer
    hops: int
    budget: int
    trace: tuple[dict, ...]
    min_paths: int

    @property
    def answered_at_hop(self) -> int | None:
        return self.hops if self.answer.verdict.answerable else None

    def to_json(self) -> dict:
        return {
            **self.answer.to_json(),
            "agent": {
                "budget": self.budget,
                "hops": self.hops,
                "answered_at_hop": self.answered_at_hop,
                "min_paths": self.min_paths,
                "trace": [dict(t) for t in self.trace],
            },
        }


@dataclass
class _Plan:
    concepts: list[RoledGrounding]
    min_paths: int
    done: set[str] = field(default_factory=set)


class AgentLoop:
    """The loop over one opened graph; the MeSH tree is read once."""

    def __init__(self, kg: KnowledgeGraph, hops: int = DEFAULT_HOPS) -> None:
        if hops < 0:
            raise ValueError(f"agent hops {hops}: must be at least 0")
        self.kg = kg
        self.hops = hops
        tree = pl.from_arrow(read_mesh(kg.lake, "tree"))
        self.tree_numbers: dict[str, list[str]] = {}
        self.ui_at: dict[str, str] = {}
        for ui, number in zip(tree["ui"].to_list(), tree["tree_number"].to_list(), strict=True):
            self.tree_numbers.setdefault(ui, []).append(number)
            self.ui_at[number] = ui

    # -- the graph's view of a concept ------------------------------------------------------

    def articles(self, ui: str) -> int:
        try:
            return int(self.kg.store.articles_of(self.kg.store.desc_idx(ui)).size)
        except KeyError:
            return 0

    def depth(self, ui: str) -> int:
        return max((n.count(".") + 1 for n in self.tree_numbers.get(ui, ())), default=0)

    def ancestor(self, ui: str, taken: set[str]) -> tuple[str, list[str]] | None:
        """The nearest ancestor of ``ui`` that may bridge, that the graph indexes and that is
        not ``taken``, with the tree numbers walked (``ui``'s own first); None if none."""
        best: tuple[int, str, list[str]] | None = None
        for number in sorted(self.tree_numbers.get(ui, ())):
            walked = [number]
            while "." in walked[-1]:
                walked.append(walked[-1].rsplit(".", 1)[0])
                up = self.ui_at.get(walked[-1])
                if up is None or up in taken or up == ui:
                    continue
                if self.kg.roles.get(up, ("",))[0] == Role.BRIDGE and self.articles(up):
                    if best is None or len(walked) < len(best[2]):
                        best = (len(walked), up, list(walked))
                    break
        return None if best is None else (best[1], best[2])

    # -- the refinements --------------------------------------------------------------------

    def _bridges(self, plan: _Plan) -> list[tuple[int, RoledGrounding]]:
        return [(i, r) for i, r in enumerate(plan.concepts) if r.role == Role.BRIDGE]

    def broaden(self, plan: _Plan) -> dict | None:
        taken = {r.grounding.ui for r in plan.concepts}
        order = sorted(
            self._bridges(plan),
            key=lambda ir: (
                self.articles(ir[1].grounding.ui),
                -self.depth(ir[1].grounding.ui),
                ir[0],
            ),
        )
        for i, r in order:
            found = self.ancestor(r.grounding.ui, taken)
            if found is None:
                continue
            up, walked = found
            g = r.grounding
            name = self.kg.grounder.names.get(up, up)
            broadened = replace(g, ui=up, name=name, kind="broadened", variant=None)
            plan.concepts[i] = RoledGrounding(broadened, Role.BRIDGE, f"broadened_from_{g.ui}")
            return {
                "from": {"ui": g.ui, "name": g.name, "articles": self.articles(g.ui)},
                "to": {"ui": up, "name": name, "articles": self.articles(up)},
                "tree_numbers_walked": walked,
            }
        return None

    def drop(self, plan: _Plan) -> dict | None:
        known = [(i, r) for i, r in self._bridges(plan) if self.articles(r.grounding.ui)]
        if len(known) < 3:
            return None
        store = self.kg.store
        lists = {
            r.grounding.ui: np.asarray(store.articles_of(store.desc_idx(r.grounding.ui)))
            for _, r in known
        }

        def support(ui: str) -> int:
            return sum(
                int(np.intersect1d(lists[ui], other, assume_unique=True).size)
                for k, other in lists.items()
                if k != ui
            )

        i, weakest = min(
            known,
            key=lambda ir: (support(ir[1].grounding.ui), self.articles(ir[1].grounding.ui), -ir[0]),
        )
        del plan.concepts[i]
        g = weakest.grounding
        return {
            "dropped": {"ui": g.ui, "name": g.name, "articles": self.articles(g.ui)},
            "co_annotation_support": support(g.ui),
        }

    def halve(self, plan: _Plan) -> dict | None:
        halved = max(1, plan.min_paths // 2)
        if halved >= plan.min_paths:
            return None
        before, plan.min_paths = plan.min_paths, halved
        return {"min_paths": [before, halved]}

    # -- the loop ---------------------------------------------------------------------------

    def _attempt(self, question: str, plan: _Plan, as_of: int | None, top_k: int) -> Answer:
        kg = self.kg
        if plan.min_paths != kg.config.ladder.min_paths:
            ladder = replace(kg.config.ladder, min_paths=plan.min_paths)
            kg = kg.with_config(replace(kg.config, ladder=ladder))
        return kg.ask(question, as_of=as_of, top_k=top_k, grounded=list(plan.concepts))

    def run(self, question: str, as_of: int | None = None, top_k: int = 10) -> AgentResult:
        plan = _Plan(self.kg.ground(question), self.kg.config.ladder.min_paths)
        answer = self._attempt(question, plan, as_of, top_k)
        trace = [_record(0, "retrieve", None, None, plan, answer)]
        hops = 0
        steps = {"broaden": self.broaden, "drop": self.drop, "halve_min_paths": self.halve}
        while (
            not answer.verdict.answerable
            and answer.verdict.reason not in FINAL
            and hops < self.hops
        ):
            why = answer.verdict.reason.value if answer.verdict.reason else None
            change = None
            for step in STEPS:
                if step in plan.done:
                    continue
                plan.done.add(step)
                change = steps[step](plan)
                if change is not None:
                    break
            if change is None:
                trace.append({"hop": hops, "step": "stop", "why": why, "changed": None})
                break
            hops += 1
            answer = self._attempt(question, plan, as_of, top_k)
            trace.append(_record(hops, step, change, why, plan, answer))
        return AgentResult(answer, hops, self.hops, tuple(trace), plan.min_paths)


def _record(
    hop: int, step: str, change: dict | None, why: str | None, plan: _Plan, answer: Answer
) -> dict:
    v = answer.verdict
    pair = answer.chosen_pair
    return {
        "hop": hop,
        "step": step,
        "why": why,
        "changed": change,
        "concepts": [
            {"ui": r.grounding.ui, "name": r.grounding.name, "role": r.role}
            for r in plan.concepts
            if r.role == Role.BRIDGE
        ],
        "min_paths": plan.min_paths,
        "pair": None if pair is None else [pair.a_ui, pair.b_ui],
        "answerable": v.answerable,
        "reason": v.reason.value if v.reason else None,
        "evidence_paths": v.counts.get("evidence_paths"),
    }
