"""`kg build` end to end on the real 2026 mirror: one Dagster backfill through the persistent
instance (the runs the UI shows), runs in parallel, only what is missing, failed or stale
redone, one line per failure, and a summary whose counts come from the instance."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import dagster as dg

from kg_platform.cli import main
from kg_platform_tests.conftest import require_reference

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
    from dagster._core.storage.dagster_run import RunsFilter

    records = instance.get_run_records(RunsFilter())
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
    for file in ("pubmed26n1334", "pubmed26n1335"):
        assert re.search(rf"\[[12]\] pubmed_tables\+pubmed_xml \[{file}\]: ok .* checks 4/4", out)
    assert re.search(
        r"\[3\] corpus \[pubmed26\]: ok .* checks 4/4 passed  files \[#{20}\] 2/2", out
    )
    assert "files: 2; release pubmed26, MeSH 2024" in out
    assert f"{lake}/corpus/pubmed26/articles.parquet: 60 rows" in out
    assert f"{lake}/corpus/pubmed26/citations.parquet: 1,349 rows" in out
    assert "runs: 3 succeeded, 0 failed; checks: 12 passed, 0 failed" in out
    assert not (lake / "corpus" / "articles.parquet").exists()
    # the same history is in the persistent instance the UI opens: one backfill, its runs
    instance = dg.DagsterInstance.from_config(str(kg_home / "dagster"))
    assert instance.get_dynamic_partitions("pubmed_files") == ["pubmed26n1334", "pubmed26n1335"]
    assert instance.get_dynamic_partitions("pubmed_releases") == ["pubmed26"]
    [backfill] = instance.get_backfills()
    assert backfill.status.value == "COMPLETED_SUCCESS"
    assert f"backfill {backfill.backfill_id} submitted" in out
    files = runs_of(instance, "pubmed_tables")
    assert sorted(r.dagster_run.tags["dagster/partition"] for r in files) == [
        "pubmed26n1334", "pubmed26n1335",
    ]  # fmt: skip
    assert {r.dagster_run.tags["dagster/backfill"] for r in files} == {backfill.backfill_id}
    # the backfill queued both file runs at once, before either ended, behind a run queue
    # of --jobs 2 (whether they then overlap is the machine's timing: benchmarks/build.py)
    first, second = sorted(files, key=lambda r: r.create_timestamp)
    assert second.create_timestamp.timestamp() < first.end_time
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
    assert "runs: 3 succeeded, 0 failed; checks: 12 passed, 0 failed" in out
    assert {p: b for p, (_, b) in stamps(lake, "*").items()} == {
        p: b for p, (_, b) in before.items()
    }


def test_a_failed_file_fixed_at_the_source_redoes_only_that_file(kg_home, tmp_path, capsys) -> None:
    """The issue's case: truncate one file of a copy of the mirror, build, restore the file,
    build again: the second build redoes that file and the fold, nothing else."""
    mirror = tmp_path / "mirror"
    shutil.copytree(require_reference("pubmed", "mirror"), mirror)
    bad = mirror / "updatefiles" / "pubmed26n1335.xml.gz"
    good = bad.read_bytes()
    bad.chmod(0o644)
    bad.write_bytes(good[:30_000])
    md5 = bad.with_name(bad.name + ".md5")
    md5.chmod(0o644)
    original_md5 = md5.read_text()
    import hashlib

    md5.write_text(f"MD5({bad.name})= {hashlib.md5(good[:30_000]).hexdigest()}\n")
    assert build_pubmed_stage(source=mirror) == 1
    out = capsys.readouterr().out
    cause = (
        "pubmed26n1335.xml.gz: gzip stream is truncated or corrupt: Compressed file ended "
        "before the end-of-stream marker was reached"
    )
    assert f"  error: {cause}" in out
    assert f"  failed: pubmed_tables+pubmed_xml [pubmed26n1335]: {cause}" in out
    assert "  not run, upstream failed: corpus [pubmed26]" in out
    assert "runs: 1 succeeded, 1 failed; checks: 4 passed, 0 failed" in out
    assert "Traceback" not in out and out.count(cause) == 2
    [log] = re.findall(r"tracebacks: (\S+)", out)
    text = Path(log).read_text()
    assert "== run " in text and "pubmed_tables+pubmed_xml [pubmed26n1335]: FAILURE" in text
    assert "Stack Trace" in text or "Traceback" in text or 'File "' in text

    lake = kg_home / "lake"
    kept = stamps(lake, "pubmed26n1334")
    instance = dg.DagsterInstance.from_config(str(kg_home / "dagster"))
    runs_before = {r.dagster_run.run_id for r in instance.get_run_records()}
    bad.write_bytes(good)
    md5.write_text(original_md5)
    assert build_pubmed_stage(source=mirror) == 0
    out = capsys.readouterr().out
    assert "3 of 5 asset partitions to materialise; the rest are fresh" in out
    assert "runs: 2 succeeded, 0 failed; checks: 8 passed, 0 failed" in out
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
            r.tags["dagster/partition"],
        )
        for r in new
    ) == [("corpus", "pubmed26"), ("pubmed_tables+pubmed_xml", "pubmed26n1335")]
    # the good file's tables were not rewritten
    assert stamps(lake, "pubmed26n1334") == kept
    assert f"{lake}/corpus/pubmed26/articles.parquet: 60 rows" in out


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
