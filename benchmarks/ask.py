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
two sets combined (every timed question of both).

``giant_pairs``: the concept pairs of the graph with the most candidate paths, every pair of
the four descriptors on the most articles (0.4M-2.6M candidates at the default size), wall
and CPU seconds of the core's own thread. The grounder
gives such descriptors the IGNORE role (too common), so no question reaches them; the pair's
part of the structural question path is timed directly, as ``KnowledgeGraph.ask`` runs it
after linking: ``pair_evidence`` (one compiled pass: every candidate found, flagged, counted
at gates 3-6, scored, and the best 10 kept), the ladder's decision, and ``top_paths``.

Same-run reference: every set and every giant pair is timed again, interleaved round by
round, with that pass replaced by the numpy passes it replaced (``numpy_passes``
collect, flag and score every candidate into arrays, ``ladder.path_counts`` masks them and
``ranking.top_rows`` ranks the survivors), and the top paths of both are compared
(``same_top_paths``, ``same_evidence_as_reference``). ``*_over_reference`` is p95 over the
reference's p95 (lower is better). The last line printed is one JSON object.

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
from dataclasses import asdict, dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.graph import generate  # noqa: E402
from kg_platform.answer import api  # noqa: E402
from kg_platform.answer.api import KnowledgeGraph  # noqa: E402
from kg_platform.answer.examples import graph_questions  # noqa: E402
from kg_platform.answer.ladder import (  # noqa: E402
    LadderConfig,
    LadderInput,
    PathCounts,
    RefusalReason,
    decide,
    path_counts,
)
from kg_platform.evaluation.grounding.evaluation import load_pubmedqa  # noqa: E402
from kg_platform.graph import layout  # noqa: E402
from kg_platform.graph.build import build_graph  # noqa: E402
from kg_platform.mesh.tables import build_mesh_tables  # noqa: E402
from kg_platform.retrieval import numpy_passes, paths, ranking  # noqa: E402
from kg_platform.retrieval.linking import ConceptPair  # noqa: E402
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


def reference_pair_evidence(
    store, pair, filter_descriptors, top_k, quotable_gate=True, retracted_gate=True, as_of=None
) -> paths.PairEvidence:
    """``paths.pair_evidence`` from the numpy passes it replaced: every candidate collected,
    flagged, counted by the ladder, scored and ranked (``numpy_passes``, ``top_rows``)."""
    c = numpy_passes.collect_candidates(store, pair)
    flags = numpy_passes.path_flags(store, c)
    disabled = set()
    if not quotable_gate:
        disabled.add(RefusalReason.NO_QUOTABLE_TERMINAL)
    if not retracted_gate:
        disabled.add(RefusalReason.ONLY_RETRACTED_EVIDENCE)
    inp = LadderInput(1, 2, len(c), flags["quotable"], flags["retracted"], flags["year"], as_of)
    counts, alive = path_counts(inp, LadderConfig(disabled=frozenset(disabled)))
    scores = numpy_passes.structural_scores(store, c, filter_descriptors, flags["concern"])
    head = ranking.top_rows(c, alive, scores, top_k)
    top = paths.Candidates(pair, c.kind[head], c.source[head], c.terminal[head], c.relation[head])
    return paths.PairEvidence(pair, asdict(counts), top, scores[head])


# the structural question path over a pair: the one compiled pass kg ask runs, and the
# numpy passes it replaced
PASSES = {"compiled": paths.pair_evidence, "reference": reference_pair_evidence}


def use_passes(variant: str) -> None:
    """Make ``KnowledgeGraph.ask`` run the compiled pass or the reference passes."""
    api.pair_evidence = PASSES[variant]


def giant_pairs(kg: KnowledgeGraph, n_descriptors: int = 4) -> list[ConceptPair]:
    store = kg.store
    top = np.argsort(store.array("mesh_article_count"), kind="stable")[::-1][:n_descriptors]
    uis = [store.mesh_ui(int(d)) for d in top]
    names = kg.grounder.names
    return [
        ConceptPair(a, names.get(a, a), b, names.get(b, b), 0, 0)
        for k, a in enumerate(uis)
        for b in uis[k + 1 :]
    ]


def pair_path(
    kg: KnowledgeGraph, pair: ConceptPair, variant: str
) -> tuple[float, float, int, list]:
    """Wall and CPU seconds of the pair's part of the structural question path, its
    candidates and its top paths, as ``KnowledgeGraph._structural`` runs it (the CPU seconds
    tell the work apart from waiting for the core)."""
    store = kg.store
    cpu = time.thread_time()
    t = time.perf_counter()
    found = PASSES[variant](store, pair, [], 10)
    verdict = decide(1, 2, PathCounts(**found.counts), None, kg.config.ladder)
    top = []
    if verdict.answerable:
        kept = np.ones(len(found.top), dtype=bool)
        flags = paths.path_flags(store, found.top)
        top = ranking.top_paths(store, found.top, kept, found.scores, flags, 10)
    return time.perf_counter() - t, time.thread_time() - cpu, found.counts["candidates"], top


