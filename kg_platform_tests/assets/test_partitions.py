"""Partitions end to end through `kg build` and the persistent instance: two releases side
by side, publication only after the checks, staleness per partition. The builds' runs run in
the test's process (support/launcher.py): what is checked here is what they make."""

from __future__ import annotations

import gzip
import hashlib
import re
import shutil
from pathlib import Path

import dagster as dg
import pytest

from kg_platform.cli import main
from kg_platform.storage.corpus import corpus_parts, corpus_rows
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference, use_kg_home
from kg_platform_tests.support.launcher import in_process_runs

SELECT = "key:pubmed_xml or key:pubmed_tables or key:corpus or key:mesh_tables or key:graph"


def lake_hashes(root: Path, *prefixes: str) -> dict[str, str]:
    """sha256 of every file under the given lake folders."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for prefix in prefixes
        for p in sorted((root / prefix).rglob("*"))
        if p.is_file()
    }


def build(*args: str) -> int:
    return main(["build", "--mesh-source", str(require_reference("mesh", "tsv")), *args])


@pytest.fixture(scope="module")
def two_releases(tmp_path_factory):
    """One folder, one instance, one lake: pubmed24's samples, then pubmed25's."""
    home = tmp_path_factory.mktemp("two") / "kg"
    with pytest.MonkeyPatch.context() as mp:
        use_kg_home(mp, home)
        in_process_runs(home)
        samples = require_reference("pubmed", "samples")
        assert build("--pubmed-source", str(samples / "pubmed24"), "--select", SELECT) == 0
        first = lake_hashes(home / "lake", "corpus/pubmed24", "graph/pubmed24")
        assert build("--pubmed-source", str(samples / "pubmed25"), "--select", SELECT) == 0
        yield home, first, mp


def test_two_releases_live_side_by_side(two_releases, capsys) -> None:
    home, first, mp = two_releases
    lake = home / "lake"
    # the second build left the first release's corpus and graph exactly as they were
    assert lake_hashes(lake, "corpus/pubmed24", "graph/pubmed24") == first
    assert sorted(p.name for p in (lake / "graph").iterdir()) == ["pubmed24", "pubmed25"]
    instance = dg.DagsterInstance.from_config(str(home / "dagster"))
    # file keys are the current source's; releases and MeSH years accumulate
    assert instance.get_dynamic_partitions("pubmed_files") == ["pubmed25n1274", "pubmed25n1275"]
    assert instance.get_dynamic_partitions("pubmed_releases") == ["pubmed24", "pubmed25"]
    assert instance.get_dynamic_partitions("mesh_years") == ["2024"]
    capsys.readouterr()
    for release in ("pubmed24", "pubmed25"):
        code = main(
            ["ask", "Is Gene Expression Regulation associated with Osteogenesis?", "--json",
             "--release", release, "--lake", str(lake)]
        )  # fmt: skip
        assert code == 0
        out = capsys.readouterr().out
        assert f'"release": "{release}"' in out and '"mesh_year": "2024"' in out


def test_both_graphs_answer_their_own_questions(two_releases, capsys) -> None:
    from kg_platform.answer.api import KnowledgeGraph
    from kg_platform.answer.examples import answerable_examples
    from kg_platform.storage.lake import Lake

    home, _, _ = two_releases
    answered = {}
    for release in ("pubmed24", "pubmed25"):
        kg = KnowledgeGraph.open(Lake(str(home / "lake")).scoped(release=release, mesh_year="2024"))
        questions = answerable_examples(kg)
        assert questions, release
        answer = kg.ask(questions[0])
        assert answer.verdict.answerable
        answered[release] = {e.path.terminal.pmid for e in answer.evidence}
    assert answered["pubmed24"].isdisjoint(answered["pubmed25"])


def keep_first_records(path: Path, n: int) -> None:
    """Cut a gzipped PubmedArticleSet to its first ``n`` records; rewrite its NLM .md5."""
    xml = gzip.decompress(path.read_bytes())
    cut = -1
    for _ in range(n + 1):
        cut = xml.index(b"<PubmedArticle>", cut + 1)
    path.write_bytes(gzip.compress(xml[:cut] + b"</PubmedArticleSet>\n"))
    digest = hashlib.md5(path.read_bytes()).hexdigest()
    Path(f"{path}.md5").write_text(f"MD5({path.name})= {digest}\n")


def test_changed_release_makes_only_its_graph_stale(two_releases, tmp_path) -> None:
    from kg_platform.definitions import build_definitions
    from kg_platform.orchestration.freshness import stale_resolver
    from kg_platform.settings import Settings

    home, _, mp = two_releases
    changed = tmp_path / "pubmed25"
    shutil.copytree(require_reference("pubmed", "samples", "pubmed25"), changed)
    keep_first_records(changed / "updatefiles" / "pubmed25n1275.xml.gz", 5)
    # pubmed25 again with a revised update file: a corpus with other content
    code = build(
        "--pubmed-source", str(changed), "--select",
        "key:pubmed_xml or key:pubmed_tables or key:corpus",
    )  # fmt: skip
    assert code == 0
    instance = dg.DagsterInstance.from_config(str(home / "dagster"))
    graph = build_definitions(Settings.load()).resolve_asset_graph()
    resolver = stale_resolver(instance, graph)
    key = dg.AssetKey("graph")
    status = {
        r: resolver.get_status(key, dg.MultiPartitionKey({"release": r, "mesh_year": "2024"}))
        for r in ("pubmed24", "pubmed25")
    }
    assert {r: s.name for r, s in status.items()} == {"pubmed24": "FRESH", "pubmed25": "STALE"}


def duplicate_first_record(path: Path) -> None:
    """Repeat the first <PubmedArticle> of a gzipped file and rewrite its NLM .md5."""
    xml = gzip.decompress(path.read_bytes())
    start = xml.index(b"<PubmedArticle>")
    end = xml.index(b"</PubmedArticle>") + len(b"</PubmedArticle>")
    xml = xml[:end] + xml[start:end] + xml[end:]
    path.write_bytes(gzip.compress(xml))
    digest = hashlib.md5(path.read_bytes()).hexdigest()
    Path(f"{path}.md5").write_text(f"MD5({path.name})= {digest}\n")


@pytest.fixture(scope="module")
def synthetic_then_mirror(tmp_path_factory):
    """One folder, two builds: a synthetic release in NLM's format (the demo's source)
    against MeSH 2023, then a copy of the real 2026 mirror against MeSH 2024, run from
    another working folder with only KG_REFERENCE_DATA telling where the reference data is.
    Yields the home, the mirror copy and the lake's hashes after the first build; the tests
    below read this state in file order, and the last one breaks the mirror copy."""
    from kg_platform.mesh.source import resolve_mesh_source
    from kg_platform.pubmed.synthetic import write_synthetic_release
    from kg_platform.settings import reference_data_dir

    base = tmp_path_factory.mktemp("synthetic_then_mirror")
    tsv = require_reference("mesh", "tsv")
    # the same thesaurus under a 2023 name: a second MeSH year partition
    mesh_2023 = base / "mesh2023"
    mesh_2023.mkdir()
    for kind in ("descriptors", "supplementary"):
        shutil.copy(tsv / f"mesh2024_{kind}.tsv.gz", mesh_2023 / f"mesh2023_{kind}.tsv.gz")
    synthetic = base / "synthetic"
    write_synthetic_release(
        synthetic,
        2_000,
        n_baseline_files=2,
        n_update_files=1,
        mesh_vocabulary=resolve_mesh_source(str(mesh_2023)).descriptor_vocabulary(),
    )
    mirror = base / "mirror"
    shutil.copytree(require_reference("pubmed", "mirror"), mirror)
    home = base / "kg"
    select = SELECT + " or key:grounding_index or key:grounding_report"
    args = ["build", "--select", select, "--pubmed-source"]
    with pytest.MonkeyPatch.context() as mp:
        use_kg_home(mp, home)
        in_process_runs(home)
        assert main([*args, str(synthetic), "--mesh-source", str(mesh_2023)]) == 0
        first = lake_hashes(home / "lake", "mesh/2023", "graph/pubmed26/2023", "reports/grounding")
        mp.setenv("KG_REFERENCE_DATA", str(reference_data_dir()))
        elsewhere = base / "elsewhere"
        elsewhere.mkdir()
        mp.chdir(elsewhere)
        assert main([*args, str(mirror), "--mesh-source", str(tsv)]) == 0
    yield home, mirror, first


def test_demo_source_then_the_mirror_each_mesh_year_beside_the_other(
    synthetic_then_mirror,
) -> None:
    """Both builds exit 0 (the fixture); the second left the first MeSH year's tables, graph
    and grounding report byte-identical, and the lake holds the mirror's release."""
    home, _, first = synthetic_then_mirror
    lake = home / "lake"
    assert any(k.startswith("graph/pubmed26/2023/") for k in first)
    assert lake_hashes(lake, "mesh/2023", "graph/pubmed26/2023") == {
        k: v for k, v in first.items() if not k.startswith("reports/")
    }
    reports = lake_hashes(lake, "reports/grounding")
    assert {k: v for k, v in reports.items() if "/2023/" in k} == {
        k: v for k, v in first.items() if k.startswith("reports/")
    }
    assert sorted({k.split("/")[3] for k in reports}) == ["2023", "2024"]
    instance = dg.DagsterInstance.from_config(str(home / "dagster"))
    assert instance.get_dynamic_partitions("pubmed_files") == ["pubmed26n1334", "pubmed26n1335"]
    assert instance.get_dynamic_partitions("mesh_years") == ["2023", "2024"]
    # the release's corpus is the mirror's now: its 60 articles in its five buckets' parts,
    # none of the synthetic ones (their parts removed by the refold)
    corpus = Lake(str(lake)).scoped(release="pubmed26")
    assert corpus_rows(corpus, "articles") == 60
    assert [k.rsplit("/", 1)[1] for k in corpus_parts(corpus, "articles")] == [
        f"part-{b:05d}.parquet" for b in (104, 157, 164, 165, 166)
    ]


