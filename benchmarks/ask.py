"""Question-path latency: ground + link + ladder (+ rank and cut) per question.

Builds the synthetic corpus of benchmarks/graph.py (descriptor UIs D000001..D030000, which
are real MeSH UIs), builds and publishes the graph with the asset's own build function,
installs the real MeSH 2024 tables from the reference TSVs (so questions ground as they do in
production), then asks the 400 PubMedQA development questions, several rounds, one core.
The reference measured in the same run is the grounding stage alone (no graph touched), so
``link_ladder_over_ground`` says what the graph work costs on top of reading the question.
The last line printed is one JSON object.

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

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.graph import generate  # noqa: E402
from kg_platform.answer.api import KnowledgeGraph  # noqa: E402
from kg_platform.evaluation.grounding_eval import load_pubmedqa  # noqa: E402
from kg_platform.graph import layout  # noqa: E402
from kg_platform.graph.build import build_graph  # noqa: E402
from kg_platform.mesh.tables import build_mesh_tables  # noqa: E402
from kg_platform.storage.lake import Lake  # noqa: E402

TARGET_P95_MS = 50.0
REFERENCE_REFUSAL_S = 3.1  # the reference grounder/linker took up to 3.1 s to refuse


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--articles", type=int, default=1_000_000)
    parser.add_argument("--citations", type=int, default=10_000_000)
    parser.add_argument("--mesh-edges", type=int, default=9_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    data = os.environ.get("KG_REFERENCE_DATA", "../shared/data")
    parser.add_argument("--pubmedqa", default=os.path.join(data, "pubmedqa", "pqal_dev400.json"))
    parser.add_argument("--mesh-source", default=os.path.join(data, "mesh", "tsv"))
    args = parser.parse_args()
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
        setup_s = time.perf_counter() - t
        kg = KnowledgeGraph.open(lake)
        questions = [q.question for q in load_pubmedqa(args.pubmedqa)]
        kg.ask(questions[0])  # touch the memory maps once
        total, ground_only, answered = [], [], 0
        reasons: dict[str, int] = {}
        for _ in range(args.rounds):
            for q in questions:
                t0 = time.perf_counter()
                kg.ground(q)
                ground_only.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                answer = kg.ask(q)
                total.append(time.perf_counter() - t0)
                reason = answer.verdict.reason.value if answer.verdict.reason else "answered"
                reasons[reason] = reasons.get(reason, 0) + 1
                answered += answer.verdict.answerable
        ms = np.array(total) * 1000.0
        g_ms = np.array(ground_only) * 1000.0
        result = {
            "nodes": kg.store.n_articles,
            "citation_edges": int(build.stats.citation_edges),
            "questions": len(questions),
            "rounds": args.rounds,
            "p50_ms": round(float(np.percentile(ms, 50)), 3),
            "p95_ms": round(float(np.percentile(ms, 95)), 3),
            "max_ms": round(float(ms.max()), 3),
            "questions_per_s_per_core": round(len(ms) / float(np.sum(total)), 1),
            "ground_p50_ms": round(float(np.percentile(g_ms, 50)), 3),
            "link_ladder_over_ground": round(float(np.median(ms) / np.median(g_ms)), 2),
            "p95_over_target": round(float(np.percentile(ms, 95)) / TARGET_P95_MS, 3),
            "reference_refusal_s": REFERENCE_REFUSAL_S,
            "verdicts": {k: v // args.rounds for k, v in sorted(reasons.items())},
            "setup_s": round(setup_s, 1),
        }
        print(json.dumps(result))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
