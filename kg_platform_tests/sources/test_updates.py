"""The update sensor and the daily fold schedule, evaluated against a local copy of the real
mirror that grows the way NLM's site does."""

from __future__ import annotations

import hashlib
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest

from kg_platform.assets.updates import pubmed_daily_fold, pubmed_new_files
from kg_platform.resources.pubmed_source import PubmedSourceResource
from kg_platform_tests.conftest import require_reference


def add_file(src: Path, sub_dir: str, name: str, data: bytes) -> None:
    """A file as NLM posts it: the .xml.gz and its .md5 line."""
    folder = src / sub_dir
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.xml.gz").write_bytes(data)
    digest = hashlib.md5(data).hexdigest()
    (folder / f"{name}.xml.gz.md5").write_text(f"MD5({name}.xml.gz)= {digest}\n")


def evaluate(instance: dg.DagsterInstance, src: Path, cursor: str | None):
    context = dg.build_sensor_context(
        instance=instance,
        cursor=cursor,
        resources={"pubmed_source": PubmedSourceResource(base=str(src))},
    )
    result = pubmed_new_files(context)
    if isinstance(result, dg.SensorResult):
        # what the daemon does with the tick: add the partitions it asked for
        for request in result.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)
    return result


def run_keys(result: dg.SensorResult) -> list[tuple[str, str, str]]:
    return [(r.run_key, r.partition_key, r.tags["pubmed/sub_dir"]) for r in result.run_requests]


def test_sensor_first_run_no_change_and_new_files(tmp_path: Path) -> None:
    mirror = require_reference("pubmed", "mirror")
    src = tmp_path / "mirror"
    shutil.copytree(mirror, src)
    update = (mirror / "updatefiles" / "pubmed26n1335.xml.gz").read_bytes()
    with dg.instance_for_test() as instance:
        # first run: both real files become partitions and runs
        first = evaluate(instance, src, None)
        assert isinstance(first, dg.SensorResult)
        assert run_keys(first) == [
            ("pubmed26n1334", "pubmed26n1334", "baseline"),
            ("pubmed26n1335", "pubmed26n1335", "updatefiles"),
        ]
        assert [
            (r.partitions_def_name, r.partition_keys) for r in first.dynamic_partitions_requests
        ] == [
            ("pubmed_files", ["pubmed26n1334", "pubmed26n1335"]),
            ("pubmed_releases", ["pubmed26"]),
        ]
        assert json.loads(first.cursor) == {"requested": ["pubmed26n1334", "pubmed26n1335"]}
        assert instance.get_dynamic_partitions("pubmed_files") == ["pubmed26n1334", "pubmed26n1335"]

        # no change: nothing requested, the cursor stays
        second = evaluate(instance, src, first.cursor)
        assert isinstance(second, dg.SkipReason)
        assert second.skip_message == "no new files among 2 listed"

        # NLM posts two daily files (and some names that are not PubMed files)
        add_file(src, "updatefiles", "pubmed26n1336", update)
        add_file(src, "updatefiles", "pubmed26n1337", update)
        (src / "updatefiles" / "README.txt").write_text("not a file to ingest")
        (src / "updatefiles" / "pubmed26n1338.xml.gz.md5").write_text("md5 before the file")
        third = evaluate(instance, src, first.cursor)
        assert run_keys(third) == [
            ("pubmed26n1336", "pubmed26n1336", "updatefiles"),
            ("pubmed26n1337", "pubmed26n1337", "updatefiles"),
        ]
        assert json.loads(third.cursor)["requested"] == [
            "pubmed26n1334",
            "pubmed26n1335",
            "pubmed26n1336",
            "pubmed26n1337",
        ]
        assert instance.get_dynamic_partitions("pubmed_files")[-2:] == [
            "pubmed26n1336",
            "pubmed26n1337",
        ]

        # from a lost cursor: a file already parsed (e.g. by `kg build`) gets no second run,
        # and no partition is added twice
        instance.report_runless_asset_event(
            dg.AssetMaterialization("pubmed_tables", partition="pubmed26n1334")
        )
        fresh = evaluate(instance, src, None)
        assert [r.run_key for r in fresh.run_requests] == [
            "pubmed26n1335",
            "pubmed26n1336",
            "pubmed26n1337",
        ]
        assert fresh.dynamic_partitions_requests == []

        # a new annual baseline: its files are added (the fold switches once it is complete)
        add_file(src, "baseline", "pubmed27n0001", update)
        fourth = evaluate(instance, src, third.cursor)
        assert run_keys(fourth) == [("pubmed27n0001", "pubmed27n0001", "baseline")]
        # once 2027 is complete (its first update continues the baseline), 2026 is dropped
        add_file(src, "updatefiles", "pubmed27n0002", update)
        fifth = evaluate(instance, src, fourth.cursor)
        assert run_keys(fifth) == [("pubmed27n0002", "pubmed27n0002", "updatefiles")]
        assert json.loads(fifth.cursor) == {"requested": ["pubmed27n0001", "pubmed27n0002"]}
        # files of the superseded release that appear late are not ingested
        add_file(src, "updatefiles", "pubmed26n1338", update)
        assert isinstance(evaluate(instance, src, fifth.cursor), dg.SkipReason)


def test_sensor_on_an_unreachable_source_fails_clearly(tmp_path: Path) -> None:
    with (
        dg.instance_for_test() as instance,
        pytest.raises(FileNotFoundError, match="does not exist"),
    ):
        evaluate(instance, tmp_path / "nowhere", None)


def test_daily_fold_waits_for_every_file(tmp_path: Path) -> None:
    with dg.instance_for_test() as instance:
        when = datetime(2026, 1, 2, 9, tzinfo=UTC)
        context = dg.build_schedule_context(instance=instance, scheduled_execution_time=when)
        first = pubmed_daily_fold(context)
        assert isinstance(first, dg.SkipReason)
        assert first.skip_message.startswith("no pubmed_files partitions yet")
        instance.add_dynamic_partitions("pubmed_files", ["pubmed26n1334", "pubmed26n1335"])
        # pubmed_tables materialised for one file only
        instance.report_runless_asset_event(
            dg.AssetMaterialization("pubmed_tables", partition="pubmed26n1334")
        )
        waiting = pubmed_daily_fold(context)
        assert isinstance(waiting, dg.SkipReason)
        assert waiting.skip_message == (
            "pubmed26: 1 of 2 files not parsed yet (first: pubmed26n1335)"
        )
        instance.report_runless_asset_event(
            dg.AssetMaterialization("pubmed_tables", partition="pubmed26n1335")
        )
        ready = pubmed_daily_fold(context)
        assert isinstance(ready, dg.RunRequest)
        assert (ready.run_key, ready.partition_key) == ("corpus-pubmed26-2026-01-02-2", "pubmed26")
