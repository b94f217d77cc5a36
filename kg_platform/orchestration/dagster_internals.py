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

_MODULES = {
    # kg build: submit an asset backfill and drive it (commands/build_run.py)
    "dagster._core.workspace.context": ["WorkspaceProcessContext"],
    "dagster._core.workspace.load_target": ["ModuleTarget"],
    "dagster._core.definitions.assets.graph.asset_graph_subset": ["AssetGraphSubset"],
    "dagster._core.definitions.events": ["AssetKeyPartitionKey"],
    "dagster._core.execution.backfill": [
        "PartitionBackfill",
        "BulkActionStatus",
        "BulkActionsFilter",
    ],
    "dagster._core.utils": ["make_new_backfill_id"],
    "dagster._daemon.backfill": ["execute_backfill_iteration"],
    "dagster._daemon.run_coordinator.queued_run_coordinator_daemon": ["QueuedRunCoordinatorDaemon"],
    # how often a dagster-daemon looks at backfills (the e2e tests' daemon shortens it) and
    # writes each heartbeat, and how long Dagster's health check trusts the last one
    # (build_run.daemon_serves)
    "dagster._daemon.controller": [
        "DEFAULT_DAEMON_INTERVAL_SECONDS",
        "DEFAULT_HEARTBEAT_INTERVAL_SECONDS",
        "DEFAULT_DAEMON_HEARTBEAT_TOLERANCE_SECONDS",
    ],
    # fresh, stale or missing, as the UI says (freshness.py), and the provenance a step
    # writes on the events it yields itself (assets/versions.py)
    "dagster._core.asset_graph_view.asset_graph_view": ["AssetGraphView", "TemporalContext"],
    "dagster._time": ["get_current_datetime"],
    "dagster._core.definitions.data_version": [
        *("CachingStaleStatusResolver", "StaleStatus", "CODE_VERSION_TAG", "DATA_VERSION_TAG"),
        *("DATA_VERSION_IS_USER_PROVIDED_TAG", "DEFAULT_DATA_VERSION", "NULL_EVENT_POINTER"),
        *("get_input_data_version_tag", "get_input_event_pointer_tag"),
    ],
    "dagster._core.definitions.asset_checks.asset_check_evaluation": [
        "AssetCheckEvaluationTargetMaterializationData"
    ],
    # the run launcher and the Celery executor (launcher.py, executor.py)
    "dagster._core.launcher": ["CheckRunHealthResult", "WorkerStatus"],
    "dagster._core.execution.retries": ["RetryMode"],
    # the tests': the pid a run worker reports, the run monitoring dagster-daemon runs, the
    # process's defs-state storage, an error as a step reports it
    "dagster._core.events": ["EngineEventData"],
    "dagster._daemon.monitoring.run_monitoring": ["monitor_started_run"],
    "dagster._core.storage.defs_state.base": ["set_defs_state_storage"],
    "dagster._utils.error": ["serializable_error_info_from_exc_info"],
    # the heartbeat a daemon writes, as the tests write one a stopped daemon left
    "dagster._daemon.types": ["DaemonHeartbeat"],
}
# private methods the platform overrides, by class (freshness.BulkStaleStatusResolver answers
# them from records read in bulk) and the queryer method it calls: an upgrade that renames or
# drops one would leave Dagster's per-partition queries in place, or call nothing
OVERRIDDEN = {
    "CachingStaleStatusResolver": (
        "_get_latest_data_version_record",
        "_is_dep_updated",
        "instance_queryer",
    ),
}
# name -> the private module that defines it
NAMES = {name: module for module, names in _MODULES.items() for name in names}
__all__ = ["DAGSTER_VERSION", "NAMES", "OVERRIDDEN", *NAMES]


def __getattr__(name: str) -> Any:
    if name not in NAMES:
        raise AttributeError(f"{__name__}: no Dagster name {name!r} (see NAMES)")
    value = globals()[name] = getattr(importlib.import_module(NAMES[name]), name)
    return value
