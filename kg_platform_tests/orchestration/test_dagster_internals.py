"""The private Dagster names the platform uses (only in kg_platform/orchestration/), each used
against a real instance of the installed Dagster, 1.13.27: the staleness kg status reports, the
provenance tags, an asset backfill submitted and driven the way kg build drives it without a
daemon, and the run launcher's health check; and ruff's ban of them elsewhere covers every
private module. An upgrade that moves or changes one of them fails here first."""

from __future__ import annotations

import logging
import os
import sys
import time
import tomllib
from pathlib import Path

import dagster as dg
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.definitions.events import AssetKeyPartitionKey
from dagster._core.execution.backfill import BulkActionsFilter, BulkActionStatus
from dagster._core.execution.retries import RetryMode
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus
from dagster._core.workspace.context import (
    WEBSERVER_GRPC_SERVER_HEARTBEAT_TTL,
    WorkspaceProcessContext,
)
from dagster._daemon.backfill import execute_backfill_iteration
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import (
    QueuedRunCoordinatorDaemon,
)
from dagster._grpc import client as grpc_client
from dagster._utils.caching_instance_queryer import CachingInstanceQueryer

from kg_platform.orchestration import DAGSTER_VERSION, records
from kg_platform.orchestration.backfill import (
    CODE_SERVER_HEARTBEAT_S,
    RUN_IMPORTS,
    code_location,
    submit_backfill,
)
from kg_platform.orchestration.freshness import OVERRIDDEN, stale_resolver
from kg_platform.orchestration.instance import write_instance_yaml
from kg_platform.orchestration.recovery import run_worker
from kg_platform.settings import REPOSITORY
from kg_platform.settings.workers import pid_alive

LETTERS = dg.StaticPartitionsDefinition(["a", "b"])
FORKSERVER = "from multiprocessing.forkserver import main"


@dg.asset(partitions_def=LETTERS, code_version="1")
def upstream(context) -> dg.MaterializeResult:
    version = context.run.tags.get("version", "1")
    # the run's process and the command line of the process that started it
    parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().decode().split("\0")
    # whether the pandera models came with the fork (RUN_IMPORTS), then polars' and Arrow's
    # thread pools used in the forked process
    preloaded = "kg_platform.schemas.models" in sys.modules
    import io

    import polars as pl

    frame = pl.DataFrame({"k": [i % 7 for i in range(50_000)], "v": list(range(50_000))})
    sums = frame.group_by("k").agg(pl.col("v").sum()).sort("k")["v"].to_list()
    frame.write_parquet(io.BytesIO(), compression="zstd")
    return dg.MaterializeResult(
        data_version=dg.DataVersion(f"{context.partition_key}{version}"),
        metadata={
            "pid": os.getpid(),
            "parent": dg.MetadataValue.json(parent[:-1]),
            "preloaded": preloaded,
            "sums": dg.MetadataValue.json(sums),
        },
    )


@dg.asset(partitions_def=LETTERS, code_version="2", deps=[upstream])
def downstream() -> dg.MaterializeResult:
    return dg.MaterializeResult()


# what the code server of the backfill test loads (this module)
defs = dg.Definitions(assets=[upstream, downstream])
UP, DOWN = dg.AssetKey("upstream"), dg.AssetKey("downstream")


def test_the_installed_dagster_is_the_one_the_names_were_checked_against() -> None:
    assert dg.__version__ == DAGSTER_VERSION == "1.13.27"


def test_ruff_bans_every_private_module_outside_orchestration() -> None:
    package = Path(dg.__file__).parent
    private = {
        f"dagster.{p.stem}"
        for p in package.iterdir()
        if p.name.startswith("_") and not p.name.startswith("__") and p.suffix in ("", ".py")
    }
    config = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    lint = config["tool"]["ruff"]["lint"]
    assert set(lint["flake8-tidy-imports"]["banned-api"]) == private
    assert "TID251" in lint["select"]
    assert lint["per-file-ignores"]["kg_platform/orchestration/**"] == ["TID251"]


def test_every_overridden_method_is_the_classes_own() -> None:
    assert [m for m in OVERRIDDEN if m not in vars(CachingStaleStatusResolver)] == []
    assert callable(CachingInstanceQueryer.asset_partition_has_materialization_or_observation)


