"""The instance the repository's dagster.yaml names (KgInstance): Dagster's SQLite storage with
one engine per database file, on real instances, real runs and the files Dagster's own
storage writes."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest

from kg_platform.orchestration import sqlite_storage
from kg_platform.orchestration.sqlite_storage import (
    KEPT_RUN_SHARDS,
    KeptEngineSqliteEventLogStorage,
    KeptEngineSqliteRunStorage,
    KeptEngineSqliteScheduleStorage,
    KeptEngineSqliteStorage,
    KgInstance,
)
from kg_platform.settings import REPOSITORY

LETTERS = dg.StaticPartitionsDefinition(["a", "b", "c"])
INSTANCE_CLASS = (
    "instance_class:\n  module: kg_platform.orchestration.sqlite_storage\n  class: KgInstance\n"
)


@dg.asset(partitions_def=LETTERS)
def letters(context) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"letter": context.partition_key})


def home(folder: Path) -> Path:
    """An instance folder with the repository's dagster.yaml."""
    folder.mkdir(parents=True)
    text = (REPOSITORY / "dagster.yaml").read_text()
    assert INSTANCE_CLASS in text
    (folder / "dagster.yaml").write_text(text)
    return folder


def materialise(instance: dg.DagsterInstance, partition: str) -> str:
    result = dg.materialize([letters], instance=instance, partition_key=partition)
    assert result.success
    return result.run_id


def letters_seen(instance: dg.DagsterInstance) -> list[str]:
    records = instance.fetch_materializations(letters.key, limit=100).records
    return sorted(r.asset_materialization.metadata["letter"].value for r in records)


def test_the_repository_instance_runs_on_one_engine_per_database_file(tmp_path):
    with dg.DagsterInstance.from_config(str(home(tmp_path / "home"))) as instance:
        assert type(instance) is KgInstance
        assert type(instance.run_storage) is KeptEngineSqliteRunStorage
        assert type(instance.schedule_storage) is KeptEngineSqliteScheduleStorage
        storage = instance.event_log_storage
        assert type(storage) is KeptEngineSqliteEventLogStorage
        first = materialise(instance, "a")
        index, run_engine = storage._engines["index"], storage._engines[first]
        assert instance.run_storage._kept is not None
        run_storage_engine = instance.run_storage._kept
        second = materialise(instance, "b")
        # the same engines served the second run: the index's, the run storage's
        assert storage._engines["index"] is index
        assert instance.run_storage._kept is run_storage_engine
        assert set(storage._engines) == {"index", first, second}
        assert storage._engines[first] is run_engine
        assert letters_seen(instance) == ["a", "b"]
        statuses = [r.dagster_run.status for r in instance.get_run_records()]
        assert statuses == [dg.DagsterRunStatus.SUCCESS] * 2
        # what a run's process opens from the instance's ref: the same classes and folder
        ref = instance.get_ref()
        assert ref.storage_data.class_name == KeptEngineSqliteStorage.__name__
        with dg.DagsterInstance.from_ref(ref) as in_run:
            assert type(in_run) is KgInstance
            assert type(in_run.event_log_storage) is KeptEngineSqliteEventLogStorage
            assert letters_seen(in_run) == ["a", "b"]


def test_a_copied_home_opens_its_own_files(tmp_path):
    original = home(tmp_path / "original")
    with dg.DagsterInstance.from_config(str(original)) as instance:
        materialise(instance, "a")
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    with dg.DagsterInstance.from_config(str(copy)) as instance:
        assert instance.get_ref().storage_data.config_yaml == f"base_dir: {copy}\n"
        materialise(instance, "c")
        assert letters_seen(instance) == ["a", "c"]
        assert instance.get_runs_count() == 2
    with dg.DagsterInstance.from_config(str(original)) as instance:
        assert letters_seen(instance) == ["a"]
        assert instance.get_runs_count() == 1


@pytest.mark.parametrize("dagsters_first", [True, False])
def test_dagsters_own_storage_and_this_one_read_each_others_files(tmp_path, dagsters_first):
    folder = home(tmp_path / "home")
    ours = (folder / "dagster.yaml").read_text()
    dagsters = ours.replace(INSTANCE_CLASS, "")
    first, second = (dagsters, ours) if dagsters_first else (ours, dagsters)
    (folder / "dagster.yaml").write_text(first)
    with dg.DagsterInstance.from_config(str(folder)) as instance:
        assert (type(instance) is KgInstance) is not dagsters_first
        run_a = materialise(instance, "a")
    (folder / "dagster.yaml").write_text(second)
    with dg.DagsterInstance.from_config(str(folder)) as instance:
        assert (type(instance) is KgInstance) is dagsters_first
        assert letters_seen(instance) == ["a"]
        assert [r.dagster_run.run_id for r in instance.get_run_records()] == [run_a]
        materialise(instance, "b")
    (folder / "dagster.yaml").write_text(first)
    with dg.DagsterInstance.from_config(str(folder)) as instance:
        assert letters_seen(instance) == ["a", "b"]
        assert instance.get_runs_count() == 2


