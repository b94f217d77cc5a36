"""Failed shards and backfill, end to end: a real HTTP mirror, dagster-webserver and the daemon.

One file is served corrupt: its partition fails with the md5 error, the others succeed and
`corpus` does not run on partial input. The file is fixed and only the failed partitions are
backfilled from the UI in headless Chromium (the backfill page's "Re-execute from failure"). The
final lake must equal, by content hash, a clean run; and every check must have passed (a
backfill reports success even when a check failed, so the checks are asserted separately).
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import dagster as dg
import pytest

from kg_platform.assets.partitions import pubmed_files
from kg_platform.orchestration.runs import partition_label
from kg_platform_tests.conftest import materialised_partitions, require_reference
from kg_platform_tests.sources.mirror_server import serve_mirror
from kg_platform_tests.support.platform import DONE, browser_page, content_hashes, running_platform

pytestmark = pytest.mark.slow

FILES = ["pubmed26n1334", "pubmed26n1335", "pubmed26n1336"]
CORRUPT = "pubmed26n1335"
MD5_1335 = "88b74979343252faa848a06d7c6aa3ea"
TABLE_CHECKS = ["schema", "recount_matches_xml", "unique_pmid_version", "pmids_in_articles"]
CORPUS_CHECKS = [
    "one_row_per_pmid",
    "no_deleted_pmid",
    "polars_recount",
    "edge_sources_in_articles",
]


def make_mirror(root: Path) -> None:
    """The real 2026 pair plus a third file (the update's bytes under the next name)."""
    mirror = require_reference("pubmed", "mirror")
    shutil.copytree(mirror, root)
    data = (root / "updatefiles" / "pubmed26n1335.xml.gz").read_bytes()
    (root / "updatefiles" / "pubmed26n1336.xml.gz").write_bytes(data)
    (root / "updatefiles" / "pubmed26n1336.xml.gz.md5").write_text(
        f"MD5(pubmed26n1336.xml.gz)= {hashlib.md5(data).hexdigest()}\n"
    )


def runs_of_backfill(instance: dg.DagsterInstance, backfill_id: str) -> list[dg.DagsterRun]:
    return list(instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill_id})))


def failed_files(instance: dg.DagsterInstance, run_id: str) -> list[dict[str, str]]:
    """Each step failure's {file: cause}, as the step names its failed files."""
    return [
        record.dagster_event.step_failure_data.user_failure_data.metadata["failed_files"].value
        for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    ]


def check_statuses(instance: dg.DagsterInstance, asset: str, names: list[str]) -> dict:
    """(check, partition) -> status of its latest execution; the partition comes from the
    record or, where the record has none, from the run that executed the check."""
    statuses = {}
    for name in names:
        key = dg.AssetCheckKey(dg.AssetKey(asset), name)
        for record in instance.event_log_storage.get_asset_check_execution_history(key, limit=50):
            partition = record.partition
            if partition is None:
                run = instance.get_run_by_id(record.run_id)
                partition = run.tags.get("dagster/partition") if run else None
            statuses.setdefault((name, partition), record.status.value)
    return statuses


def reexecute_from_failure_in_browser(platform, backfill: dict) -> str:
    """Headless Chromium on the backfill's page: open its actions menu, choose "Re-execute
    from failure"; the id of the backfill the UI says it created."""
    with browser_page("ui_backfill_failure.png") as page:
        page.goto(f"{platform.url}/runs/b/{backfill['backfillId']}")
        page.get_by_text("Partition selection").wait_for()
        # the page's one icon-only button opens the backfill's actions menu
        [menu] = [
            b for b in page.locator("button").all() if b.is_visible() and not b.inner_text().strip()
        ]
        menu.click()
        page.get_by_text("Re-execute from failure", exact=True).click()
        toast = page.get_by_text(re.compile(r"Created backfill \w+"))
        toast.wait_for()
        return re.search(r"Created backfill (\w+)", toast.inner_text()).group(1)


def clean_run(root: Path, url: str) -> dict[str, str]:
    """The same assets in process on a healthy mirror into a second lake."""
    from kg_platform.assets.pubmed import corpus, pubmed_file_batch
    from kg_platform.resources.catalog import CatalogResource
    from kg_platform.resources.lake import LakeResource
    from kg_platform.resources.pubmed_source import PubmedSourceResource

    resources = {
        "lake": LakeResource(root=str(root / "lake")),
        "catalog": CatalogResource(database=str(root / "catalog.duckdb")),
        "pubmed_source": PubmedSourceResource(base=url),
    }
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("pubmed_files", FILES)
        instance.add_dynamic_partitions("pubmed_releases", ["pubmed26"])
        for name in FILES:
            result = dg.materialize(
                [pubmed_file_batch],
                partition_key=name,
                resources=resources,
                instance=instance,
            )
            assert result.success
        assert dg.materialize(
            [corpus], partition_key="pubmed26", resources=resources, instance=instance
        ).success
    return content_hashes(root / "lake")


