"""Coverage against precision on the PubMedQA development questions, over the settings
tried: vocabulary rules (``text.vocabulary``), the common-word guard on or off, and the
tree categories whose descriptors may BRIDGE (``RoleConfig.bridge_categories``).

Uses the MeSH tables cached by ``benchmarks/grounding_versions.py`` (run it first). Writes
``--out`` (JSON, one row per setting and fold) and, with matplotlib, ``--plot`` (PNG); the
last line printed is one JSON object (``rows``: the rows for the full DEV 400).

    .venv/bin/python benchmarks/grounding_frontier.py --plot /tmp/grounding_frontier.png
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.grounding_versions import folds, mesh_frames  # noqa: E402
from kg_platform.evaluation.grounding.evaluation import (  # noqa: E402
    evaluate_grounding,
    heading_index,
    load_pubmedqa,
)
from kg_platform.grounding.grounder import Grounder, build_surface_table  # noqa: E402
from kg_platform.grounding.roles import RoleConfig, assign_roles  # noqa: E402
from kg_platform.settings import reference_data_dir  # noqa: E402
from kg_platform.text.vocabulary import DEFAULT_RULES, NO_RULES  # noqa: E402

CATEGORIES = ("CDEFG", "CDEFGA", "CDEFGAZ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default="/tmp/kg_grounding_cache")
    parser.add_argument("--out", default="/tmp/grounding_frontier.json")
    parser.add_argument("--plot", default=None)
    args = parser.parse_args()
    data = reference_data_dir()
    questions = load_pubmedqa(data / "pubmedqa" / "pqal_dev400.json")
    frames = mesh_frames(data / "mesh", Path(args.cache) / "thesaurus")
    names = dict(
        zip(
            frames["descriptors"]["ui"].to_list(),
            frames["descriptors"]["name"].to_list(),
            strict=True,
        )
    )
    headings = heading_index(frames["terms"])
    rows = []
    for rules_name, rules in (("all_terms", NO_RULES), ("mesh_rules", DEFAULT_RULES)):
        surfaces = build_surface_table(frames["terms"], rules)
        for guard in (True, False):
            grounder = (
                Grounder(surfaces, names) if guard else Grounder(surfaces, names, common_words=())
            )
            for categories in CATEGORIES:
                roles = assign_roles(
                    frames["descriptors"], frames["tree"], RoleConfig(bridge_categories=categories)
                )
                role_of = dict(zip(roles["ui"].to_list(), roles["role"].to_list(), strict=True))
                for fold, qs in folds(questions).items():
                    e = evaluate_grounding(qs, grounder, role_of, headings)
                    rows.append(
                        {
                            "rules": rules_name,
                            "guard": guard,
                            "bridge_categories": categories,
                            "fold": fold,
                            "precision": round(e.precision, 4),
                            "recall": round(e.recall, 4),
                            **{f"coverage_{f.name}": round(f.coverage, 4) for f in e.coverages},
                            "precision_two_concepts": round(e.figure("two_concepts").precision, 4),
                        }
                    )
                print(json.dumps(rows[-3]), flush=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))
    if args.plot:
        plot(rows, args.plot)
    print(
        json.dumps(
            {"benchmark": "grounding_frontier", "rows": [r for r in rows if r["fold"] == "dev400"]}
        )
    )


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dev = [r for r in rows if r["fold"] == "dev400"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    for ax, coverage, target in (
        (axes[0], "coverage_two_concepts", 0.80),
        (axes[1], "coverage_two_bridge", 0.60),
    ):
        for r in dev:
            marker = "o" if r["guard"] else "x"
            color = "tab:blue" if r["rules"] == "mesh_rules" else "tab:orange"
            ax.scatter(r[coverage], r["precision"], marker=marker, color=color)
            ax.annotate(r["bridge_categories"], (r[coverage], r["precision"]), fontsize=7)
        ax.axhline(0.70, color="grey", linestyle="--")
        ax.axvline(target, color="grey", linestyle="--")
        ax.set_xlabel(coverage + " (DEV 400)")
        ax.set_ylabel("BRIDGE precision")
        ax.set_title(f"{coverage}: target >= {target:.0%} at precision >= 0.70")
    axes[0].text(
        0.01,
        0.01,
        "blue: MeSH rules, orange: all terms; o: guard on, x: guard off",
        transform=axes[0].transAxes,
        fontsize=8,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
