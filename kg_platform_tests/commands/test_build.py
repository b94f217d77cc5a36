"""`kg build` end to end on the real 2026 mirror: one Dagster backfill through the persistent
instance (the runs the UI shows), runs in parallel, only what is missing, failed or stale
redone, one line per failure, and a summary whose counts come from the instance.

The first test's builds launch each run in its own process, as deployed; the others' builds
run their runs in the test's process (support/launcher.py): what they check is what the
builds plan, record and make."""

from __future__ import annotations

import gzip
import hashlib
import re
import shutil
from pathlib import Path

import dagster as dg

from kg_platform.assets.checks import data_version
from kg_platform.assets.partitions import pubmed_files
from kg_platform.cli import main
from kg_platform.orchestration.runs import partition_label
from kg_platform.pubmed.tables import table_key
from kg_platform.schemas import PUBMED_TABLES
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.support.launcher import in_process_runs

PUBMED_STAGE = "key:pubmed_xml or key:pubmed_tables or key:corpus"


def build_pubmed_stage(*extra: str, source: Path | None = None) -> int:
    return main(
        [
            "build",
            "--pubmed-source",
            str(source or require_reference("pubmed", "mirror")),
            "--mesh-source",
            str(require_reference("mesh")),
            "--select",
            PUBMED_STAGE,
            "--jobs",
            "2",
            *extra,
        ]
    )


def runs_of(instance, asset: str) -> list:

    records = instance.get_run_records(dg.RunsFilter())
    return [r for r in records if dg.AssetKey(asset) in (r.dagster_run.asset_selection or ())]


def stamps(lake: Path, file: str) -> dict:
    return {
        p: (p.stat().st_mtime_ns, p.read_bytes())
        for p in (lake / "tables").rglob(f"{file}.parquet")
    }


def test_build_pubmed_stage_into_persistent_instance(
    kg_home, tmp_path, capsys, monkeypatch
) -> None:
    mirror = require_reference("pubmed", "mirror")
    # the build chooses its parse pool's width itself (the suite's conftest sets it to 1)
    monkeypatch.delenv("KG_PARSE_WORKERS", raising=False)
    # --lake wins over KG_LAKE in every run the build launches, not only in the CLI
    decoy = tmp_path / "decoy-lake"
    monkeypatch.setenv("KG_LAKE", str(decoy))
    code = build_pubmed_stage("--lake", str(kg_home / "lake"))
    assert not decoy.exists()
    out = capsys.readouterr().out
    assert code == 0, out
    lake = kg_home / "lake"
    assert (
        f"source {mirror}: 2 files (pubmed26n1334 .. pubmed26n1335); "
        f"release pubmed26, MeSH 2024; lake {lake}" in out
    )
    assert "5 of 5 asset partitions to materialise; the rest are fresh; up to 2 runs at once" in out
    assert re.search(
        r"\[1\] pubmed_tables\+pubmed_xml \[pubmed26n1334\.\.pubmed26n1335\]: ok in [\d.]+s, "
        r"2 files recorded, checks 8/8 passed  files \[#{20}\] 2/2",
        out,
    )
    assert re.search(
        r"\[2\] corpus \[pubmed26\]: ok .* checks 4/4 passed  files \[#{20}\] 2/2", out
    )
    assert "files: 2; release pubmed26, MeSH 2024" in out
    assert f"{lake}/corpus/pubmed26/articles: 60 rows" in out
    assert f"{lake}/corpus/pubmed26/citations: 1,349 rows" in out
    assert "runs: 2 succeeded, 0 failed; checks: 12 passed, 0 failed" in out
    assert "file partitions: 2 recorded, 0 failed" in out
    assert not (lake / "corpus" / "articles.parquet").exists()
    # the same history is in the persistent instance the UI opens: one backfill, its runs
    instance = dg.DagsterInstance.from_config(str(kg_home / "dagster"))
    assert instance.get_dynamic_partitions("pubmed_files") == ["pubmed26n1334", "pubmed26n1335"]
    assert instance.get_dynamic_partitions("pubmed_releases") == ["pubmed26"]
    [backfill] = instance.get_backfills()
    assert backfill.status.value == "COMPLETED_SUCCESS"
    assert f"backfill {backfill.backfill_id} submitted" in out
    # both files in one run over their range, each file still its own partition: its own
    # materialisation, data version (its tables' content) and four check rows
    [run] = runs_of(instance, "pubmed_tables")
    assert partition_label(run.dagster_run.tags) == "pubmed26n1334..pubmed26n1335"
    assert run.dagster_run.tags["dagster/backfill"] == backfill.backfill_id
    assert versions_by_file(instance, run.dagster_run.run_id) == {
        f: data_version(Lake(str(lake)).digest(table_keys(f))).value
        for f in ("pubmed26n1334", "pubmed26n1335")
    }
    assert check_rows(instance, run.dagster_run.run_id) == {
        (f, c, True)
        for f in ("pubmed26n1334", "pubmed26n1335")
        for c in ("schema", "recount_matches_xml", "unique_pmid_version", "pmids_in_articles")
    }
    assert "max_concurrent_runs: 2" in (kg_home / "dagster" / "dagster.yaml").read_text()
    corpus = instance.get_latest_materialization_event(dg.AssetKey("corpus"))
    assert corpus is not None and corpus.dagster_event.partition == "pubmed26"

    # nothing is missing or stale: nothing runs; --force redoes the selection, same bytes
    before = stamps(lake, "*")
    assert build_pubmed_stage() == 0
    out = capsys.readouterr().out
    assert "0 of 5 asset partitions to materialise; the rest are fresh" in out
    assert "runs: 0 succeeded, 0 failed; checks: 0 passed, 0 failed" in out
    assert len(instance.get_backfills()) == 1
    assert build_pubmed_stage("--force") == 0
    out = capsys.readouterr().out
    assert "5 of 5 asset partitions to materialise (--force)" in out
    assert "runs: 2 succeeded, 0 failed; checks: 12 passed, 0 failed" in out
    assert {p: b for p, (_, b) in stamps(lake, "*").items()} == {
        p: b for p, (_, b) in before.items()
    }


