"""A real graph for the refusal evaluation: the reference PubMed mirror plus a PubMedQA file's
own articles (``kg_platform.pubmed.pubmedqa_corpus``), folded and built into one lake.

One lake, one MeSH year, three releases (graph builds), each the mirror's files folded after
one PubMedQA contribution (written as per-file tables ``tables/<table>/<name>.parquet``, first
in the fold's order, so a real PubMed record of the same PMID would win):

- ``<release>-<set>``: every question's article. The ORACLE-ISH setting: each question's
  own article, indexed by NLM for that very question, is evidence for it.
- ``<release>-<set>_a`` / ``_b``: only the articles of the first / second half of the
  questions (by sorted PMID). Asking B's questions on the ``_a`` graph and A's on ``_b``
  is the LEAK-FREE setting: no question's own article is in the graph it is asked on.

Each corpus gets the fold's four checks and each graph its invariants and recount before it
is published, as the assets do. The question files of the halves are written next to the
lake (``questions/<set>_a.json``, ``..._b.json``). Then, unless ``--no-eval``, the refusal
evaluation runs on each (``evaluate_refusal``, as ``kg eval refusal``), and the leak-free
figures are pooled over the two halves (the paired bootstrap CI from the pooled per-question
pairs). The last line printed is one JSON object.

    .venv/bin/python benchmarks/refusal_graph.py --out /tmp/refusal_lake --min-paths 3
    .venv/bin/kg eval refusal --pubmedqa ../shared/data/pubmedqa/pqal_dev400.json \\
        --lake /tmp/refusal_lake --release pubmed26-pqal_dev400 --mesh-year 2024 --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kg_platform.graph import layout  # noqa: E402
from kg_platform.graph.build import build_graph  # noqa: E402
from kg_platform.graph.checks import check_invariants, recount  # noqa: E402
from kg_platform.graph.store import KGStore  # noqa: E402
from kg_platform.mesh.source import resolve_mesh_source  # noqa: E402
from kg_platform.mesh.tables import build_mesh, write_mesh_tables  # noqa: E402
from kg_platform.pubmed.fold import fold_checks, fold_release, table_key  # noqa: E402
from kg_platform.pubmed.parse import file_key, parse_file  # noqa: E402
from kg_platform.pubmed.pubmedqa_corpus import (  # noqa: E402
    MeshNameResolver,
    pubmedqa_corpus,
    read_pubmedqa_records,
    split_halves,
)
from kg_platform.storage.catalog import Catalog  # noqa: E402
from kg_platform.storage.lake import Lake  # noqa: E402

REFERENCE = Path(os.environ.get("KG_REFERENCE_DATA", "../shared/data"))


def mirror_files(mirror: Path) -> list[Path]:
    """The mirror's XML files in processing order: baseline, then updates, each by name."""
    return sorted(mirror.glob("baseline/*.xml.gz")) + sorted(mirror.glob("updatefiles/*.xml.gz"))


def write_tables(lake: Lake, file: str, tables: dict) -> None:
    for table, data in tables.items():
        lake.write_parquet(table_key(table, file), data)


def build_release(lake: Lake, release: str, year: str, files: list[str]) -> dict:
    scoped = lake.scoped(release=release, mesh_year=year)
    fold = fold_release(scoped, files)
    failed = [c for c in fold_checks(scoped, files, fold) if not c.passed]
    if failed:
        raise RuntimeError(f"{release}: corpus checks failed: {failed}")
    build = build_graph(scoped)
    store = KGStore.open(scoped, build.build_id)
    catalog = Catalog(scoped)
    con = catalog.connect()
    try:
        catalog.refresh_views(con)
        outcomes = [check_invariants(store), recount(store, con)]
    finally:
        con.close()
    bad = [o.details for o in outcomes if not o.passed]
    if bad:
        raise RuntimeError(f"{release}: graph checks failed: {bad}")
    layout.publish(scoped, build.build_id)
    s = build.stats
    return {
        "files": files,
        "corpus_rows": fold.rows,
        "articles": s.n_articles,
        "mesh_pairs": s.mesh_pairs,
        "major_pairs": s.major_pairs,
        "citation_edges": s.citation_edges,
        "descriptors_used": int((np.asarray(store.mesh_article_count) > 0).sum()),
        "quotable": s.quotable,
    }


