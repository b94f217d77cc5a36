"""The PubMed assets through Dagster, on the real mirror files: per-file tables with their
checks, bad files failing alone with a clear error, and the release fold."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import dagster as dg
import pytest

from kg_platform.assets.pubmed import corpus, pubmed_file_batch
from kg_platform.orchestration.runs import failure_message
from kg_platform.resources.catalog import CatalogResource
from kg_platform.resources.lake import LakeResource
from kg_platform.resources.pubmed_source import PubmedSourceResource
from kg_platform.storage.corpus import read_corpus
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference

FILES = ["pubmed26n1334", "pubmed26n1335"]
RELEASE = "pubmed26"


@pytest.fixture
def mirror(tmp_path) -> Path:
    """A writable copy of the real 2026 mirror, so a test can corrupt one file."""
    source = require_reference("pubmed", "mirror")
    target = tmp_path / "mirror"
    shutil.copytree(source, target)
    return target


def run(instance, tmp_path, mirror, selection, partition=None):
    return dg.materialize(
        [pubmed_file_batch, corpus],
        selection=selection,
        partition_key=partition,
        instance=instance,
        resources={
            "lake": LakeResource(root=str(tmp_path / "lake")),
            "catalog": CatalogResource(database=str(tmp_path / "catalog.duckdb")),
            "pubmed_source": PubmedSourceResource(base=str(mirror)),
        },
        raise_on_error=False,
    )


def tables_metadata(result) -> dict:
    """The metadata of the run's one pubmed_tables materialisation."""
    [event] = [
        m
        for m in result.asset_materializations_for_node("pubmed_file_batch")
        if m.asset_key == dg.AssetKey("pubmed_tables")
    ]
    return {k: v.value for k, v in event.metadata.items()}


def checks_of(result) -> dict[str, bool]:
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


def new_instance() -> dg.DagsterInstance:
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("pubmed_files", FILES)
    instance.add_dynamic_partitions("pubmed_releases", [RELEASE])
    return instance


def test_files_parse_with_checks_then_fold(tmp_path, mirror) -> None:
    instance = new_instance()
    expected_articles = {"pubmed26n1334": 30, "pubmed26n1335": 30}
    for name in FILES:
        result = run(instance, tmp_path, mirror, ["pubmed_xml", "pubmed_tables"], name)
        assert result.success
        assert checks_of(result) == {
            "schema": True,
            "recount_matches_xml": True,
            "unique_pmid_version": True,
            "pmids_in_articles": True,
        }
        assert tables_metadata(result)["rows_articles"] == expected_articles[name]
    meta_1335 = tables_metadata(result)
    assert meta_1335["rows_deletions"] == 6
    assert meta_1335["rows_citations"] == 1063

    folded = run(instance, tmp_path, mirror, [corpus], RELEASE)
    assert folded.success
    assert checks_of(folded) == {
        "one_row_per_pmid": True,
        "no_deleted_pmid": True,
        "polars_recount": True,
        "edge_sources_in_articles": True,
    }
    articles = read_corpus(Lake(str(tmp_path / "lake")).scoped(release=RELEASE), "articles")
    pmids = articles.column("pmid").to_pylist()
    assert len(pmids) == len(set(pmids))


