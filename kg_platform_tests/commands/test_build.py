"""`kg build` end to end on the real 2026 mirror: partitions added, progress lines, summary."""

from __future__ import annotations

import re

import pytest

from kg_platform.cli import main
from kg_platform_tests.conftest import require_reference


@pytest.fixture
def kg_home(tmp_path, monkeypatch):
    monkeypatch.setenv("KG_HOME", str(tmp_path / "kg"))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    for var in ("KG_LAKE", "KG_CATALOG", "KG_PUBMED_SOURCE", "KG_MESH_SOURCE"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "kg"


def test_build_pubmed_stage_into_persistent_instance(kg_home, capsys) -> None:
    mirror = require_reference("pubmed", "mirror")
    code = main(
        [
            "build",
            "--pubmed-source",
            str(mirror),
            "--mesh-source",
            str(require_reference("mesh")),
            "--select",
            "key:pubmed_xml or key:pubmed_tables or key:corpus",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"source {mirror}: 2 files (pubmed26n1334 .. pubmed26n1335)" in out
    assert re.search(r"\[1/3\] pubmed_tables\+pubmed_xml \[pubmed26n1334\]: ok .* checks 4/4", out)
    assert re.search(r"\[3/3\] corpus: ok .* checks 4/4 passed", out)
    assert "corpus/articles.parquet: 60 rows" in out
    assert "corpus/citations.parquet: 1,349 rows" in out
    assert "checks: 12 passed, 0 failed" in out
    # the same history is in the persistent instance the UI opens
    import dagster as dg

    instance = dg.DagsterInstance.from_config(str(kg_home / "dagster"))
    assert instance.get_dynamic_partitions("pubmed_files") == ["pubmed26n1334", "pubmed26n1335"]
    assert instance.get_latest_materialization_event(dg.AssetKey("corpus")) is not None
    assert (kg_home / "sources.json").exists()


def test_build_rejects_bad_inputs_with_clear_errors(kg_home, tmp_path, capsys) -> None:
    missing = tmp_path / "no-such-mirror"
    assert main(["build", "--pubmed-source", str(missing), "--mesh-source", "x"]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err
    assert main(["build", "--pubmed-source", str(tmp_path), "--files", "0"]) == 2
    assert "--files 0: must be at least 1" in capsys.readouterr().err
