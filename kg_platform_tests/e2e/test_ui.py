"""The Dagster UI in a real browser (Debian chromium driven by Playwright): open the asset
graph, open pubmed_tables, launch one partition from the Materialize dialog, wait for the
run to succeed, show its check results, and keep a screenshot in support.platform.ARTIFACTS (the
temporary folder's kg-test-artifacts/, or KG_TEST_ARTIFACTS).

Both tests drive one platform (the webserver and the daemon, started once for the module):
each materialises partitions of its own assets (pubmed_tables; allocation_report and
mesh_tables) and asserts only about those."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator

import pytest

from kg_platform_tests.conftest import require_reference
from kg_platform_tests.sources.mirror_server import serve_mirror
from kg_platform_tests.support.platform import (
    ARTIFACTS,
    DONE,
    Platform,
    browser_page,
    running_platform,
)

pytestmark = pytest.mark.slow

FILE = "pubmed26n1334"
CHECKS = ["schema", "recount_matches_xml", "unique_pmid_version", "pmids_in_articles"]


def open_materialize_dialog(page, button_name: str, title: str | None = None):
    """Click the Materialize button until its dialog is open. A click that lands while the
    asset's partitions are still loading opens nothing, so the click is repeated (three
    tries, 20 s each); the dialog is returned, its title checked when one is given."""
    from playwright.sync_api import Error

    dialog = page.get_by_role("dialog")
    wanted = (
        dialog.get_by_text(title)
        if title
        else dialog.get_by_text("Select a partition or create one")
    )
    for attempt in range(3):
        page.get_by_role("button", name=button_name).first.click()
        try:
            wanted.wait_for(timeout=20_000)
            return dialog
        except Error:
            if attempt == 2:
                raise
    return dialog


def launch_one_partition(platform: Platform, page, dialog, partition: str, screenshot: str):
    """Pick ``partition`` in the open Materialize dialog, launch its one run and wait on the
    run's page (the launch toast links to it) until it succeeds; the page is kept as
    ``screenshot`` in ARTIFACTS."""
    from playwright.sync_api import expect

    dialog.get_by_text("Select a partition or create one").click()
    page.locator("span", has_text=partition).first.click()
    page.keyboard.press("Escape")
    launch = page.get_by_role("button", name="Launch 1 run")
    expect(launch).to_be_enabled()
    launch.click()
    toast = page.get_by_role("region", name=re.compile("Notifications"))
    run_link = toast.locator('a[href*="/runs/"]').first
    run_link.wait_for()
    page.goto(platform.url + str(run_link.get_attribute("href")))
    expect(page.get_by_text("Success", exact=True).first).to_be_visible(timeout=240_000)
    page.screenshot(path=str(ARTIFACTS / screenshot), full_page=True)


CHECK_STATUS = """
query Checks($key: AssetKeyInput!) {
  assetNodeOrError(assetKey: $key) {
    ... on AssetNode {
      assetChecksOrError {
        ... on AssetChecks {
          checks { name executionForLatestMaterialization { status partition } }
        }
      }
    }
  }
}"""


@pytest.fixture(scope="module")
def platform(tmp_path_factory) -> Iterator[Platform]:
    """The real mirror served over HTTP, and the platform (its MeSH source the nine-descriptor
    NLM XML sample: MeSH 2020, built in seconds) with no community pop-up over its pages."""
    root = tmp_path_factory.mktemp("ui")
    shutil.copytree(require_reference("pubmed", "mirror"), root / "mirror")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KG_MESH_SOURCE", str(require_reference("mesh", "xml")))
        with (
            serve_mirror(root / "mirror") as (url, _),
            running_platform(root / "platform", url) as platform,
        ):
            platform.set_nux_seen()
            yield platform


def test_materialise_one_partition_from_the_ui(platform: Platform) -> None:
    from playwright.sync_api import expect

    platform.add_partitions([FILE])
    # the download is upstream of the asset under test: done first, over GraphQL
    assert platform.backfill(["pubmed_xml"], [FILE])["status"] in DONE

    with browser_page("ui_failure.png") as page:
        # 1. the asset graph of the pubmed group
        page.goto(f"{platform.url}/locations/kg_platform/asset-groups/pubmed")
        node = page.locator("text=pubmed_tables").first
        node.wait_for()
        expect(page.get_by_text("pubmed_xml", exact=True).first).to_be_visible()
        # 2. open pubmed_tables (its side panel lists the checks)
        node.dblclick()
        expect(page.get_by_text("View in Asset Catalog")).to_be_visible()
        # 3. the Materialize dialog, one partition
        dialog = open_materialize_dialog(
            page, "Materialize selected", "Launch runs to materialize pubmed_tables"
        )
        # 4. its one run, waited for until it succeeds
        launch_one_partition(platform, page, dialog, FILE, "ui_pubmed_tables_run.png")
        # 5. its check results on the asset page
        page.goto(f"{platform.url}/assets/pubmed_tables?view=checks")
        for check in CHECKS:
            expect(page.get_by_text(check, exact=True).first).to_be_visible()
        expect(page.get_by_text("Passed").first).to_be_visible()
        # the latest execution names the file it judged (check specs partitioned)
        page.get_by_text(CHECKS[0], exact=True).first.click()
        expect(page.get_by_text(FILE, exact=True).first).to_be_visible()
        # 6. the screenshot, kept as a test artefact
        page.screenshot(path=str(ARTIFACTS / "ui_pubmed_tables_checks.png"), full_page=True)
    # the UI's run really did run the checks, and they passed
    data = platform.graphql(CHECK_STATUS, {"key": {"path": ["pubmed_tables"]}})
    checks = data["assetNodeOrError"]["assetChecksOrError"]["checks"]
    assert {
        c["name"]: (
            c["executionForLatestMaterialization"]["status"],
            c["executionForLatestMaterialization"]["partition"],
        )
        for c in checks
    } == {name: ("SUCCEEDED", FILE) for name in CHECKS}
    assert (ARTIFACTS / "ui_pubmed_tables_checks.png").stat().st_size > 10_000


MATERIALIZED = """
query Materialized($key: AssetKeyInput!) {
  assetNodeOrError(assetKey: $key) {
    ... on AssetNode {
      assetPartitionStatuses {
        ... on DefaultPartitionStatuses { materializedPartitions }
      }
    }
  }
}"""


def test_partitions_reports_and_one_mesh_year_from_the_ui(platform: Platform) -> None:
    """The partition dimensions on the graph's page, a report's inline plot loaded, and one
    MeSH year (of the platform's nine-descriptor sample) launched from the Materialize
    dialog: exactly that partition is built."""
    from playwright.sync_api import expect

    from kg_platform.evaluation.common.question_sets import register_question_set
    from kg_platform.storage.lake import Lake

    hotpotqa = require_reference("hotpotqa", "hotpot_dev_distractor_first60.json")
    question_set = register_question_set(Lake(str(platform.lake)), "hotpotqa", hotpotqa)
    platform.add_partitions([question_set], "hotpotqa_sets")
    platform.add_partitions(["2019", "2020"], "mesh_years")
    report = platform.backfill(["allocation_report"], [f"matched_ceilings|{question_set}"])
    assert report["status"] in DONE
    with browser_page("ui_partitions_failure.png") as page:
        # 1. the graph's two partition dimensions
        page.goto(f"{platform.url}/assets/graph?view=partitions")
        expect(page.get_by_placeholder(re.compile("Filter by mesh_year"))).to_be_visible()
        expect(page.get_by_placeholder(re.compile("Filter by release"))).to_be_visible()
        # 2. the allocation report's markdown, its plot loaded inline
        page.goto(f"{platform.url}/assets/allocation_report")
        page.get_by_text("[Show Markdown]").first.click()
        image = page.get_by_role("dialog").locator("img").first
        image.wait_for()
        page.wait_for_function("(img) => img.complete", arg=image.element_handle())
        assert image.evaluate("img => img.naturalWidth") > 0
        assert str(image.get_attribute("src")).startswith("data:image/png;base64,")
        page.keyboard.press("Escape")
        # 3. one MeSH year from the Materialize dialog
        page.goto(f"{platform.url}/assets/mesh_tables")
        dialog = open_materialize_dialog(page, "Materialize…")
        launch_one_partition(platform, page, dialog, "2020", "ui_mesh_year_run.png")
    data = platform.graphql(MATERIALIZED, {"key": {"path": ["mesh_tables"]}})
    statuses = data["assetNodeOrError"]["assetPartitionStatuses"]
    assert statuses["materializedPartitions"] == ["2020"]
    assert (platform.lake / "mesh" / "2020" / "descriptors.parquet").exists()
    assert not (platform.lake / "mesh" / "2019").exists()
