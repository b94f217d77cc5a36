"""The grounding index (surface lookup table) and the grounding evaluation report."""

import dagster as dg

from kg_platform.assets.checks import check_results, check_specs, data_version
from kg_platform.assets.partitions import grounding_evaluations, mesh_years, on_dimension, scope_for
from kg_platform.evaluation.common.contracts import GROUNDING_REPORT_CHECKS
from kg_platform.grounding.contracts import CHECKS
from kg_platform.resources.encoder import EncoderResource
from kg_platform.resources.lake import LakeResource
from kg_platform.storage.mesh import mesh_key
from kg_platform.storage.reports import GROUNDING

# each step imports the grounding and evaluation modules it runs (polars, numpy) itself: the
# definitions load in every process that starts a run


@dg.asset(
    partitions_def=mesh_years,
    deps=["mesh_tables"],
    group_name="question_path",
    kinds={"polars"},
    code_version="5",
    check_specs=check_specs("grounding_index", CHECKS, mesh_years),
)
def grounding_index(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    """Every MeSH surface (names, every concept's entry terms, de-inverted forms,
    supplementary aliases) that the vocabulary rules keep, as a lookup key with the
    orthography rules applied, one descriptor per key, abbreviations marked as_written; and
    the same lookup in load-ready form (grounding/index.kgi, memory-mapped by `kg ask` and
    `kg serve`). Partitioned by **MeSH year**: the surfaces are the thesaurus's, whatever
    corpus they are used on."""
    from kg_platform.grounding.index import SURFACES_KEY, build_grounding_index
    from kg_platform.grounding.surface_index import INDEX_KEY

    the_lake = lake.get().scoped(scope_for(context))
    with the_lake.transaction() as staged:
        stats, outcomes = build_grounding_index(staged)
        results = check_results(context, outcomes, the_lake.path(mesh_key("terms")))
        digest = staged.digest([SURFACES_KEY, INDEX_KEY])
    return dg.MaterializeResult(
        metadata={
            "path": the_lake.path(SURFACES_KEY),
            "index": the_lake.path(INDEX_KEY),
            "index_bytes": stats.index_bytes,
            "dagster/row_count": stats.surfaces,
            "terms": stats.terms,
            "surfaces": stats.surfaces,
            "descriptors_reachable": stats.descriptors_reachable,
            "orthography_rules": stats.orthography_rules,
            "common_words": stats.common_words,
            **{f"surfaces_{k}": v for k, v in stats.surfaces_by_kind.items()},
        },
        check_results=results,
        data_version=data_version(digest),
    )


class GroundingReportConfig(dg.Config):
    """``release``: the graph build whose article counts the roles take (at the partition's
    MeSH year), which also gives the linkable coverage; empty: roles from MeSH structure.
    ``hybrid_thresholds``: also lexical vs hybrid grounding (dense span links) at these
    cosine thresholds, under reports/grounding/<question set>/<year>/hybrid/, with a concept
    index of the encoder's (the lake's, else one embedded into ``concept_cache``, default
    $KG_HOME/cache/concept_index)."""

    release: str = ""
    hybrid_thresholds: list[float] = []
    concept_cache: str = ""


@dg.asset(
    partitions_def=grounding_evaluations,
    deps=[on_dimension("grounding_index", "mesh_year")],
    group_name="evaluation",
    kinds={"markdown"},
    code_version="4",
    check_specs=check_specs("grounding_report", GROUNDING_REPORT_CHECKS, grounding_evaluations),
)
def grounding_report(
    context: dg.AssetExecutionContext,
    config: GroundingReportConfig,
    lake: LakeResource,
    encoder: EncoderResource,
) -> dg.MaterializeResult:
    """Precision, recall and coverage of BRIDGE groundings on a PubMedQA question set, with
    the worst spurious matches: reports/grounding/<question set>/<year>/{report.md, .json}.
    Partitioned by **question set x configuration**, the configuration being the MeSH year
    grounded against; roles from MeSH structure, or from the article counts of the graph
    build the run's `release` names (as `kg eval grounding` on a built lake); with the run's
    `hybrid_thresholds`, also lexical vs hybrid grounding (`kg eval hybrid`)."""
    from kg_platform.evaluation.common.question_sets import question_set_object
    from kg_platform.evaluation.grounding import hybrid
    from kg_platform.evaluation.grounding.evaluation import report_checks, write_grounding_report
    from kg_platform.pubmed.tables import local_copy
    from kg_platform.settings import kg_home

    scope = scope_for(context)
    root = lake.get()
    question_set = scope.report.split("/")[0]
    the_lake = root.scoped(scope)
    questions = question_set_object(root, "pubmedqa", question_set)
    graph = (
        root.scoped(release=config.release, mesh_year=scope.mesh_year) if config.release else None
    )
    cache = config.concept_cache or str(kg_home() / "cache" / "concept_index")
    with local_copy(root, questions) as path, the_lake.transaction() as staged:
        result = write_grounding_report(staged, path, question_set, graph)
        if config.hybrid_thresholds:
            thresholds, model = config.hybrid_thresholds, encoder.get()
            compared = hybrid.evaluate_on_lake(the_lake, path, model, thresholds, cache, graph)
            hybrid.write_hybrid_report(staged, compared, question_set)
        results = check_results(context, report_checks(result), question_set)
        digest = staged.digest([f"{GROUNDING}/report.json"])
    return dg.MaterializeResult(
        metadata={
            "question_set": question_set,
            "mesh_year": scope.mesh_year,
            "release": config.release,
            "hybrid_thresholds": dg.MetadataValue.json(config.hybrid_thresholds),
            "n": result.n,
            "precision": result.precision,
            "recall": result.recall,
            "recall_all_headings": result.recall_all_headings,
            "coverage": result.coverage,
            # the four coverage definitions side by side (linkable needs a graph)
            **{f"coverage_{f.name}": f.coverage for f in result.coverages},
            **{f"precision_{f.name}": f.precision for f in result.coverages},
            **{f"recall_{f.name}": f.recall for f in result.coverages},
            # the most any lexical grounder over the same MeSH surfaces reaches, and its cost
            "lexical_ceiling_coverage": result.ceiling.coverage,
            "lexical_ceiling_precision": result.ceiling.precision,
            "report": dg.MetadataValue.path(the_lake.path(f"{GROUNDING}/report.md")),
        },
        check_results=results,
        data_version=data_version(digest),
    )


defs = dg.Definitions(assets=[grounding_index, grounding_report])
