"""One check contract for every asset: domain check outcomes (anything with ``name``,
``passed`` and ``details`` / ``description`` / ``metadata``) become Dagster check results,
and a failed blocking check stops the step before its staged output is published."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg


@dataclass(frozen=True)
class Outcome:
    """A check decided in the asset itself (the domain types carry their own)."""

    name: str
    passed: bool
    details: str


def _metadata(outcome: Any, extra: Mapping[str, Any]) -> dict[str, Any]:
    metadata: dict[str, Any] = dict(extra)
    details = getattr(outcome, "details", None) or getattr(outcome, "description", None)
    if details:
        metadata["details"] = str(details)[:4000]
    for key, value in (getattr(outcome, "metadata", None) or {}).items():
        metadata[key] = value if isinstance(value, int | float | str | bool) else str(value)[:4000]
    return metadata


def _severity(outcome: Any, blocking: set[str]) -> dg.AssetCheckSeverity:
    return dg.AssetCheckSeverity.ERROR if outcome.name in blocking else dg.AssetCheckSeverity.WARN


def check_specs(
    asset: str,
    checks: Mapping[str, str],
    partitions_def: dg.PartitionsDefinition | None,
    blocking: bool = True,
) -> list[dg.AssetCheckSpec]:
    """Check specs of ``asset`` from the domain's {name: what it guards}, partitioned like
    the asset, so each check row (and the UI's Checks tab) names the partition it judged."""
    return [
        dg.AssetCheckSpec(
            name, asset=asset, description=text, blocking=blocking, partitions_def=partitions_def
        )
        for name, text in checks.items()
    ]


def blocking_specs(
    asset: str, checks: Mapping[str, str], partitions_def: dg.PartitionsDefinition | None
) -> list[dg.AssetCheckSpec]:
    """Blocking check specs of ``asset`` from the domain's {name: what it guards}."""
    return check_specs(asset, checks, partitions_def, blocking=True)


def blocking_checks(context: dg.AssetExecutionContext) -> set[str]:
    return {spec.name for spec in context.assets_def.check_specs if spec.blocking}


def check_results(
    context: dg.AssetExecutionContext,
    outcomes: Iterable[Any],
    what: str,
    extra: Mapping[str, Any] | None = None,
) -> list[dg.AssetCheckResult]:
    """The outcomes as check results; when a blocking one failed, record them all (so the
    UI and the instance show which failed, for this partition) and fail the step, naming
    the check and the input. Call it inside the lake transaction: the raise discards the
    staged output and the last good one stays published."""
    outcomes = list(outcomes)
    blocking = blocking_checks(context)
    partition = context.partition_key if context.has_partition_key else None
    extra = dict(extra or {})
    failed = [o for o in outcomes if o.name in blocking and not o.passed]
    if failed:
        for o in outcomes:
            context.log_event(
                dg.AssetCheckEvaluation(
                    asset_key=context.asset_key,
                    check_name=o.name,
                    passed=bool(o.passed),
                    metadata=_metadata(o, extra),
                    severity=_severity(o, blocking),
                    blocking=o.name in blocking,
                    partition=partition,
                )
            )
        causes = "; ".join(
            f"{o.name} ({(_metadata(o, {}).get('details') or 'failed')[:300]})" for o in failed
        )
        raise dg.Failure(
            description=f"{what}: blocking check failed: {causes}; "
            f"the published {context.asset_key.to_user_string()} is unchanged",
            allow_retries=False,
        )
    return [
        dg.AssetCheckResult(
            check_name=o.name,
            passed=bool(o.passed),
            metadata=_metadata(o, extra),
            severity=_severity(o, blocking),
        )
        for o in outcomes
    ]


def evaluations(
    asset: str,
    outcomes: Iterable[Any],
    partition: str,
    blocking: set[str],
    target: Any = None,
) -> list[dg.AssetCheckEvaluation]:
    """One partition's outcomes as check evaluations a step yields itself (a run over a range
    of partitions records each partition's checks, pointing at that partition's
    materialisation when ``target`` names it)."""
    return [
        dg.AssetCheckEvaluation(
            asset_key=dg.AssetKey(asset),
            check_name=o.name,
            passed=bool(o.passed),
            metadata=_metadata(o, {}),
            severity=_severity(o, blocking),
            blocking=o.name in blocking,
            partition=partition,
            target_materialization_data=target,
        )
        for o in outcomes
    ]


def files_failure(failed: Mapping[str, str], n_files: int) -> dg.Failure:
    """A step over ``n_files`` file partitions whose ``failed`` ones ({file: cause}) failed:
    how many, then one line per file naming it; the causes as ``failed_files`` metadata,
    which `kg build` prints per file."""
    lines = [
        cause if cause.startswith(name) else f"{name}: {cause}"
        for name, cause in sorted(failed.items())
    ]
    if n_files > 1:
        lines.insert(0, f"{len(failed)} of {n_files} files failed:")
    return dg.Failure(
        description="\n".join(lines),
        metadata={"failed_files": dg.MetadataValue.json(dict(sorted(failed.items())))},
        allow_retries=False,
    )


def data_version(digest: str) -> dg.DataVersion:
    """A data version from a content digest (Lake.digest), so an unchanged output leaves
    everything downstream fresh and a changed one marks it stale."""
    return dg.DataVersion(digest[:16])


def latest_data_version(
    context: dg.AssetExecutionContext, asset: str, partition: str | None
) -> str | None:
    """The data version of the latest materialisation of ``asset[partition]``."""
    result = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(
            asset_key=dg.AssetKey(asset), asset_partitions=[partition] if partition else None
        ),
        limit=1,
    )
    if not result.records:
        return None
    materialization = result.records[0].asset_materialization
    tags = (materialization.tags or {}) if materialization else {}
    return tags.get("dagster/data_version")


def published_report(
    context: dg.AssetExecutionContext,
    store: Any,
    prefix: str,
    write: Any,
    outcomes: Iterable[Any],
    label: str,
    summary: Any,
    **metadata: Any,
) -> dg.MaterializeResult:
    """Stage a report (``write(staged)`` writes report.json, report.md and its plots under
    ``prefix``), evaluate its checks on what was staged (a failed blocking one raises, so
    nothing is published), publish it, and return the materialisation: the markdown shown
    in the UI, ``summary``, the JSON's path and ``metadata``, data version from the JSON."""
    with store.transaction() as staged:
        write(staged)
        results = check_results(context, outcomes, label)
        markdown = staged.read_bytes(f"{prefix}/report.md").decode()
        digest = staged.digest([f"{prefix}/report.json"])
    return dg.MaterializeResult(
        metadata={
            "report": dg.MetadataValue.md(markdown),
            "summary": dg.MetadataValue.json(summary),
            "path": store.path(f"{prefix}/report.json"),
            **metadata,
        },
        check_results=results,
        data_version=data_version(digest),
    )