def test_failed_shard_is_backfilled_from_failure(tmp_path: Path) -> None:
    make_mirror(tmp_path / "mirror")
    with serve_mirror(tmp_path / "mirror") as (url, mirror_state):
        mirror_state.corrupt.add(f"/updatefiles/{CORRUPT}.xml.gz")
        with running_platform(tmp_path / "platform", url) as platform:
            platform.add_partitions(FILES)
            first = platform.backfill(["pubmed_xml", "pubmed_tables"], FILES, "first build")
            assert first["status"] in ("COMPLETED_FAILED", "FAILED"), first

            instance = dg.DagsterInstance.from_config(platform.env["DAGSTER_HOME"])
            try:
                xml_done = instance.get_materialized_partitions(dg.AssetKey("pubmed_xml"))
                tables_done = instance.get_materialized_partitions(dg.AssetKey("pubmed_tables"))
                assert sorted(xml_done) == ["pubmed26n1334", "pubmed26n1336"]
                assert sorted(tables_done) == ["pubmed26n1334", "pubmed26n1336"]
                # the three files are one run's step: the corrupt one failed alone, a FAILED
                # partition beside two materialised ones, named with its cause
                [failed] = runs_of_backfill(instance, first["backfillId"])
                assert failed.status == dg.DagsterRunStatus.FAILURE
                assert partition_label(failed.tags) == "pubmed26n1334..pubmed26n1336"
                status = instance.get_status_by_partition(
                    dg.AssetKey("pubmed_tables"), FILES, pubmed_files
                )
                assert {f: s.value for f, s in status.items()} == {
                    "pubmed26n1334": "MATERIALIZED",
                    CORRUPT: "FAILED",
                    "pubmed26n1336": "MATERIALIZED",
                }
                [causes] = failed_files(instance, failed.run_id)
                assert list(causes) == [CORRUPT]
                assert causes[CORRUPT].startswith(
                    f"{CORRUPT}.xml.gz: md5 mismatch (expected {MD5_1335}, got "
                ), causes
                assert not (
                    platform.lake / "raw" / "pubmed" / "26" / "updatefiles" / f"{CORRUPT}.xml.gz"
                ).exists()

                # the file is fixed upstream; re-execute the backfill from failure
                mirror_state.corrupt.clear()
                # from the UI, in a browser: the backfill's page, its menu, "Re-execute from
                # failure" (the webserver's reexecutePartitionBackfill, FROM_FAILURE)
                second = {"backfillId": reexecute_from_failure_in_browser(platform, first)}
                assert platform.wait_for_backfill(second["backfillId"]) in DONE
                # only the failed partition ran again
                rerun = runs_of_backfill(instance, second["backfillId"])
                assert [partition_label(r.tags) for r in rerun] == [CORRUPT]
                assert materialised_partitions(instance, rerun, "pubmed_tables") == {CORRUPT}
                assert (
                    sorted(instance.get_materialized_partitions(dg.AssetKey("pubmed_tables")))
                    == FILES
                )
                # then the release's corpus: a backfill of its one release partition
                platform.add_partitions(["pubmed26"], "pubmed_releases")
                assert platform.backfill(["corpus"], ["pubmed26"], "fold")["status"] in DONE
                assert instance.get_materialized_partitions(dg.AssetKey("corpus")) == {"pubmed26"}

                table_checks = check_statuses(instance, "pubmed_tables", TABLE_CHECKS)
                assert table_checks == {
                    (check, name): "SUCCEEDED" for check in TABLE_CHECKS for name in FILES
                }
                assert check_statuses(instance, "corpus", CORPUS_CHECKS) == {
                    (check, "pubmed26"): "SUCCEEDED" for check in CORPUS_CHECKS
                }
            finally:
                instance.dispose()
        backfilled = content_hashes(platform.lake)
        clean = clean_run(tmp_path / "clean", url)
    assert sorted(backfilled) == sorted(clean)
    # the corpus's six tables, each a part per bucket holding a PMID of the pair (five)
    parts = [k for k in clean if k.startswith("corpus/pubmed26/") and "/part-" in k]
    assert len(parts) == 6 * 5
    assert backfilled == clean
