"""Dagster's side of the one check contract (kg_platform.checks): check specs from a
domain's ``CHECKS`` declaration, and its :class:`CheckOutcome` values as check results; a
failed blocking check stops the step before its staged output is published."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import dagster as dg

from kg_platform.checks import CheckOutcome, Checks


def check_specs(
    asset: str, checks: Checks, partitions_def: dg.PartitionsDefinition | None
) -> list[dg.AssetCheckSpec]:
    """The check specs of ``asset`` from its domain's ``CHECKS`` {name: (what it guards,
    blocking)}, partitioned like the asset, so each check row (and the UI's Checks tab)
    names the partition it judged."""
    return [
        dg.AssetCheckSpec(
            name,
            asset=asset,
            description=description,
            blocking=blocking,
            partitions_def=partitions_def,
        )
        for name, (description, blocking) in checks.items()
    ]


def _value(value: Any) -> Any:
    """A metadata value as the UI shows it: numbers and text as they are, lists and dicts
    as JSON, anything else as text."""
    if isinstance(value, int | float | str | bool):
        return value
    if isinstance(value, list | tuple | dict):
        try:
            json.dumps(value)
        except TypeError:
            return str(value)[:4000]
        return dg.MetadataValue.json(list(value) if isinstance(value, tuple) else value)
    return str(value)[:4000]


def _metadata(outcome: CheckOutcome) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    if outcome.details:
        metadata["details"] = str(outcome.details)[:4000]
    metadata.update({key: _value(value) for key, value in outcome.metadata.items()})
    return metadata


def _blocking(context: dg.AssetExecutionContext, asset: str | None) -> tuple[dg.AssetKey, set]:
    """The asset judged (default: the step's) and the names of its blocking checks."""
    key = dg.AssetKey(asset) if asset else context.asset_key
    specs = context.assets_def.check_specs
    return key, {spec.name for spec in specs if spec.blocking and spec.asset_key == key}


def blocking_failure(
    context: dg.AssetExecutionContext,
    outcomes: Iterable[CheckOutcome],
    what: str,
    asset: str | None = None,
    partition: str | None = None,
) -> str | None:
    """Why publication stopped, naming ``what`` was judged and each failed blocking check
    with its details; None when every blocking check passed."""
    key, blocking = _blocking(context, asset)
    failed = [o for o in outcomes if o.name in blocking and not o.passed]
    if not failed:
        return None
    causes = "; ".join(f"{o.name} ({(o.details or 'failed')[:300]})" for o in failed)
    published = key.to_user_string() + (f"[{partition}]" if partition else "")
    return f"{what}: blocking check failed: {causes}; the published {published} is unchanged"


def check_results(
    context: dg.AssetExecutionContext,
    outcomes: Iterable[CheckOutcome],
    what: str,
    *,
    asset: str | None = None,
    partition: str | None = None,
    target: Any = None,
) -> list[Any]:
    """The outcomes as Dagster check rows, for the one path every asset takes: judge the
    staged output inside its lake transaction, then publish.

    Without ``partition``: ``AssetCheckResult`` values for the materialisation the step
    returns; when a blocking check failed, every outcome is recorded (so the UI and the
    instance show which failed, for the step's partition) and the step fails naming the
    check and ``what`` was judged: the raise discards the staged output and the last good
    one stays published. With ``partition`` (a step recording a range of partitions
    itself): that partition's ``AssetCheckEvaluation`` values of ``asset``, pointing at its
    materialisation ``target``; the caller fails that partition alone
    (:func:`blocking_failure` says why)."""
    outcomes = list(outcomes)
    key, blocking = _blocking(context, asset)

    def evaluation(o: CheckOutcome, at: str | None) -> dg.AssetCheckEvaluation:
        return dg.AssetCheckEvaluation(
            asset_key=key,
            check_name=o.name,
            passed=bool(o.passed),
            metadata=_metadata(o),
            severity=_severity(o, blocking),
            blocking=o.name in blocking,
            partition=at,
            target_materialization_data=target,
        )

    if partition is not None:
        return [evaluation(o, partition) for o in outcomes]
    failure = blocking_failure(context, outcomes, what, asset)
    if failure:
        own = context.partition_key if context.has_partition_key else None
        for o in outcomes:
            context.log_event(evaluation(o, own))
        raise dg.Failure(description=failure, allow_retries=False)
    return [
        dg.AssetCheckResult(
            asset_key=key,
            check_name=o.name,
            passed=bool(o.passed),
            metadata=_metadata(o),
            severity=_severity(o, blocking),
        )
        for o in outcomes
    ]


def _severity(outcome: CheckOutcome, blocking: set[str]) -> dg.AssetCheckSeverity:
    return dg.AssetCheckSeverity.ERROR if outcome.name in blocking else dg.AssetCheckSeverity.WARN


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


def published_report(
    context: dg.AssetExecutionContext,
    store: Any,
    prefix: str,
    write: Any,
    outcomes: Iterable[CheckOutcome],
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
