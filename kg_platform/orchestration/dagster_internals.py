"""Every private Dagster name the platform uses, in one place: what the CLI needs where Dagster
has no public API (an asset backfill submitted and driven without a daemon, the staleness the
UI shows, the provenance tags a step writes on its own events, a checkable run launcher).

Checked against the installed Dagster by kg_platform_tests/orchestration/
test_dagster_internals.py, which names the version; an upgrade reruns it first. A name is
imported when first asked for: the backfill daemon and the workspace cost more to import than
dagster itself, and every run and step loads the definitions afresh."""

from __future__ import annotations

import importlib
from typing import Any

DAGSTER_VERSION = "1.13.27"

# name -> the private module that defines it
NAMES = {
    # kg build: submit an asset backfill and drive it (build_run.py)
    "WorkspaceProcessContext": "dagster._core.workspace.context",
    "ModuleTarget": "dagster._core.workspace.load_target",
    "AssetGraphSubset": "dagster._core.definitions.assets.graph.asset_graph_subset",
    "AssetKeyPartitionKey": "dagster._core.definitions.events",
    "PartitionBackfill": "dagster._core.execution.backfill",
    "BulkActionStatus": "dagster._core.execution.backfill",
    "BulkActionsFilter": "dagster._core.execution.backfill",
    "make_new_backfill_id": "dagster._core.utils",
    "execute_backfill_iteration": "dagster._daemon.backfill",
    "QueuedRunCoordinatorDaemon": "dagster._daemon.run_coordinator.queued_run_coordinator_daemon",
    # fresh, stale or missing, as the UI says (freshness.py)
    "AssetGraphView": "dagster._core.asset_graph_view.asset_graph_view",
    "TemporalContext": "dagster._core.asset_graph_view.asset_graph_view",
    "CachingStaleStatusResolver": "dagster._core.definitions.data_version",
    "StaleStatus": "dagster._core.definitions.data_version",
    "get_current_datetime": "dagster._time",
    # the provenance a step writes on the events it yields itself (assets/versions.py)
    "AssetCheckEvaluationTargetMaterializationData": (
        "dagster._core.definitions.asset_checks.asset_check_evaluation"
    ),
    "CODE_VERSION_TAG": "dagster._core.definitions.data_version",
    "DATA_VERSION_TAG": "dagster._core.definitions.data_version",
    "DATA_VERSION_IS_USER_PROVIDED_TAG": "dagster._core.definitions.data_version",
    "DEFAULT_DATA_VERSION": "dagster._core.definitions.data_version",
    "NULL_EVENT_POINTER": "dagster._core.definitions.data_version",
    "get_input_data_version_tag": "dagster._core.definitions.data_version",
    "get_input_event_pointer_tag": "dagster._core.definitions.data_version",
    # the run launcher and the Celery executor (launcher.py, executor.py)
    "CheckRunHealthResult": "dagster._core.launcher",
    "WorkerStatus": "dagster._core.launcher",
    "RetryMode": "dagster._core.execution.retries",
}

__all__ = ["DAGSTER_VERSION", "NAMES", *NAMES]


def __getattr__(name: str) -> Any:
    module = NAMES.get(name)
    if module is None:
        raise AttributeError(f"{__name__}: no Dagster name {name!r} (see NAMES)")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain global
    return value
