"""Grounding on the PubMedQA development questions, version by version.

Builds the MeSH tables twice (the descriptor TSVs alone: the old vocabulary; with the
thesaurus terms table: every concept's terms), caches their terms/descriptors/tree as
Parquet under ``--cache``, then scores each grounding version on DEV 400 and on two folds:
``fit`` (the 300 questions whose rank by PMID is not a multiple of 4, where rules were
chosen) and ``held`` (the other 100, kept aside to check that a rule generalises).

Per version and question set: the four coverage figures with their precision and recall,
BRIDGE precision/recall, and the lexical ceiling. The last line printed is one JSON object.

With ``--hybrid``, also the hybrid grounder (the default lexical grounder plus dense span
links over the concept index of every concept's terms) at each ``--thresholds`` value, per
fold, with tau picked on ``fit`` and read on ``held``; the index is built (or reused) under
``--concept-cache`` with the packaged MiniLM encoder.

    .venv/bin/python benchmarks/grounding_versions.py --cache /tmp/kg_grounding_cache
    .venv/bin/python benchmarks/grounding_versions.py --versions v3_abbreviations_as_written \
        --hybrid --concept-cache /tmp/kg_concept_full
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kg_platform.evaluation.grounding.evaluation import (  # noqa: E402
    evaluate_grounding,
    heading_index,
    load_pubmedqa,
)
from kg_platform.grounding.grounder import Grounder, build_surface_table  # noqa: E402
from kg_platform.grounding.roles import assign_roles  # noqa: E402
from kg_platform.settings import reference_data_dir  # noqa: E402
from kg_platform.text.vocabulary import (  # noqa: E402
    NO_RULES,
    VOCABULARY_RULES,
    VocabularyRules,
)

TABLES = ("descriptors", "tree", "terms")


def mesh_frames(location: Path, cache: Path) -> dict[str, pl.DataFrame]:
    """The three tables of one MeSH source, built once and cached as Parquet."""
    from kg_platform.mesh.tables import build_mesh_tables

    cache.mkdir(parents=True, exist_ok=True)
    if not all((cache / f"{t}.parquet").exists() for t in TABLES):
        tables = build_mesh_tables(str(location))
        for t in TABLES:
            pl.from_arrow(tables[t]).write_parquet(cache / f"{t}.parquet")
    return {t: pl.read_parquet(cache / f"{t}.parquet") for t in TABLES}


def folds(questions: list) -> dict[str, list]:
    ranked = sorted(questions, key=lambda q: int(q.pmid))
    return {
        "dev400": questions,
        "fit": [q for i, q in enumerate(ranked) if i % 4],
        "held": [q for i, q in enumerate(ranked) if not i % 4],
    }


def score(
    questions: list,
    frames: dict[str, pl.DataFrame],
    terms: pl.DataFrame,
    rules: VocabularyRules = NO_RULES,
    guard: bool = True,
) -> dict:
    surfaces = build_surface_table(terms, rules)
    names = dict(
        zip(
            frames["descriptors"]["ui"].to_list(),
            frames["descriptors"]["name"].to_list(),
            strict=True,
        )
    )
    grounder = Grounder(surfaces, names) if guard else Grounder(surfaces, names, common_words=())
    unguarded = Grounder(surfaces, names, common_words=())
    roles = assign_roles(frames["descriptors"], frames["tree"])
    role_of = dict(zip(roles["ui"].to_list(), roles["role"].to_list(), strict=True))
    # gold headings map through the full vocabulary whatever the version grounds with
    headings = heading_index(frames["terms"])
    out = {}
    for name, qs in folds(questions).items():
        e = evaluate_grounding(qs, grounder, role_of, headings, unguarded=unguarded)
        out[name] = {
            **figures(e),
            "ceiling_coverage": round(e.ceiling.coverage, 4),
            "ceiling_precision": round(e.ceiling.precision, 4),
            "ceiling_named_two": e.ceiling.questions_naming_two_headings,
        }
    return out


def figures(e) -> dict:
    """BRIDGE precision and recall, and the coverage figures with theirs."""
    return {
        "n": e.n,
        "precision": round(e.precision, 4),
        "recall": round(e.recall, 4),
        **{f"coverage_{f.name}": round(f.coverage, 4) for f in e.coverages},
        **{f"precision_{f.name}": round(f.precision, 4) for f in e.coverages},
        **{f"recall_{f.name}": round(f.recall, 4) for f in e.coverages},
    }


def hybrid(
    questions: list,
    frames: dict[str, pl.DataFrame],
    thresholds: list[float],
    concept_cache: Path,
    model: str = "",
    device: str = "cpu",
    dense_rules: str = "v3_abbreviations_as_written",
) -> dict:
    """The default lexical grounder plus dense span links over the concept index of every
    concept's terms, at each threshold, per fold; tau picked on ``fit`` (the evaluation's
    rule: most two-BRIDGE coverage at BRIDGE precision >= 0.70), then read on ``held``.
    The index comes from (and its vectors go to) ``concept_cache``; ``dense_rules`` names
    the vocabulary rules applied to the dense links (``hybrid.DENSE_RULES``)."""
    from kg_platform.embeddings.encoder import Encoder
    from kg_platform.evaluation.grounding.hybrid import (
        evaluate_hybrid,
        link_questions,
        provide_concept_index,
    )
    from kg_platform.grounding.hybrid import DENSE_RULES, HybridGrounder

    started = time.monotonic()
    encoder = Encoder(model, device=device)
    index, info = provide_concept_index(frames["terms"], encoder, None, concept_cache)
    index_seconds = time.monotonic() - started
    lexical = Grounder.from_terms(frames["terms"], frames["descriptors"])
    grounder = HybridGrounder(lexical, encoder, index, rules=DENSE_RULES[dense_rules])
    roles = assign_roles(frames["descriptors"], frames["tree"])
    role_of = dict(zip(roles["ui"].to_list(), roles["role"].to_list(), strict=True))
    headings = heading_index(frames["terms"])
    linked, link_seconds = link_questions(questions, grounder, headings)
    out: dict = {
        "concept_index": {**info.__dict__, "seconds_to_open_or_build": round(index_seconds, 1)},
        "span_link_seconds": round(link_seconds, 1),
        "dense_rules": dense_rules,
        "index_carries_flags": index.has_flags,
    }
    for name, qs in folds(questions).items():
        e = evaluate_hybrid(qs, grounder, role_of, headings, thresholds, linked=linked)
        out[name] = {
            "chosen_threshold": e.chosen_threshold,
            "rows": {
                ("lexical" if r.threshold is None else f"{r.threshold:.2f}"): {
                    **figures(r.grounding),
                    "dense_links": r.dense_links,
                    "dense_bridge": r.dense_bridge,
                    "dense_bridge_hits": r.dense_bridge_hits,
                    "newly_covered": r.questions_newly_covered,
                    "worst_dense": [
                        f"{w.span} -> {w.name} ('{w.term}', {w.count}, {w.best_cosine})"
                        for w in r.worst_dense
                    ],
                }
                for r in e.rows
            },
        }
    out["tau_from_fit"] = out["fit"]["chosen_threshold"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default="/tmp/kg_grounding_cache")
    parser.add_argument("--versions", default=None, help="comma-separated subset")
    parser.add_argument(
        "--hybrid",
        action="store_true",
        help="also the hybrid grounder (dense span links) over every concept's terms",
    )
    parser.add_argument(
        "--thresholds", type=float, nargs="+", default=[0.75, 0.80, 0.85, 0.90, 0.95]
    )
    parser.add_argument(
        "--concept-cache",
        default="/tmp/kg_concept_full",
        help="where the concept index and its vector cache live (benchmarks/concept_index.py "
        "fills the same vector cache)",
    )
    parser.add_argument(
        "--dense-rules",
        nargs="+",
        default=["v3_abbreviations_as_written"],
        help="vocabulary rules applied to dense links, one hybrid run each "
        "(kg_platform.grounding.hybrid.DENSE_RULES)",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=None,
        help="torch CPU threads for the span embeddings (1 on a loaded machine: two threads "
        "waiting on each other made short batches 16 times slower at load 9 on 2 cores)",
    )
    args = parser.parse_args()
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    data = reference_data_dir()
    questions = load_pubmedqa(data / "pubmedqa" / "pqal_dev400.json")
    cache = Path(args.cache)
    old = mesh_frames(data / "mesh" / "tsv", cache / "tsv")
    new = mesh_frames(data / "mesh", cache / "thesaurus")
    results = {}
    wanted = args.versions.split(",") if args.versions else None
    versions = {"v0_descriptor_tsv": (old, NO_RULES, True)}
    for name, rules in VOCABULARY_RULES.items():
        versions[name] = (new, rules, True)
    # frontier points: the same rules without the common-word guard
    versions["v1_all_concepts_unguarded"] = (new, NO_RULES, False)
    versions["v4_clash_by_concept_unguarded"] = (
        new,
        VOCABULARY_RULES["v4_clash_by_concept"],
        False,
    )
    for name, (frames, rules, guard) in versions.items():
        if wanted and name not in wanted:
            continue
        started = time.monotonic()
        results[name] = score(questions, frames, frames["terms"], rules, guard)
        results[name]["seconds"] = round(time.monotonic() - started, 1)
        print(name, json.dumps(results[name]["dev400"]), flush=True)
    if args.hybrid:
        for rules in args.dense_rules:
            key = "hybrid" if rules == "v3_abbreviations_as_written" else f"hybrid_{rules}"
            started = time.monotonic()
            results[key] = hybrid(
                questions,
                new,
                args.thresholds,
                Path(args.concept_cache),
                device=args.device,
                dense_rules=rules,
            )
            results[key]["seconds"] = round(time.monotonic() - started, 1)
            tau = results[key]["tau_from_fit"]
            for fold in ("fit", "held", "dev400"):
                rows = results[key][fold]["rows"]
                for label in ["lexical", *(f"{t:.2f}" for t in sorted(args.thresholds))]:
                    brief = {k: v for k, v in rows[label].items() if k != "worst_dense"}
                    print(key, fold, label, json.dumps(brief), flush=True)
            print(key, "tau chosen on fit:", tau, flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
