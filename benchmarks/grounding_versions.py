"""Grounding on the PubMedQA development questions, version by version.

Builds the MeSH tables twice (the descriptor TSVs alone: the old vocabulary; with the
thesaurus terms table: every concept's terms), caches their terms/descriptors/tree as
Parquet under ``--cache``, then scores each grounding version on DEV 400 and on two folds:
``fit`` (the 300 questions whose rank by PMID is not a multiple of 4, where rules were
chosen) and ``held`` (the other 100, kept aside to check that a rule generalises).

Per version and question set: the four coverage figures with their precision and recall,
BRIDGE precision/recall, and the lexical ceiling. The last line printed is one JSON object.

    .venv/bin/python benchmarks/grounding_versions.py --cache /tmp/kg_grounding_cache
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

from kg_platform.evaluation.grounding_eval import (  # noqa: E402
    evaluate_grounding,
    heading_index,
    load_pubmedqa,
)
from kg_platform.grounding.grounder import Grounder, build_surface_table  # noqa: E402
from kg_platform.grounding.roles import assign_roles  # noqa: E402
from kg_platform.grounding.vocabulary import (  # noqa: E402
    NO_RULES,
    VOCABULARY_RULES,
    VocabularyRules,
)
from kg_platform.settings import reference_data_dir  # noqa: E402

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
            "n": e.n,
            "precision": round(e.precision, 4),
            "recall": round(e.recall, 4),
            **{f"coverage_{f.name}": round(f.coverage, 4) for f in e.coverages},
            **{f"precision_{f.name}": round(f.precision, 4) for f in e.coverages},
            **{f"recall_{f.name}": round(f.recall, 4) for f in e.coverages},
            "ceiling_coverage": round(e.ceiling.coverage, 4),
            "ceiling_precision": round(e.ceiling.precision, 4),
            "ceiling_named_two": e.ceiling.questions_naming_two_headings,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default="/tmp/kg_grounding_cache")
    parser.add_argument("--versions", default=None, help="comma-separated subset")
    args = parser.parse_args()
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
    print(json.dumps(results))


if __name__ == "__main__":
    main()
