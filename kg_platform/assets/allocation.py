"""The allocation evaluation report asset: reports/allocation/{report.md, recovery.png, *.json}."""

import os
from pathlib import Path

import dagster as dg

from kg_platform.evaluation.allocation_eval import (
    render_markdown,
    run_allocation_eval,
    summary,
    write_report,
)
from kg_platform.resources.lake import LakeResource

REPORT_PREFIX = "reports/allocation"
HOTPOTQA_RELATIVE = ("hotpotqa", "hotpot_dev_distractor_first60.json")


def default_hotpotqa_path() -> str:
    """The HotpotQA file under KG_REFERENCE_DATA (default ../shared/data beside the repo)."""
    repo_root = Path(__file__).resolve().parents[2]
    base = os.environ.get("KG_REFERENCE_DATA", str(repo_root.parent / "shared" / "data"))
    return str(Path(base).joinpath(*HOTPOTQA_RELATIVE))


class AllocationReportConfig(dg.Config):
    # HotpotQA distractor-format JSON; None: the reference file under KG_REFERENCE_DATA
    hotpotqa: str | None = None


@dg.asset(
    group_name="evaluation",
    check_specs=[
        dg.AssetCheckSpec("ceilings_respected", asset="allocation_report"),
        dg.AssetCheckSpec("identities_recorded", asset="allocation_report"),
    ],
)
def allocation_report(
    context: dg.AssetExecutionContext, config: AllocationReportConfig, lake: LakeResource
) -> dg.MaterializeResult:
    """Flat vs relational context allocation on HotpotQA at matched object and token ceilings,
    with random-neighbour and shuffled-graph controls: markdown report, plot and JSON."""
    path = config.hotpotqa or default_hotpotqa_path()
    result = run_allocation_eval(path)
    store = lake.get()
    digests = write_report(
        result, lambda name, payload: store.write_bytes(f"{REPORT_PREFIX}/{name}", payload)
    )
    violations = sum(b.ceiling_violations for b in result.budgets)
    missing_identity = sum(
        not (c.get("questions_sha256") and c.get("graph_sha256") and c.get("outcomes_sha256"))
        for c in result.comparisons
    )
    context.log.info(f"allocation report written under {REPORT_PREFIX}/")
    return dg.MaterializeResult(
        metadata={
            "report": dg.MetadataValue.md(render_markdown(result)),
            "summary": dg.MetadataValue.json(summary(result)),
            "questions_sha256": result.questions_sha256,
            "graph_sha256": result.graph_sha256,
            "files": dg.MetadataValue.json(
                {f"{REPORT_PREFIX}/{name}": digest for name, digest in digests.items()}
            ),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="ceilings_respected",
                passed=violations == 0,
                metadata={"violations": violations},
            ),
            dg.AssetCheckResult(
                check_name="identities_recorded",
                passed=missing_identity == 0,
                metadata={"comparisons_missing_identity": missing_identity},
            ),
        ],
    )


defs = dg.Definitions(assets=[allocation_report])