def test_engines_are_kept_for_the_last_run_shards_and_made_again_after_a_wipe(
    tmp_path, monkeypatch
):
    assert KEPT_RUN_SHARDS == 8
    monkeypatch.setattr(sqlite_storage, "KEPT_RUN_SHARDS", 2)
    storage = KeptEngineSqliteEventLogStorage(str(tmp_path / "runs"))
    shards = [f"run-{i}" for i in range(4)]
    for shard in ["index", *shards]:
        with storage.run_connection(shard) as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM event_logs").scalar() == 0
    assert set(storage._engines) == {"index", "run-2", "run-3"}
    kept = storage._engines[shards[-1]]
    storage.wipe()
    # the run shards' files are gone; the next use makes the shard and its engine again
    assert not (tmp_path / "runs" / f"{shards[-1]}.db").exists()
    with storage.run_connection(shards[-1]) as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM event_logs").scalar() == 0
    assert storage._engines[shards[-1]] is not kept
    assert (tmp_path / "runs" / f"{shards[-1]}.db").exists()


@dg.asset(
    partitions_def=LETTERS,
    check_specs=[
        dg.AssetCheckSpec("is_a", asset="checked", partitions_def=LETTERS, blocking=True),
        dg.AssetCheckSpec("lower", asset="checked", partitions_def=LETTERS),
    ],
)
def checked(context) -> dg.MaterializeResult:
    letter = context.partition_key
    return dg.MaterializeResult(
        metadata={"letter": letter},
        check_results=[
            dg.AssetCheckResult(check_name="is_a", passed=letter == "a"),
            dg.AssetCheckResult(check_name="lower", passed=letter.islower()),
        ],
    )


def check_rows(instance: dg.DagsterInstance) -> list[tuple]:
    """Each check's executions as the UI reads them: partition, status, the storage id of
    the evaluation event and of the materialisation it judged."""
    storage = instance.event_log_storage
    rows = []
    for name in ("is_a", "lower"):
        key = dg.AssetCheckKey(checked.key, name)
        for record in storage.get_asset_check_execution_history(key, limit=10):
            evaluation = record.event.dagster_event.event_specific_data
            target = evaluation.target_materialization_data
            rows.append(
                (name, record.partition, record.status.value, evaluation.passed, target.run_id)
            )
    return sorted(rows)


def test_check_events_are_stored_as_dagster_stores_them_with_one_index_commit_each(tmp_path):
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    commits: list[int] = []

    def count(conn) -> None:
        commits.append(1)

    seen = {}
    event.listen(Engine, "commit", count)
    try:
        for ours in (False, True):
            folder = home(tmp_path / f"home-{ours}")
            if not ours:  # Dagster's own storage: what this one must store
                text = (folder / "dagster.yaml").read_text().replace(INSTANCE_CLASS, "")
                (folder / "dagster.yaml").write_text(text)
            with dg.DagsterInstance.from_config(str(folder)) as instance:
                assert (type(instance) is KgInstance) is ours
                runs, per_run = [], []
                for letter in ("a", "b"):
                    before = len(commits)
                    runs.append(
                        dg.materialize(
                            [checked], instance=instance, partition_key=letter, raise_on_error=False
                        )
                    )
                    per_run.append(len(commits) - before)
                assert check_rows(instance) == [
                    ("is_a", "a", "SUCCEEDED", True, runs[0].run_id),
                    ("is_a", "b", "FAILED", False, runs[1].run_id),
                    ("lower", "a", "SUCCEEDED", True, runs[0].run_id),
                    ("lower", "b", "SUCCEEDED", True, runs[1].run_id),
                ]
                evaluations = [
                    e for e in runs[1].all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"
                ]
                seen[ours] = (per_run, len(evaluations))
                if ours:  # the tables Dagster asks for before it writes, each found once
                    assert "asset_check_executions" in instance.event_log_storage._tables
    finally:
        event.remove(Engine, "commit", count)
    (dagsters, n_evaluations), (ours, n) = seen[False], seen[True]
    # two checks a run, each planned (at the run's start) then evaluated: four check
    # events, each one commit of the index less (Dagster commits its copy of the event,
    # then its check row)
    assert n_evaluations == n == 2
    assert [d - o for d, o in zip(dagsters, ours, strict=True)] == [4, 4]
