"""The private Dagster names the platform uses (orchestration/dagster_internals.py), each used
against a real instance of the installed Dagster, 1.13.27: the staleness kg status reports, an
asset backfill submitted and driven the way kg build drives it without a daemon, and the run
launcher's health check. An upgrade that moves or changes one of them fails here first."""

from __future__ import annotations

import importlib
import logging
import time

import dagster as dg

from kg_platform.orchestration import dagster_internals as internals
from kg_platform.orchestration.freshness import stale_resolver
from kg_platform.orchestration.instance import write_instance_yaml
from kg_platform.orchestration.recovery import run_worker
from kg_platform.settings import REPOSITORY
from kg_platform.settings.workers import pid_alive

LETTERS = dg.StaticPartitionsDefinition(["a", "b"])


@dg.asset(partitions_def=LETTERS, code_version="1")
def upstream(context) -> dg.MaterializeResult:
    version = context.run.tags.get("version", "1")
    return dg.MaterializeResult(data_version=dg.DataVersion(f"{context.partition_key}{version}"))


@dg.asset(partitions_def=LETTERS, code_version="2", deps=[upstream])
def downstream() -> dg.MaterializeResult:
    return dg.MaterializeResult()


# what the code server of the backfill test loads (this module)
defs = dg.Definitions(assets=[upstream, downstream])
UP, DOWN = dg.AssetKey("upstream"), dg.AssetKey("downstream")


def test_the_installed_dagster_is_the_one_the_names_were_checked_against() -> None:
    assert dg.__version__ == internals.DAGSTER_VERSION == "1.13.27"


def test_every_name_is_its_modules_own() -> None:
    for name, module in internals.NAMES.items():
        assert getattr(internals, name) is getattr(importlib.import_module(module), name), name


def test_every_overridden_method_is_the_classes_own() -> None:
    for name, methods in internals.OVERRIDDEN.items():
        cls = getattr(internals, name)
        assert [m for m in methods if m not in vars(cls)] == [], name
    queryer = importlib.import_module("dagster._utils.caching_instance_queryer")
    assert callable(
        queryer.CachingInstanceQueryer.asset_partition_has_materialization_or_observation
    )


def test_staleness_and_provenance_on_a_real_instance() -> None:
    graph = defs.resolve_asset_graph()
    with dg.instance_for_test() as instance:
        assert dg.materialize([upstream, downstream], partition_key="a", instance=instance).success
        resolver = stale_resolver(instance, graph)
        stale = internals.StaleStatus
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
        assert tags[internals.CODE_VERSION_TAG] == "2"
        assert tags[internals.get_input_event_pointer_tag(UP)] == str(up.storage_id)
        assert internals.get_input_data_version_tag(UP) in tags
        assert up.asset_materialization.tags[internals.DATA_VERSION_TAG] == "a1"
        assert up.asset_materialization.tags[internals.DATA_VERSION_IS_USER_PROVIDED_TAG] == "true"
        assert dg.DataVersion("INITIAL") == internals.DEFAULT_DATA_VERSION
        assert internals.NULL_EVENT_POINTER == "NULL"
        target = internals.AssetCheckEvaluationTargetMaterializationData(
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
        target = internals.ModuleTarget(
            module_name=__name__,
            attribute="defs",
            working_directory=str(REPOSITORY),
            location_name="smoke",
        )
        with internals.WorkspaceProcessContext(instance, target) as process_context:
            graph = process_context.create_request_context().asset_graph
            wanted = {internals.AssetKeyPartitionKey(key, "b") for key in (UP, DOWN)}
            subset = internals.AssetGraphSubset.from_asset_partition_set(wanted, graph)
            backfill = internals.PartitionBackfill.from_asset_graph_subset(
                backfill_id=internals.make_new_backfill_id(),
                backfill_timestamp=time.time(),
                tags={},
                dynamic_partitions_store=instance,
                asset_graph_subset=subset,
                title="smoke",
                description=None,
                run_config={"execution": {"config": {"in_process": {}}}},
            )
            instance.add_backfill(backfill)
            requested = internals.BulkActionsFilter(statuses=[internals.BulkActionStatus.REQUESTED])
            assert [b.backfill_id for b in instance.get_backfills(filters=requested)] == [
                backfill.backfill_id
            ]
            queue = internals.QueuedRunCoordinatorDaemon(interval_seconds=1)
            logger = logging.getLogger("smoke")
            for _ in range(600):  # a guard against a hang, not a time limit on the result
                list(internals.execute_backfill_iteration(process_context, logger))
                list(queue.run_iteration(process_context))
                ended = instance.get_backfill(backfill.backfill_id)
                runs = instance.get_runs(
                    dg.RunsFilter(tags={"dagster/backfill": ended.backfill_id})
                )
                if ended.status != internals.BulkActionStatus.REQUESTED and all(
                    r.is_finished for r in runs
                ):
                    break
                time.sleep(0.5)
        assert ended.status == internals.BulkActionStatus.COMPLETED_SUCCESS
        materialized = set(ended.asset_backfill_data.materialized_subset.iterate_asset_partitions())
        assert materialized == wanted
        # the run launcher (orchestration/launcher.py, named by dagster.yaml) answers Dagster's
        # run monitoring: a run whose worker process has exited is a failed worker
        pid, _ = run_worker(instance, runs[0].run_id)
        for _ in range(600):  # the worker exits just after it records the run's end
            if not pid_alive(pid):
                break
            time.sleep(0.5)
        health = instance.run_launcher.check_run_worker_health(runs[0])
        assert (health.status, health.msg) == (
            internals.WorkerStatus.FAILED,
            f"its run worker (pid {pid}) is gone",
        )
    assert internals.RetryMode.from_config({"enabled": {}}) == internals.RetryMode.ENABLED
    assert internals.CheckRunHealthResult(internals.WorkerStatus.RUNNING).msg is None