def test_build_from_another_folder_with_reference_data_set(synthetic_then_mirror) -> None:
    """The mirror's build ran from a folder with no reference data beside it: the PubMedQA
    question set was found through KG_REFERENCE_DATA and graded against MeSH 2024."""
    home, _, _ = synthetic_then_mirror
    reports = sorted((home / "lake" / "reports" / "grounding").rglob("report.json"))
    assert [p.parent.relative_to(home / "lake").as_posix() for p in reports] == [
        "reports/grounding/pqal_dev400-0babc0cc/2023",
        "reports/grounding/pqal_dev400-0babc0cc/2024",
    ]


def test_rematerialising_one_file_leaves_the_others_byte_identical(
    synthetic_then_mirror, monkeypatch
) -> None:
    home, _, _ = synthetic_then_mirror
    use_kg_home(monkeypatch, home)
    lake = home / "lake"
    before = lake_hashes(lake, "tables", "corpus", "mesh", "graph")
    stamps = {p: p.stat().st_mtime_ns for p in (lake / "tables").rglob("*1335.parquet")}
    assert stamps
    from kg_platform.definitions import build_definitions
    from kg_platform.settings import Settings

    defs = build_definitions(Settings.load())
    instance = dg.DagsterInstance.from_config(str(home / "dagster"))
    result = dg.materialize(
        list(defs.assets),
        selection=["pubmed_tables"],
        partition_key="pubmed26n1334",
        instance=instance,
        resources=defs.resources,
    )
    assert result.success
    # same content for the file, and the other file's tables not even rewritten
    assert lake_hashes(lake, "tables", "corpus", "mesh", "graph") == before
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