def time_giant_pairs(kg: KnowledgeGraph, rounds: int) -> dict:
    pairs = giant_pairs(kg)
    seconds: dict[str, dict[str, list[float]]] = {v: {} for v in PASSES}
    cpu_seconds: dict[str, dict[str, list[float]]] = {v: {} for v in PASSES}
    per_pair = {}
    same = True
    for pair in pairs:  # once untimed: the memory maps and the compiled kernels
        for variant in PASSES:
            pair_path(kg, pair, variant)
    for _ in range(rounds):
        for pair in pairs:
            key = f"{pair.a_ui}+{pair.b_ui}"
            tops = {}
            for variant in PASSES:
                s, cpu, n, tops[variant] = pair_path(kg, pair, variant)
                seconds[variant].setdefault(key, []).append(s)
                cpu_seconds[variant].setdefault(key, []).append(cpu)
                per_pair[key] = {"candidates": n}
            same &= tops["compiled"] == tops["reference"]
    for key, info in per_pair.items():
        for variant in PASSES:
            for what, runs in (("", seconds), ("cpu_", cpu_seconds)):
                p95 = float(np.percentile(_ms(runs[variant][key]), 95))
                info[f"{variant}_{what}p95_ms"] = round(p95, 3)
        info["over_reference"] = round(info["compiled_p95_ms"] / info["reference_p95_ms"], 3)
        info["cpu_over_reference"] = round(
            info["compiled_cpu_p95_ms"] / info["reference_cpu_p95_ms"], 3
        )
    every = {v: [s for runs in seconds[v].values() for s in runs] for v in PASSES}
    every_cpu = {v: [s for runs in cpu_seconds[v].values() for s in runs] for v in PASSES}
    return {
        "pairs": len(pairs),
        "rounds": rounds,
        "p95_ms": round(float(np.percentile(_ms(every["compiled"]), 95)), 3),
        "max_ms": round(float(_ms(every["compiled"]).max()), 3),
        "reference_p95_ms": round(float(np.percentile(_ms(every["reference"]), 95)), 3),
        "reference_max_ms": round(float(_ms(every["reference"]).max()), 3),
        "p95_over_reference": round(
            float(np.percentile(every["compiled"], 95) / np.percentile(every["reference"], 95)), 3
        ),
        "cpu_p95_ms": round(float(np.percentile(_ms(every_cpu["compiled"]), 95)), 3),
        "reference_cpu_p95_ms": round(float(np.percentile(_ms(every_cpu["reference"]), 95)), 3),
        "cpu_p95_over_reference": round(
            float(np.percentile(every_cpu["compiled"], 95))
            / float(np.percentile(every_cpu["reference"], 95)),
            3,
        ),
        "same_top_paths": bool(same),
        "per_pair": dict(sorted(per_pair.items(), key=lambda kv: -kv[1]["candidates"])),
    }


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
        "--giant-rounds",
        type=positive_int,
        default=10,
        help="rounds over the giant pairs (a few hundred ms each, so p95 needs more than 3)",
    )
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
        reference = {name: Timings.empty() for name in sets}
        same_answers = True
        for variant in PASSES:  # once untimed: the compiled kernels load on first use
            use_passes(variant)
            kg.ask(sets["graph"][0] if sets["graph"] else sets["pubmedqa"][0])
        for _ in range(args.rounds):
            for name, questions in sets.items():
                use_passes("compiled")
                time_questions(kg, questions, timings[name])
                use_passes("reference")
                time_questions(kg, questions, reference[name])
        use_passes("compiled")
        for q in sets["graph"]:  # the evidence itself, compiled against reference
            got = kg.ask(q).evidence
            use_passes("reference")
            same_answers &= got == kg.ask(q).evidence
            use_passes("compiled")
        per_set = {
            name: summarise(timings[name], len(questions), args.rounds)
            for name, questions in sets.items()
        }
        for name in sets:
            if reference[name].total:
                ref_p95 = latency(reference[name].total)["p95_ms"]
                per_set[name]["reference_p95_ms"] = ref_p95
                per_set[name]["p95_over_reference"] = round(per_set[name]["p95_ms"] / ref_p95, 3)
        per_set["graph"]["same_evidence_as_reference"] = bool(same_answers)
        giant = time_giant_pairs(kg, args.giant_rounds)
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
        ref_top = latency([s for name in sets for s in reference[name].total])
        result = {
            "nodes": kg.store.n_articles,
            "citation_edges": int(build.stats.citation_edges),
            "questions": sum(len(q) for q in sets.values()),
            "rounds": args.rounds,
            **top,
            "p95_over_target": round(top["p95_ms"] / TARGET_P95_MS, 3),
            "reference_p95_ms": ref_top["p95_ms"],
            "p95_over_reference": round(top["p95_ms"] / ref_top["p95_ms"], 3),
            "giant_pairs": giant,
            "giant_p95_over_target": round(giant["p95_ms"] / TARGET_P95_MS, 3),
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
