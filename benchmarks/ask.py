"""Question-path latency: ground + link + ladder (+ rank and cut) per question.

Builds the synthetic corpus of benchmarks/graph.py (descriptor UIs D000001..D030000, which
are real MeSH UIs), builds and publishes the graph with the asset's own build function,
installs the real MeSH 2024 tables from the reference TSVs (so questions ground as they do in
production), then asks two question sets, several rounds, one core:

- ``pubmedqa``: the 400 PubMedQA development questions. Their concepts are real, the graph's
  annotations are random, so nearly all of them are refused at an early gate: this set times
  grounding and refusal.
- ``graph``: questions made from the graph itself (seeded, deterministic). An article is
  drawn, two descriptors it carries as major topics that are BRIDGE under the roles the
  question path assigns are drawn from it, and the question names them ("Is <A> associated
  with <B>?", MeSH names). A question is kept only when it grounds to both descriptors;
  the others are counted as ``skipped_not_grounded``. Every kept question has at least one
  DIRECT path (the article it came from), so this set times the whole path: linking,
  DIRECT and BRIDGE path building, the ladder, and ranking every surviving candidate.

Each set reports p50/p95/max latency, questions/s/core, verdict counts and
``link_ladder_over_ground``: the median of the whole path over the median of grounding alone
(no graph touched), measured on the same questions in the same run. The graph set also
reports the mean candidate paths and the mean ranked paths (candidates surviving the ladder,
all of which are ranked before the cut) per answered question, and per-stage medians.
The top-level ``p50_ms``, ``p95_ms``, ``max_ms`` and ``questions_per_s_per_core`` are the
two sets combined (every timed question of both). The last line printed is one JSON object.

    .venv/bin/python benchmarks/ask.py --articles 1000000 --citations 10000000 --mesh-edges 9000000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.graph import generate  # noqa: E402
from kg_platform.answer.api import KnowledgeGraph  # noqa: E402
from kg_platform.answer.examples import graph_questions  # noqa: E402
from kg_platform.evaluation.grounding_eval import load_pubmedqa  # noqa: E402
from kg_platform.graph import layout  # noqa: E402
from kg_platform.graph.build import build_graph  # noqa: E402
from kg_platform.mesh.tables import build_mesh_tables  # noqa: E402
from kg_platform.storage.lake import Lake  # noqa: E402

TARGET_P95_MS = 50.0
REFERENCE_REFUSAL_S = 3.1  # the reference grounder/linker took up to 3.1 s to refuse


@dataclass
class Timings:
    """Per-question seconds and verdicts of one question set, over every round."""

    total: list[float]
    ground_only: list[float]
    verdicts: dict[str, int]
    stages: dict[str, list[float]]
    candidate_paths: list[int]  # per answered question
    ranked_paths: list[int]  # per answered question: candidates alive after the ladder

    @classmethod
    def empty(cls) -> Timings:
        return cls([], [], {}, {}, [], [])


def time_questions(kg: KnowledgeGraph, questions: list[str], timings: Timings) -> None:
    for q in questions:
        t0 = time.perf_counter()
        kg.ground(q)
        timings.ground_only.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        answer = kg.ask(q)
        timings.total.append(time.perf_counter() - t0)
        verdict = answer.verdict
        reason = verdict.reason.value if verdict.reason else "answered"
        timings.verdicts[reason] = timings.verdicts.get(reason, 0) + 1
        for stage, ms in answer.timings_ms.items():
            timings.stages.setdefault(stage, []).append(ms)
        if verdict.answerable:
            timings.candidate_paths.append(verdict.counts["candidate_paths"])
            timings.ranked_paths.append(verdict.counts["evidence_paths"])


def _ms(seconds: list[float]) -> np.ndarray:
    return np.asarray(seconds, dtype=np.float64) * 1000.0


def latency(total: list[float]) -> dict:
    ms = _ms(total)
    return {
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p95_ms": round(float(np.percentile(ms, 95)), 3),
        "max_ms": round(float(ms.max()), 3),
        "questions_per_s_per_core": round(ms.size / float(np.sum(total)), 1),
    }


def summarise(timings: Timings, n_questions: int, rounds: int) -> dict:
    if not timings.total:
        return {"questions": 0}
    g_ms = _ms(timings.ground_only)
    result = {
        "questions": n_questions,
        **latency(timings.total),
        "ground_p50_ms": round(float(np.percentile(g_ms, 50)), 3),
        "link_ladder_over_ground": round(float(np.median(_ms(timings.total)) / np.median(g_ms)), 2),
        "verdicts": {k: v // rounds for k, v in sorted(timings.verdicts.items())},
        "stage_p50_ms": {
            stage: round(float(np.percentile(v, 50)), 3) for stage, v in timings.stages.items()
        },
        "stage_p95_ms": {
            stage: round(float(np.percentile(v, 95)), 3) for stage, v in timings.stages.items()
        },
    }
    if timings.candidate_paths:
        result["mean_candidate_paths"] = round(float(np.mean(timings.candidate_paths)), 1)
        result["mean_ranked_paths"] = round(float(np.mean(timings.ranked_paths)), 1)
        result["max_ranked_paths"] = int(max(timings.ranked_paths))
    return result


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be at least 1")
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--articles", type=positive_int, default=1_000_000)
    parser.add_argument("--citations", type=positive_int, default=10_000_000)
    parser.add_argument("--mesh-edges", type=positive_int, default=9_000_000)
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument(
        "--graph-questions",
        type=positive_int,
        default=400,
        help="questions made from the graph's own major BRIDGE descriptor pairs",
    )
    parser.add_argument("--seed", type=int, default=11, help="seed of the graph-made questions")
    data = os.environ.get("KG_REFERENCE_DATA", "../shared/data")
    parser.add_argument("--pubmedqa", default=os.path.join(data, "pubmedqa", "pqal_dev400.json"))
    parser.add_argument("--mesh-source", default=os.path.join(data, "mesh", "tsv"))
    args = parser.parse_args()
    if not os.path.isdir(args.mesh_source):
        parser.error(f"--mesh-source {args.mesh_source}: not a folder (set KG_REFERENCE_DATA)")
    if not os.path.isfile(args.pubmedqa):
        parser.error(f"--pubmedqa {args.pubmedqa}: file not found (set KG_REFERENCE_DATA)")
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core

    root = tempfile.mkdtemp(prefix="kg-bench-ask-")
    try:
        t = time.perf_counter()
        generate(root, args.articles, args.citations, args.mesh_edges)
        lake = Lake(root)
        build = build_graph(lake)
        layout.publish(lake, build.build_id)
        for name, table in build_mesh_tables(args.mesh_source).items():
            lake.write_parquet(f"mesh/{name}.parquet", table)
        kg = KnowledgeGraph.open(lake)
        setup_s = time.perf_counter() - t
        t = time.perf_counter()
        made = graph_questions(kg, args.graph_questions, args.seed)
        make_s = time.perf_counter() - t
        sets = {
            "pubmedqa": [q.question for q in load_pubmedqa(args.pubmedqa)],
            "graph": [q.text for q in made.questions],
        }
        for questions in sets.values():
            if questions:
                kg.ask(questions[0])  # touch the memory maps once
        timings = {name: Timings.empty() for name in sets}
        for _ in range(args.rounds):
            for name, questions in sets.items():
                time_questions(kg, questions, timings[name])
        per_set = {
            name: summarise(timings[name], len(questions), args.rounds)
            for name, questions in sets.items()
        }
        per_set["graph"].update(
            {
                "requested": args.graph_questions,
                "seed": args.seed,
                "articles_drawn": made.articles_drawn,
                "articles_without_pair": made.articles_without_pair,
                "skipped_not_grounded": made.skipped_not_grounded,
                "make_s": round(make_s, 1),
            }
        )
        combined = [s for name in sets for s in timings[name].total]
        top = latency(combined)
        result = {
            "nodes": kg.store.n_articles,
            "citation_edges": int(build.stats.citation_edges),
            "questions": sum(len(q) for q in sets.values()),
            "rounds": args.rounds,
            **top,
            "p95_over_target": round(top["p95_ms"] / TARGET_P95_MS, 3),
            "reference_refusal_s": REFERENCE_REFUSAL_S,
            "sets": per_set,
            "setup_s": round(setup_s, 1),
        }
        print(json.dumps(result))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
