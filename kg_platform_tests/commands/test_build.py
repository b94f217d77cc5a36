"""`kg build` end to end on the real 2026 mirror: partitions added, progress lines, summary."""

from __future__ import annotations

import re
from dataclasses import replace

import dagster as dg

from kg_platform.cli import main
from kg_platform.pubmed import tables as pubmed_tables_domain
from kg_platform_tests.conftest import require_reference

PUBMED_STAGE = "key:pubmed_xml or key:pubmed_tables or key:corpus"


def build_pubmed_stage(*extra: str) -> int:
    return main(
        [
            "build",
            "--pubmed-source",
            str(require_reference("pubmed", "mirror")),
            "--mesh-source",
            str(require_reference("mesh")),
            "--select",
            PUBMED_STAGE,
            *extra,
        ]
    )


def test_build_pubmed_stage_into_persistent_instance(kg_home, capsys) -> None:
    mirror = require_reference("pubmed", "mirror")
    code = build_pubmed_stage()
    out = capsys.readouterr().out
    assert code == 0, out
    lake = kg_home / "lake"
    assert (
        f"source {mirror}: 2 files (pubmed26n1334 .. pubmed26n1335); "
        f"release pubmed26, MeSH 2024; lake {lake}" in out
    )
    assert re.search(r"\[1/3\] pubmed_tables\+pubmed_xml \[pubmed26n1334\]: ok .* checks 4/4", out)
    assert re.search(r"\[2/3\] pubmed_tables\+pubmed_xml \[pubmed26n1335\]: ok .* checks 4/4", out)
    assert re.search(r"\[3/3\] corpus \[pubmed26\]: ok .* checks 4/4 passed", out)
    assert "files: 2; release pubmed26, MeSH 2024" in out
    assert f"{lake}/corpus/pubmed26/articles.parquet: 60 rows" in out
    assert f"{lake}/corpus/pubmed26/citations.parquet: 1,349 rows" in out
    assert "checks: 12 passed, 0 failed" in out
    assert (lake / "corpus" / "pubmed26" / "articles.parquet").is_file()
    assert not (lake / "corpus" / "articles.parquet").exists()
    # the same history is in the persistent instance the UI opens
    instance = dg.DagsterInstance.from_config(str(kg_home / "dagster"))
    assert instance.get_dynamic_partitions("pubmed_files") == ["pubmed26n1334", "pubmed26n1335"]
    assert instance.get_dynamic_partitions("pubmed_releases") == ["pubmed26"]
    assert instance.get_dynamic_partitions("mesh_years") == ["2024"]
    corpus = instance.get_latest_materialization_event(dg.AssetKey("corpus"))
    assert corpus is not None and corpus.dagster_event.partition == "pubmed26"
    assert (kg_home / "sources.json").exists()


def test_failed_blocking_check_fails_the_step_and_publishes_nothing(
    kg_home, capsys, monkeypatch
) -> None:
    assert build_pubmed_stage() == 0
    capsys.readouterr()
    lake = kg_home / "lake"
    tables_1335 = lake / "tables" / "articles" / "pubmed26n1335.parquet"
    corpus_articles = lake / "corpus" / "pubmed26" / "articles.parquet"
    before = tables_1335.read_bytes(), corpus_articles.read_bytes()
    # a file partition of a previous source: the next build drops it before folding
    dg.DagsterInstance.from_config(str(kg_home / "dagster")).add_dynamic_partitions(
        "pubmed_files", ["pubmed25n1200"]
    )

    real_check_tables = pubmed_tables_domain.check_tables

    def recount_fails_for_1335(tables, recount):
        checks = real_check_tables(tables, recount)
        if tables["articles"].num_rows and "pubmed26n1335" in set(
            tables["articles"].column("file").to_pylist()
        ):
            return [
                replace(c, passed=False, details="articles: xml 30, written 29")
                if c.name == "recount_matches_xml"
                else c
                for c in checks
            ]
        return checks

    monkeypatch.setattr(pubmed_tables_domain, "check_tables", recount_fails_for_1335)
    code = build_pubmed_stage()
    out = capsys.readouterr().out
    assert code == 1, out
    assert "  1 file partitions of another source dropped (first: pubmed25n1200)" in out
    assert re.search(r"\[1/3\] pubmed_tables\+pubmed_xml \[pubmed26n1334\]: ok .* checks 4/4", out)
    assert re.search(
        r"\[2/3\] pubmed_tables\+pubmed_xml \[pubmed26n1335\]: FAILED .* checks 3/4 passed", out
    )
    assert "[3/3] corpus [pubmed26]: skipped, upstream failed (pubmed_tables)" in out
    assert "checks: 7 passed, 1 failed" in out
    assert (
        "  failed: pubmed_tables+pubmed_xml [pubmed26n1335]: pubmed26n1335.xml.gz: blocking "
        "check failed: recount_matches_xml (articles: xml 30, written 29); the published "
        "pubmed_tables is unchanged" in out
    )
    # nothing published: the file's tables and the corpus are the previous build's
    assert (tables_1335.read_bytes(), corpus_articles.read_bytes()) == before
    # the failed evaluation is recorded, for that partition, in the persistent instance
    instance = dg.DagsterInstance.from_config(str(kg_home / "dagster"))
    records = instance.get_event_records(
        dg.EventRecordsFilter(event_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
    )
    evaluations = [r.event_log_entry.dagster_event.event_specific_data for r in records]
    failed = [(e.check_name, e.partition) for e in evaluations if not e.passed]
    assert failed == [("recount_matches_xml", "pubmed26n1335")]
    latest = instance.get_latest_materialization_event(
        dg.AssetKey("pubmed_tables")
    ).dagster_event.partition
    assert latest == "pubmed26n1334"
    assert instance.get_dynamic_partitions("pubmed_files") == ["pubmed26n1334", "pubmed26n1335"]


def test_build_rejects_bad_inputs_with_clear_errors(kg_home, tmp_path, capsys) -> None:
    missing = tmp_path / "no-such-mirror"
    assert main(["build", "--pubmed-source", str(missing), "--mesh-source", "x"]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err
    assert main(["build", "--pubmed-source", str(tmp_path), "--files", "0"]) == 2
    assert "--files 0: must be at least 1" in capsys.readouterr().err