def test_md5_mismatch_fails_alone_and_leaves_nothing(tmp_path, mirror) -> None:
    instance = new_instance()
    good = run(instance, tmp_path, mirror, ["pubmed_xml", "pubmed_tables"], "pubmed26n1334")
    assert good.success
    before = (tmp_path / "lake/tables/articles/pubmed26n1334.parquet").read_bytes()

    bad_file = mirror / "updatefiles" / "pubmed26n1335.xml.gz"
    data = bytearray(bad_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad_file.write_bytes(bytes(data))
    bad = run(instance, tmp_path, mirror, ["pubmed_xml", "pubmed_tables"], "pubmed26n1335")
    assert not bad.success
    message = failure_message(bad)
    assert "pubmed26n1335.xml.gz: md5 mismatch" in message
    assert not list((tmp_path / "lake").rglob("pubmed26n1335*"))
    assert (tmp_path / "lake/tables/articles/pubmed26n1334.parquet").read_bytes() == before

    # the fold refuses to run on partial input
    folded = run(instance, tmp_path, mirror, [corpus], RELEASE)
    assert not folded.success
    message = failure_message(folded)
    assert "pubmed26n1335" in message and "not downloaded" in message


def test_broken_xml_with_right_md5_fails_in_parse_naming_the_file(tmp_path, mirror) -> None:
    instance = new_instance()
    target = mirror / "updatefiles" / "pubmed26n1335.xml.gz"
    text = gzip.decompress(target.read_bytes())
    broken = gzip.compress(text[: len(text) // 2])
    target.write_bytes(broken)
    import hashlib

    (mirror / "updatefiles" / "pubmed26n1335.xml.gz.md5").write_text(
        f"MD5(pubmed26n1335.xml.gz)= {hashlib.md5(broken).hexdigest()}\n"
    )
    result = run(instance, tmp_path, mirror, ["pubmed_xml", "pubmed_tables"], "pubmed26n1335")
    assert not result.success
    message = failure_message(result)
    assert message.startswith("pubmed26n1335")
    assert not list((tmp_path / "lake" / "tables").rglob("pubmed26n1335*"))


def test_the_source_is_observed_only_where_an_md5_is_new_or_changed(mirror) -> None:
    """A file's md5 is recorded the first time it is observed and again only when it
    changes at the source: an observation of an unchanged release records nothing (the
    instance does not grow by one event per file per build), and the latest observation of
    each file stays the one Dagster's staleness compares."""
    from kg_platform.assets.partitions import pubmed_files
    from kg_platform.assets.pubmed import observe_pubmed_source, pubmed_source_file
    from kg_platform.orchestration import records as versions

    instance = new_instance()
    assert instance.get_dynamic_partitions(pubmed_files.name) == FILES
    defs = dg.Definitions(
        assets=[pubmed_source_file],
        jobs=[observe_pubmed_source],
        resources={"pubmed_source": PubmedSourceResource(base=str(mirror))},
    )
    job = defs.resolve_job_def("observe_pubmed_source")

    def observe() -> dict[str, str]:
        result = job.execute_in_process(instance=instance)
        assert result.success
        return {
            e.partition: e.asset_observation_data.asset_observation.data_version
            for e in result.get_asset_observation_events()
        }

    published = {
        "pubmed26n1334": "3cf53ba34ff73126e42d1d8391330e73",
        "pubmed26n1335": "88b74979343252faa848a06d7c6aa3ea",
    }
    assert {f: md5_of(mirror, f) for f in FILES} == published
    assert observe() == published
    assert observe() == {}
    assert versions.latest_observed(instance, "pubmed_source_file") == published
    # NLM republishes n1335: only it is observed again
    update = mirror / "updatefiles" / "pubmed26n1335.xml.gz"
    update.write_bytes((mirror / "baseline" / "pubmed26n1334.xml.gz").read_bytes())
    (mirror / "updatefiles" / "pubmed26n1335.xml.gz.md5").write_text(
        f"MD5(pubmed26n1335.xml.gz)= {published['pubmed26n1334']}\n"
    )
    assert observe() == {"pubmed26n1335": published["pubmed26n1334"]}
    assert versions.latest_observed(instance, "pubmed_source_file") == {
        "pubmed26n1334": published["pubmed26n1334"],
        "pubmed26n1335": published["pubmed26n1334"],
    }


def md5_of(mirror: Path, name: str) -> str:
    [path] = mirror.rglob(f"{name}.xml.gz.md5")
    return path.read_text().split("= ")[1].strip()


def repost(mirror: Path, name: str, data: bytes) -> None:
    """The source publishes new bytes for ``name``, with their md5."""
    import hashlib

    [path] = mirror.rglob(f"{name}.xml.gz")
    path.write_bytes(data)
    Path(f"{path}.md5").write_text(f"MD5({path.name})= {hashlib.md5(data).hexdigest()}\n")


def test_a_gz_that_is_not_gzip_is_refused_naming_it(tmp_path, mirror) -> None:
    """Plain XML under a `.gz` name, with its right md5: the download fails naming the file
    and what it starts with, and the raw file from before stays as it was."""
    instance = new_instance()
    name = "pubmed26n1335"
    assert run(instance, tmp_path, mirror, ["pubmed_xml", "pubmed_tables"], name).success
    raw = tmp_path / "lake/raw/pubmed/26/updatefiles/pubmed26n1335.xml.gz"
    good, before = raw.read_bytes(), raw.stat()
    plain = gzip.decompress(good)
    repost(mirror, name, plain)
    result = run(instance, tmp_path, mirror, ["pubmed_xml", "pubmed_tables"], name)
    assert not result.success
    assert failure_message(result) == (
        f"{name}.xml.gz: not gzip (it starts with {plain[:16]!r}, not gzip's bytes 1f 8b); "
        "the lake keeps what it had"
    )
    assert raw.read_bytes() == good
    assert (raw.stat().st_ino, raw.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert sorted(p.name for p in (tmp_path / "lake/raw").rglob("*") if p.is_file()) == [raw.name]


def test_a_repost_that_does_not_parse_keeps_the_last_raw_file_that_did(tmp_path, mirror) -> None:
    """NLM reposts a file whose md5 matches but which does not parse: the new download waits
    at its pending key, the raw key keeps the version that parsed (and its tables stay),
    a second build fails the same way without downloading again, and a later good repost
    parses and replaces both."""
    instance = new_instance()
    name = "pubmed26n1335"
    assert run(instance, tmp_path, mirror, ["pubmed_xml", "pubmed_tables"], name).success
    lake = tmp_path / "lake"
    raw = lake / "raw/pubmed/26/updatefiles/pubmed26n1335.xml.gz"
    pending = lake / "raw/pubmed/26/pending/updatefiles/pubmed26n1335.xml.gz"
    articles = lake / "tables/articles/pubmed26n1335.parquet"
    good, before, tables = raw.read_bytes(), raw.stat(), articles.read_bytes()
    text = gzip.decompress(good)
    broken = gzip.compress(text[: len(text) // 2], mtime=0)
    repost(mirror, name, broken)
    for attempt in range(2):
        result = run(instance, tmp_path, mirror, ["pubmed_xml", "pubmed_tables"], name)
        assert not result.success
        assert failure_message(result).startswith(f"{name}.xml.gz: ")
        assert raw.read_bytes() == good
        assert (raw.stat().st_ino, raw.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
        assert pending.read_bytes() == broken
        assert articles.read_bytes() == tables
        [xml] = [
            m
            for m in result.asset_materializations_for_node("pubmed_file_batch")
            if m.asset_key == dg.AssetKey("pubmed_xml")
        ]
        assert xml.metadata["key"].value == "raw/pubmed/26/pending/updatefiles/pubmed26n1335.xml.gz"
        assert xml.metadata["skipped_already_verified"].value is (attempt == 1)

    # a good repost: the same records, other bytes
    fixed = gzip.compress(text, compresslevel=1, mtime=0)
    assert fixed != good
    repost(mirror, name, fixed)
    assert run(instance, tmp_path, mirror, ["pubmed_xml", "pubmed_tables"], name).success
    assert raw.read_bytes() == fixed
    assert not pending.exists()
    assert articles.exists()