def test_failed_blocking_check_leaves_the_last_good_output(
    synthetic_then_mirror, monkeypatch, capsys
) -> None:
    home, mirror, _ = synthetic_then_mirror
    use_kg_home(monkeypatch, home)
    lake = home / "lake"
    good = lake_hashes(lake, "tables", "corpus", "graph", "mesh")
    duplicate_first_record(mirror / "baseline" / "pubmed26n1334.xml.gz")
    capsys.readouterr()
    assert build("--pubmed-source", str(mirror), "--select", SELECT) == 1
    out = capsys.readouterr().out
    assert re.search(
        r"failed: pubmed_tables\+pubmed_xml \[pubmed26n1334\]: pubmed26n1334\.xml\.gz: "
        r"blocking check failed: .*unique_pmid_version \(1 duplicated \(pmid, version\)\)",
        out,
    ), out
    assert re.search(r"not run, upstream failed: corpus \[pubmed26\]", out), out
    # nothing published: tables, corpus, graph and MeSH are byte-identical to the good build
    assert lake_hashes(lake, "tables", "corpus", "graph", "mesh") == good
    assert list((lake / ".staging").iterdir()) == []
    # the instance holds the failed check for that partition, as the UI shows it
    instance = dg.DagsterInstance.from_config(str(home / "dagster"))
    record = instance.event_log_storage.get_latest_asset_check_execution_by_key(
        [dg.AssetCheckKey(dg.AssetKey("pubmed_tables"), "unique_pmid_version")]
    )[dg.AssetCheckKey(dg.AssetKey("pubmed_tables"), "unique_pmid_version")]
    evaluation = record.event.dagster_event.event_specific_data
    assert (evaluation.passed, evaluation.partition) == (False, "pubmed26n1334")
