"""The allocation evaluation report asset: reports/allocation/{report.md, recovery.png, *.json}."""

import dagster as dg

from kg_platform.assets.checks import check_results, check_specs, data_version
from kg_platform.assets.partitions import allocation_evaluations, dims_of, scope_for
from kg_platform.evaluation.common.contracts import ALLOCATION_REPORT_CHECKS
from kg_platform.resources.lake import LakeResource
from kg_platform.storage.reports import ALLOCATION as REPORT_PREFIX


@dg.asset(
    partitions_def=allocation_evaluations,
    group_name="evaluation",
    code_version="2",
    check_specs=check_specs("allocation_report", ALLOCATION_REPORT_CHECKS, allocation_evaluations),
)
def allocation_report(
    context: dg.AssetExecutionContext, lake: LakeResource
) -> dg.MaterializeResult:
    """Flat vs relational context allocation on HotpotQA at matched object and token ceilings,
    with random-neighbour and shuffled-graph controls: markdown report, plot and JSON.
    Partitioned by **question set x configuration** (matched_ceilings: the study's budgets)."""
    # the step's own libraries (numpy, matplotlib): loaded here, not with the definitions
    from kg_platform.evaluation.allocation.evaluation import (
        CONFIGURATIONS,
        render_markdown,
        report_checks,
        run_allocation_eval,
        summary,
        write_report,
    )
    from kg_platform.evaluation.common.question_sets import question_set_object
    from kg_platform.pubmed.tables import local_copy

    scope = scope_for(context)
    root = lake.get()
    dims = dims_of(context)
    question_set, configuration = dims["question_set"], dims["configuration"]
    with local_copy(root, question_set_object(root, "hotpotqa", question_set)) as path:
        result = run_allocation_eval(path, CONFIGURATIONS[configuration])
    store = root.scoped(scope)
    with store.transaction() as staged:
        digests = write_report(
            result, lambda name, payload: staged.write_bytes(f"{REPORT_PREFIX}/{name}", payload)
        )
        results = check_results(context, report_checks(result), question_set)
    context.log.info(f"allocation report written under {store.path(REPORT_PREFIX)}")
    return dg.MaterializeResult(
        metadata={
            "report": dg.MetadataValue.md(render_markdown(result)),
            "summary": dg.MetadataValue.json(summary(result)),
            "questions_sha256": result.questions_sha256,
            "graph_sha256": result.graph_sha256,
            "question_set": question_set,
            "configuration": configuration,
            "files": dg.MetadataValue.json(
                {store.path(f"{REPORT_PREFIX}/{name}"): d for name, d in digests.items()}
            ),
        },
        check_results=results,
        data_version=data_version("".join(sorted(digests.values()))),
    )


defs = dg.Definitions(assets=[allocation_report])