def table_keys(file: str) -> list[str]:
    return [table_key(t, file) for t in sorted(PUBMED_TABLES)]


def versions_by_file(instance, run_id: str) -> dict[str, str]:
    """file -> data version of the pubmed_tables materialisations a run recorded."""
    records = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
    ).records
    return {
        r.event_log_entry.dagster_event.partition: r.event_log_entry.asset_materialization.tags[
            "dagster/data_version"
        ]
        for r in records
        if r.event_log_entry.dagster_event.asset_key == dg.AssetKey("pubmed_tables")
    }


def check_rows(instance, run_id: str) -> set[tuple[str, str, bool]]:
    """(partition, check, passed) of each check evaluation a run recorded."""
    records = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
    ).records
    return {
        (e.partition, e.check_name, e.passed)
        for e in (r.event_log_entry.dagster_event.event_specific_data for r in records)
    }


def add_update_file(mirror: Path, name: str, data: bytes) -> None:
    """``data`` as update file ``name`` of ``mirror``, with its .md5 as NLM writes it."""
    path = mirror / "updatefiles" / f"{name}.xml.gz"
    if path.exists():
        path.chmod(0o644)
    path.write_bytes(data)
    md5 = path.with_name(path.name + ".md5")
    if md5.exists():
        md5.chmod(0o644)
    md5.write_text(f"MD5({path.name})= {hashlib.md5(data).hexdigest()}\n")