def build_lake(args: argparse.Namespace) -> dict:
    lake = Lake(args.out)
    records = read_pubmedqa_records(args.pubmedqa)
    name = Path(args.pubmedqa).name.split(".")[0]
    started = time.perf_counter()
    mesh = build_mesh(resolve_mesh_source(str(args.mesh)))
    write_mesh_tables(lake.scoped(mesh_year=args.mesh_year), mesh)
    mesh_s = time.perf_counter() - started
    terms = pl.from_arrow(mesh.tables["terms"])
    resolver = MeshNameResolver(terms)
    pubmed = []
    for path in mirror_files(args.mirror):
        key = file_key(path)
        write_tables(lake, key, parse_file(path))
        pubmed.append(key)
    half_a, half_b = split_halves(records)
    contributions = {
        f"{args.release}-{name}": (name, None),
        f"{args.release}-{name}_a": (f"{name}_a", half_a),
        f"{args.release}-{name}_b": (f"{name}_b", half_b),
    }
    releases = {}
    for release, (file, pmids) in contributions.items():
        corpus = pubmedqa_corpus(records, resolver, file, pmids)
        write_tables(lake, file, corpus.tables)
        info = build_release(lake, release, args.mesh_year, [file, *pubmed])
        releases[release] = {"pubmedqa": corpus.summary(), **info}
    questions = Path(args.out) / "questions"
    questions.mkdir(parents=True, exist_ok=True)
    for half, pmids in (("a", half_a), ("b", half_b)):
        subset = {str(p): records[str(p)] for p in pmids}
        (questions / f"{name}_{half}.json").write_text(json.dumps(subset))
    return {
        "lake": str(Path(args.out).resolve()),
        "mesh_year": args.mesh_year,
        "mesh_seconds": round(mesh_s, 1),
        "build_seconds": round(time.perf_counter() - started, 1),
        "pubmed_files": pubmed,
        "releases": releases,
    }


def evaluate(args: argparse.Namespace, built: dict) -> dict:
    from kg_platform.answer.api import KnowledgeGraph
    from kg_platform.answer.readers.base import load_pubmedqa
    from kg_platform.evaluation.common.stats import bootstrap_rd_ci
    from kg_platform.evaluation.refusal.evaluation import evaluate_refusal

    name = Path(args.pubmedqa).name.split(".")[0]
    root = Lake(args.out)
    questions_dir = Path(args.out) / "questions"
    runs = {
        "oracle": (f"{args.release}-{name}", Path(args.pubmedqa)),
        # leak-free: each half's questions on the graph built from the other half
        "leak_free_b_on_a": (f"{args.release}-{name}_a", questions_dir / f"{name}_b.json"),
        "leak_free_a_on_b": (f"{args.release}-{name}_b", questions_dir / f"{name}_a.json"),
    }
    out = {}
    for label, (release, path) in runs.items():
        started = time.perf_counter()
        kg = KnowledgeGraph.open(root.scoped(release=release, mesh_year=args.mesh_year))
        qs = [(q.qid, q.question) for q in load_pubmedqa(path)]
        report = evaluate_refusal(kg, qs, args.min_paths, args.seed, args.per_class)
        out[label] = {
            "release": release,
            "questions": str(path),
            **report.to_json(),
            "seconds": round(time.perf_counter() - started, 1),
        }
    # pooled leak-free: shares weighted by their denominators, and the paired CI from the
    # pooled improve / tie / harm counts (the paired difference depends on nothing else)
    halves = [out["leak_free_b_on_a"], out["leak_free_a_on_b"]]
    n = sum(h["n"] for h in halves)
    n_controls = sum(h["n_controls"] for h in halves)
    pooled: dict[str, object] = {
        "n": n,
        "n_controls": n_controls,
        "min_paths": halves[0]["min_paths"],
        "real_answered": round(sum(h["real_answered"] * h["n"] for h in halves) / n, 6),
        "control_answered": round(
            sum(h["control_answered"] * h["n_controls"] for h in halves) / max(n_controls, 1), 6
        ),
        "sweep": [
            {
                "k": rows[0]["k"],
                "real_answered": round(
                    sum(r["real_answered"] * h["n"] for r, h in zip(rows, halves, strict=True)) / n,
                    6,
                ),
                "control_answered": round(
                    sum(
                        r["control_answered"] * h["n_controls"]
                        for r, h in zip(rows, halves, strict=True)
                    )
                    / max(n_controls, 1),
                    6,
                ),
            }
            for rows in zip(*(h["sweep"] for h in halves), strict=True)
        ],
    }
    counts = {k: sum(h["paired_counts"][k] for h in halves) for k in ("improve", "tie", "harm")}
    r = np.array([1] * counts["improve"] + [0] * counts["tie"] + [0] * counts["harm"], np.int8)
    c = np.array([0] * counts["improve"] + [0] * counts["tie"] + [1] * counts["harm"], np.int8)
    pooled["paired_counts"] = counts
    pooled["difference"] = round(float(r.mean() - c.mean()), 6) if len(r) else 0.0
    ci = bootstrap_rd_ci(r, c, resamples=10_000, seed=args.seed) if len(r) else None
    pooled["difference_ci95"] = [round(x, 6) for x in ci] if ci else None
    out["leak_free_pooled"] = pooled
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", default=None, help="lake folder to write (default: a temporary one, removed)"
    )
    parser.add_argument(
        "--pubmedqa", type=Path, default=REFERENCE / "pubmedqa" / "pqal_dev400.json"
    )
    parser.add_argument("--mirror", type=Path, default=REFERENCE / "pubmed" / "mirror")
    parser.add_argument("--mesh", type=Path, default=REFERENCE / "mesh")
    parser.add_argument("--mesh-year", default="2024")
    parser.add_argument("--release", default="pubmed26")
    parser.add_argument("--no-eval", action="store_true", help="build the lake only")
    parser.add_argument("--min-paths", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-class", type=int, default=50)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="refusal_graph_") as scratch:
        args.out = args.out or os.path.join(scratch, "lake")
        built = build_lake(args)
        result: dict[str, object] = {"build": built}
        if not args.no_eval:
            result["refusal"] = evaluate(args, built)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
