"""`kg build`'s wait on its backfill (orchestration/backfill.py, wait_for_backfill) on a real
instance and code server, without a daemon: Dagster's backfill and run-queue iterations run
when the backfill may have more to launch (a run created or ended), not once per file a run
records, and the backfill and its runs are read only when the event log has something new;
the progress still names every file as its run records it."""

from __future__ import annotations

import time

import dagster as dg
from dagster._core.definitions.events import AssetKeyPartitionKey
from dagster._core.workspace.context import WorkspaceProcessContext

from kg_platform.orchestration.backfill import (
    Reporter,
    code_location,
    next_tick,
    submit_backfill,
    wait_for_backfill,
)
from kg_platform.orchestration.instance import write_instance_yaml
from kg_platform.orchestration.runs import FileRuns
from kg_platform.settings import REPOSITORY

FILES = [f"f{i}" for i in range(1, 9)]
PARTS = dg.StaticPartitionsDefinition(FILES)
# the batch records one file every RECORD_S; the whole step then waits QUIET_S without an
# event, so the wait has ticks with nothing new to read
RECORD_S = 0.3
QUIET_S = 3.0


@dg.multi_asset(
    specs=[dg.AssetSpec("part", skippable=True)],
    partitions_def=PARTS,
    backfill_policy=dg.BackfillPolicy.single_run(),
)
def batch(context):
    """One run over every file, recording each as its own partition as it goes."""
    for name in context.partition_keys:
        time.sleep(RECORD_S)
        yield dg.AssetMaterialization("part", partition=name)


@dg.asset(deps=["part"])
def whole() -> None:
    time.sleep(QUIET_S)


defs = dg.Definitions(assets=[batch, whole])


def test_the_wait_drives_per_run_not_per_file_and_reads_only_what_changed(tmp_path) -> None:
    write_instance_yaml(tmp_path, None, max_concurrent_runs=2)
    said: list[str] = []
    ended: list[str] = []
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        target = code_location(instance, __name__, "defs", str(REPOSITORY), "wait")
        with WorkspaceProcessContext(instance, target) as process_context:
            graph = process_context.create_request_context().asset_graph
            wanted = {AssetKeyPartitionKey(dg.AssetKey("part"), f) for f in FILES}
            wanted.add(AssetKeyPartitionKey(dg.AssetKey("whole"), None))
            backfill_id = submit_backfill(
                instance,
                graph,
                wanted,
                title="wait",
                tags={},
                run_config={"execution": {"config": {"in_process": {}}}},
            )
            result = wait_for_backfill(
                instance,
                process_context,
                backfill_id,
                lambda run: ended.append(f"{run.label}: {run.status}"),
                idle_s=600,  # no drive on the clock: only what the runs do
                reporter=Reporter(say=said.append),
                files=FileRuns(frozenset({"part"}), ""),
            )
    assert result.status == "COMPLETED_SUCCESS"
    assert ended == ["part [f1..f8]: SUCCESS", "whole: SUCCESS"]
    # files were said as the run recorded them, in order, each once (those recorded after
    # the last look before the run ended are in its line at its end)
    recorded = [
        f for line in said if line.startswith("  recorded: ") for f in line[12:].split(", ")
    ]
    assert recorded and recorded == FILES[: len(recorded)], said
    # per run: the iteration that creates it, one more that finds nothing new, the one at
    # its end (the last one ends the backfill): 5, whatever the 8 files recorded in between
    # (a run ending before the second iteration makes it 4)
    assert result.drives <= 5, result
    # the whole step's quiet seconds are ticks that read nothing
    print(f"ticks {result.ticks}, reads {result.reads}, drives {result.drives}")
    assert result.ticks - result.reads >= 2, result


def test_the_tick_lengthens_while_nothing_happens_up_to_two_seconds() -> None:
    # 0.5 s while events come, +0.5 s per 10 s of quiet, at most 2 s
    ticks = [next_tick(0.5, quiet) for quiet in (0, 9.9, 10, 19.9, 25, 30, 600)]
    assert ticks == [0.5, 0.5, 1.0, 1.0, 1.5, 2.0, 2.0]