def test_staleness_and_provenance_on_a_real_instance() -> None:
    graph = defs.resolve_asset_graph()
    with dg.instance_for_test() as instance:
        assert dg.materialize([upstream, downstream], partition_key="a", instance=instance).success
        resolver = stale_resolver(instance, graph)
        stale = StaleStatus
        assert [resolver.get_status(k, p) for k in (UP, DOWN) for p in "ab"] == [
            stale.FRESH,
            stale.MISSING,
            stale.FRESH,
            stale.MISSING,
        ]
        [up] = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=UP, asset_partitions=["a"]), limit=1
        ).records
        [down] = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=DOWN, asset_partitions=["a"]), limit=1
        ).records
        tags = down.asset_materialization.tags
        assert tags[records.CODE_VERSION_TAG] == "2"
        assert tags[records.get_input_event_pointer_tag(UP)] == str(up.storage_id)
        assert records.get_input_data_version_tag(UP) in tags
        assert up.asset_materialization.tags[records.DATA_VERSION_TAG] == "a1"
        assert up.asset_materialization.tags[records.DATA_VERSION_IS_USER_PROVIDED_TAG] == "true"
        assert dg.DataVersion("INITIAL") == records.DEFAULT_DATA_VERSION
        assert records.NULL_EVENT_POINTER == "NULL"
        target = records.AssetCheckEvaluationTargetMaterializationData(
            storage_id=up.storage_id, run_id=up.run_id, timestamp=up.timestamp
        )
        check = dg.AssetCheckEvaluation(
            asset_key=UP, check_name="letters", passed=True, target_materialization_data=target
        )
        assert check.target_materialization_data.storage_id == up.storage_id
        # a new upstream version makes the downstream partition built from it stale
        assert dg.materialize(
            [upstream], partition_key="a", instance=instance, tags={"version": "2"}
        ).success
        assert stale_resolver(instance, graph).get_status(DOWN, "a") == stale.STALE


def test_a_backfill_submitted_and_driven_without_a_daemon(tmp_path) -> None:
    write_instance_yaml(tmp_path, None, max_concurrent_runs=2)
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        # kg build's code server (orchestration/code_server.py) over this module's defs
        target = code_location(instance, __name__, "defs", str(REPOSITORY), "smoke")
        with WorkspaceProcessContext(instance, target) as process_context:
            graph = process_context.create_request_context().asset_graph
            wanted = {AssetKeyPartitionKey(key, "b") for key in (UP, DOWN)}
            backfill_id = submit_backfill(
                instance,
                graph,
                wanted,
                title="smoke",
                tags={},
                run_config={"execution": {"config": {"in_process": {}}}},
            )
            requested = BulkActionsFilter(statuses=[BulkActionStatus.REQUESTED])
            assert [b.backfill_id for b in instance.get_backfills(filters=requested)] == [
                backfill_id
            ]
            queue = QueuedRunCoordinatorDaemon(interval_seconds=1)
            logger = logging.getLogger("smoke")
            for _ in range(600):  # a guard against a hang, not a time limit on the result
                list(execute_backfill_iteration(process_context, logger))
                list(queue.run_iteration(process_context))
                ended = instance.get_backfill(backfill_id)
                runs = instance.get_runs(
                    dg.RunsFilter(tags={"dagster/backfill": ended.backfill_id})
                )
                if ended.status != BulkActionStatus.REQUESTED and all(r.is_finished for r in runs):
                    break
                time.sleep(0.5)
            # kg build's client heartbeats every CODE_SERVER_HEARTBEAT_S, not every second: Dagster's client
            # reads this name before each wait, and the server, which shuts down after the TTL
            # without one, still answers
            assert grpc_client.CLIENT_HEARTBEAT_INTERVAL == CODE_SERVER_HEARTBEAT_S == 5
            assert WEBSERVER_GRPC_SERVER_HEARTBEAT_TTL == 45
            location = process_context.create_request_context().get_code_location("smoke")
            assert location.client.heartbeat("still there") == "still there"
        assert ended.status == BulkActionStatus.COMPLETED_SUCCESS
        materialized = set(ended.asset_backfill_data.materialized_subset.iterate_asset_partitions())
        assert materialized == wanted
        # the run launcher (orchestration/launcher.py, named by dagster.yaml) answers Dagster's
        # run monitoring: a run whose worker process has exited is a failed worker
        pid, _ = run_worker(instance, runs[0].run_id)
        for _ in range(600):  # the worker exits just after it records the run's end
            if not pid_alive(pid):
                break
            time.sleep(0.5)
        # each run's process is a fork of the code server's forkserver, which preloaded this
        # module, and it reported its own pid, as a spawned one does
        [up] = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=UP, asset_partitions=["b"]), limit=1
        ).records
        metadata = up.asset_materialization.metadata
        assert metadata["pid"].value == run_worker(instance, up.run_id)[0]
        parent = metadata["parent"].value  # the interpreter's flags, then -c and the code
        code = parent[parent.index("-c") + 1]
        assert code.split(";")[0] == FORKSERVER
        assert f"'{__name__}'" in code
        # and the libraries the runs' steps load (assets/run_imports.py): in the run's
        # process before its step, and polars and Arrow work there after the fork
        assert f"'{RUN_IMPORTS}'" in code
        assert metadata["preloaded"].value is True
        assert metadata["sums"].value == [sum(range(k, 50_000, 7)) for k in range(7)]
        health = instance.run_launcher.check_run_worker_health(runs[0])
        assert (health.status, health.msg) == (
            WorkerStatus.FAILED,
            f"its run worker (pid {pid}) is gone",
        )
    assert RetryMode.from_config({"enabled": {}}) == RetryMode.ENABLED
    assert CheckRunHealthResult(WorkerStatus.RUNNING).msg is None
