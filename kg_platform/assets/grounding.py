"""The grounding index (surface lookup table) and the grounding evaluation report."""

import os
from pathlib import Path

import dagster as dg

from kg_platform.evaluation.grounding_eval import write_grounding_report
from kg_platform.grounding.index import SURFACES_KEY, build_grounding_index
from kg_platform.resources.lake import LakeResource


@dg.asset(
    deps=["mesh_tables", "graph"],
    group_name="question_path",
    kinds={"polars"},
    check_specs=[
        dg.AssetCheckSpec(
            "every_surface_unique_and_mapped",
            asset="grounding_index",
            description="one descriptor per surface; every descriptor with a name is reachable",
            blocking=True,
        )
    ],
)
def grounding_index(lake: LakeResource) -> dg.MaterializeResult:
    """Every MeSH surface (names, entry terms, de-inverted forms, supplementary aliases) as
    a lookup key with the orthography rules applied, one descriptor per key."""
    the_lake = lake.get()
    stats = build_grounding_index(the_lake)
    passed = stats.surfaces > 0 and stats.descriptors_reachable > 0
    return dg.MaterializeResult(
        metadata={
            "path": the_lake.path(SURFACES_KEY),
            "terms": stats.terms,
            "surfaces": stats.surfaces,
            "descriptors_reachable": stats.descriptors_reachable,
            "orthography_rules": stats.orthography_rules,
            "common_words": stats.common_words,
            **{f"surfaces_{k}": v for k, v in stats.surfaces_by_kind.items()},
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="every_surface_unique_and_mapped",
                passed=passed,
                metadata={"surfaces": stats.surfaces},
            )
        ],
    )


class GroundingReportConfig(dg.Config):
    pubmedqa: str = str(
        Path(os.environ.get("KG_REFERENCE_DATA", "../shared/data"))
        / "pubmedqa"
        / "pqal_dev400.json"
    )


@dg.asset(
    deps=["grounding_index"],
    group_name="evaluation",
    kinds={"markdown"},
    check_specs=[
        dg.AssetCheckSpec(
            "precision_target",
            asset="grounding_report",
            description="BRIDGE precision >= 0.70 against the articles' own headings",
        )
    ],
)
def grounding_report(lake: LakeResource, config: GroundingReportConfig) -> dg.MaterializeResult:
    """Precision, recall and coverage of BRIDGE groundings on PubMedQA questions, with the
    worst spurious matches: reports/grounding/{report.md, report.json}."""
    the_lake = lake.get()
    result = write_grounding_report(the_lake, config.pubmedqa)
    return dg.MaterializeResult(
        metadata={
            "n": result.n,
            "precision": result.precision,
            "recall": result.recall,
            "recall_all_headings": result.recall_all_headings,
            "coverage": result.coverage,
            # the most any lexical grounder over the same MeSH surfaces reaches, and its cost
            "lexical_ceiling_coverage": result.ceiling.coverage,
            "lexical_ceiling_precision": result.ceiling.precision,
            "report": dg.MetadataValue.path(the_lake.path("reports/grounding/report.md")),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="precision_target",
                passed=result.precision >= 0.70,
                metadata={"precision": result.precision},
            )
        ],
    )


defs = dg.Definitions(assets=[grounding_index, grounding_report])