def test_bad_files_in_a_batch_fail_alone_and_only_they_are_redone(
    kg_home, tmp_path, capsys
) -> None:
    """The mirror's two files plus a truncated file and a file with a record twice, in one
    run: the good files are recorded with their data versions and check rows, the bad ones
    are FAILED partitions (the duplicated one with its failed checks) and leave nothing in
    the lake; once restored at the source, the next build redoes exactly those two and the
    fold, as the instance records."""
    in_process_runs(kg_home)
    mirror = tmp_path / "mirror"
    shutil.copytree(require_reference("pubmed", "mirror"), mirror)
    good_1334 = (mirror / "baseline" / "pubmed26n1334.xml.gz").read_bytes()
    good_1335 = (mirror / "updatefiles" / "pubmed26n1335.xml.gz").read_bytes()
    add_update_file(mirror, "pubmed26n1336", good_1335[:30_000])
    xml = gzip.decompress(good_1334)
    start = xml.index(b"<PubmedArticle>")
    end = xml.index(b"</PubmedArticle>") + len(b"</PubmedArticle>")
    add_update_file(mirror, "pubmed26n1337", gzip.compress(xml[:end] + xml[start:]))
    assert build_pubmed_stage(source=mirror) == 1
    out = capsys.readouterr().out
    truncated = (
        "pubmed26n1336.xml.gz: gzip stream is truncated or corrupt: Compressed file ended "
        "before the end-of-stream marker was reached"
    )
    assert re.search(
        r"\[1\] pubmed_tables\+pubmed_xml \[pubmed26n1334\.\.pubmed26n1337\]: failure in "
        r"[\d.]+s, 2 files recorded, 2 failed, checks 10/12 passed  files \[#{20}\] 4/4",
        out,
    )
    assert f"  error: {truncated}" in out
    assert f"  failed: pubmed_tables+pubmed_xml [pubmed26n1336]: {truncated}" in out
    duplicated = re.search(
        r"  failed: pubmed_tables\+pubmed_xml \[pubmed26n1337\]: (pubmed26n1337\.xml\.gz: "
        r"blocking check failed: schema \(articles: duplicated \(pmid, version\) pmid \d+, "
        r"version 1 \(2 rows\).*\); unique_pmid_version \(1 duplicated \(pmid, version\)\); "
        r"the published pubmed_tables\[pubmed26n1337\] is unchanged)\n",
        out,
    )
    assert duplicated, out
    assert f"  error: {duplicated.group(1)}" in out
    assert "  not run, upstream failed: corpus [pubmed26]" in out
    assert "runs: 0 succeeded, 1 failed; checks: 10 passed, 2 failed" in out
    assert "file partitions: 2 recorded, 2 failed" in out
    assert "Traceback" not in out and out.count(truncated) == 2
    [log] = re.findall(r"tracebacks: (\S+)", out)
    text = Path(log).read_text()
    assert "pubmed_tables+pubmed_xml [pubmed26n1334..pubmed26n1337]: FAILURE" in text

    lake = kg_home / "lake"
    instance = dg.DagsterInstance.from_config(str(kg_home / "dagster"))
    [run] = runs_of(instance, "pubmed_tables")
    files = ["pubmed26n1334", "pubmed26n1335", "pubmed26n1336", "pubmed26n1337"]
    status = instance.get_status_by_partition(dg.AssetKey("pubmed_tables"), files, pubmed_files)
    assert {f: s.value for f, s in status.items()} == {
        "pubmed26n1334": "MATERIALIZED",
        "pubmed26n1335": "MATERIALIZED",
        "pubmed26n1336": "FAILED",
        "pubmed26n1337": "FAILED",
    }
    assert sorted(versions_by_file(instance, run.dagster_run.run_id)) == files[:2]
    rows = check_rows(instance, run.dagster_run.run_id)
    assert {r for r in rows if r[0] == "pubmed26n1337"} == {
        ("pubmed26n1337", "schema", False),
        ("pubmed26n1337", "recount_matches_xml", True),
        ("pubmed26n1337", "unique_pmid_version", False),
        ("pubmed26n1337", "pmids_in_articles", True),
    }
    assert not [r for r in rows if r[0] == "pubmed26n1336"]  # its parse never finished
    assert not list((lake / "tables").rglob("pubmed26n133[67].parquet"))
    kept = stamps(lake, "pubmed26n133[45]")

    runs_before = {r.dagster_run.run_id for r in instance.get_run_records()}
    add_update_file(mirror, "pubmed26n1336", good_1335)
    add_update_file(mirror, "pubmed26n1337", good_1334)
    assert build_pubmed_stage(source=mirror) == 0
    out = capsys.readouterr().out
    assert "5 of 9 asset partitions to materialise; the rest are fresh" in out
    assert "runs: 2 succeeded, 0 failed; checks: 12 passed, 0 failed" in out
    assert "file partitions: 2 recorded, 0 failed" in out
    new = [
        r.dagster_run
        for r in instance.get_run_records()
        if r.dagster_run.run_id not in runs_before and "dagster/backfill" in r.dagster_run.tags
    ]
    # besides the backfill's runs, one in-process observation of the source's md5s
    observations = [
        r.dagster_run.job_name
        for r in instance.get_run_records()
        if r.dagster_run.run_id not in runs_before and "dagster/backfill" not in r.dagster_run.tags
    ]
    assert observations == ["observe_pubmed_source"]
    assert sorted(
        (
            "+".join(sorted(k.to_user_string() for k in r.asset_selection)),
            partition_label(r.tags),
        )
        for r in new
    ) == [("corpus", "pubmed26"), ("pubmed_tables+pubmed_xml", "pubmed26n1336..pubmed26n1337")]
    [redo] = [r for r in new if r.tags.get("dagster/partition") != "pubmed26"]
    assert sorted(versions_by_file(instance, redo.run_id)) == files[2:]
    # the good files' tables were not rewritten
    assert stamps(lake, "pubmed26n133[45]") == kept
    # the restored files re-issue the records of the first two: the fold keeps one per PMID
    assert f"{lake}/corpus/pubmed26/articles: 60 rows" in out


