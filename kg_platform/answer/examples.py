"""Questions made from the graph itself, so a user (and the ask benchmark) has questions
this build can answer: each names two descriptors that one article carries as major topics
and that are BRIDGE under the roles the question path assigns.

``kg build`` prints a few of them at the end; ``benchmarks/ask.py`` times hundreds. On a
synthetic demo corpus the annotations are random, so a question from real biomedicine
("Does aspirin prevent myocardial infarction?") is refused there, rightly; these are not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kg_platform.answer.api import KnowledgeGraph
from kg_platform.grounding.roles import Role

# phrasings of a graph-made question; the i-th question uses template i mod 3
TEMPLATES = (
    "Is {a} associated with {b}?",
    "Does {a} affect {b}?",
    "Is there a link between {a} and {b}?",
)


@dataclass(frozen=True)
class GraphQuestion:
    """A question made from one article's two major BRIDGE descriptors."""

    text: str
    pmid: int
    a_ui: str
    b_ui: str


@dataclass(frozen=True)
class GraphQuestions:
    questions: list[GraphQuestion]
    articles_drawn: int
    articles_without_pair: int  # fewer than two major BRIDGE descriptors
    skipped_not_grounded: int  # the question did not ground to both descriptors


def graph_questions(kg: KnowledgeGraph, n: int, seed: int = 11) -> GraphQuestions:
    """Up to ``n`` questions, each naming two major BRIDGE descriptors of one article drawn
    at random (seeded), kept only when ``kg.ground`` finds both descriptors in it."""
    store = kg.store
    names = kg.grounder.names
    rng = np.random.default_rng(seed)
    made: list[GraphQuestion] = []
    drawn = without_pair = skipped = 0
    for i in rng.permutation(store.n_articles):
        if len(made) == n:
            break
        drawn += 1
        uis = [store.mesh_ui(int(d)) for d in store.mesh_of(int(i), major_only=True)]
        bridges = sorted(u for u in uis if kg.roles.get(u, ("",))[0] == Role.BRIDGE)
        if len(bridges) < 2:
            without_pair += 1
            continue
        a, b = rng.choice(len(bridges), 2, replace=False)
        a_ui, b_ui = bridges[int(a)], bridges[int(b)]
        template = TEMPLATES[len(made) % len(TEMPLATES)]
        text = template.format(a=names[a_ui], b=names[b_ui])
        grounded = {r.grounding.ui for r in kg.ground(text) if r.role == Role.BRIDGE}
        if not {a_ui, b_ui} <= grounded:
            skipped += 1
            continue
        made.append(GraphQuestion(text, store.pmid(int(i)), a_ui, b_ui))
    return GraphQuestions(made, drawn, without_pair, skipped)


def answerable_examples(kg: KnowledgeGraph, n: int = 3, seed: int = 11) -> list[str]:
    """Up to ``n`` graph-made questions that ``kg.ask`` answers (drawn from at most 20 times
    as many candidates, so a graph with nothing answerable costs little)."""
    examples: list[str] = []
    for q in graph_questions(kg, 20 * n, seed).questions:
        if kg.ask(q.text).verdict.answerable:
            examples.append(q.text)
            if len(examples) == n:
                break
    return examples