def test_build_rejects_bad_inputs_with_clear_errors(kg_home, tmp_path, capsys) -> None:
    missing = tmp_path / "no-such-mirror"
    assert main(["build", "--pubmed-source", str(missing), "--mesh-source", "x"]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err
    # the PubMed source is validated before the MeSH fallback is downloaded from PyPI
    assert main(["build", "--pubmed-source", str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err
    assert not (kg_home / "mesh").exists() and not (kg_home / "dagster").exists()
    assert main(["build", "--pubmed-source", str(tmp_path), "--files", "0"]) == 2
    assert "--files 0: must be at least 1" in capsys.readouterr().err
    assert main(["build", "--pubmed-source", str(tmp_path), "--jobs", "0"]) == 2
    assert "--jobs 0: must be at least 1" in capsys.readouterr().err


def test_a_release_never_waits_on_another_releases_failed_file(kg_home, tmp_path, capsys) -> None:
    """Release scoping (file keys are one source's, `corpus` depends on them all): a source
    of pubmed25 whose second file is truncated leaves pubmed25n1335 FAILED; the next build,
    of the pubmed26 mirror on the same instance, drops pubmed25's keys, so corpus[pubmed26]
    is neither held back nor failed by that file, and its backfill runs only pubmed26."""
    in_process_runs(kg_home)
    old = tmp_path / "pubmed25"
    mirror = require_reference("pubmed", "mirror")
    for sub, name in (("baseline", "pubmed26n1334"), ("updatefiles", "pubmed26n1335")):
        data = (mirror / sub / f"{name}.xml.gz").read_bytes()
        (old / sub).mkdir(parents=True)
        if name.endswith("1335"):
            data = data[:30_000]
        new_name = name.replace("pubmed26", "pubmed25")
        (old / sub / f"{new_name}.xml.gz").write_bytes(data)
        (old / sub / f"{new_name}.xml.gz.md5").write_text(
            f"MD5({new_name}.xml.gz)= {hashlib.md5(data).hexdigest()}\n"
        )
    assert build_pubmed_stage(source=old) == 1
    out = capsys.readouterr().out
    assert "file partitions: 1 recorded, 1 failed" in out
    instance = dg.DagsterInstance.from_config(str(kg_home / "dagster"))
    status = instance.get_status_by_partition(
        dg.AssetKey("pubmed_tables"), ["pubmed25n1334", "pubmed25n1335"], pubmed_files
    )
    assert {f: s.value for f, s in status.items()} == {
        "pubmed25n1334": "MATERIALIZED",
        "pubmed25n1335": "FAILED",
    }

    assert build_pubmed_stage() == 0
    out = capsys.readouterr().out
    assert "  2 file partitions of another source dropped (first: pubmed25n1334)" in out
    assert "5 of 5 asset partitions to materialise; the rest are fresh" in out
    assert "runs: 2 succeeded, 0 failed; checks: 12 passed, 0 failed" in out
    assert instance.get_dynamic_partitions("pubmed_files") == ["pubmed26n1334", "pubmed26n1335"]
    backfill = instance.get_backfills()[0]  # newest first
    assert backfill.status.value == "COMPLETED_SUCCESS"
    runs = instance.get_runs(dg.RunsFilter(tags={"dagster/backfill": backfill.backfill_id}))
    assert sorted(partition_label(r.tags) for r in runs) == [
        "pubmed26",
        "pubmed26n1334..pubmed26n1335",
    ]
    assert f"{kg_home / 'lake'}/corpus/pubmed26/articles: 60 rows" in out
