"""An S3 lake end to end, against a real S3 server (moto on 127.0.0.1), configured only
through the environment: `kg build` of the reference mirror and the MeSH TSVs into
``s3://<bucket>/kg`` and, from the same sources, into a local folder; then `kg ask`,
`kg search` and every `kg eval` read the S3 lake. Both lakes hold the same Parquet rows and
arrays, and every command answers the same apart from where the lake is. The builds' runs
run in the test's process (support/launcher.py): what is checked here is what they make."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from kg_platform.cli import main
from kg_platform.storage.catalog import Catalog
from kg_platform.storage.corpus import corpus_rows, read_corpus
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference, use_kg_home
from kg_platform_tests.storage.lake_content import content, lake_keys
from kg_platform_tests.support.launcher import in_process_runs

RELEASE, YEAR = "pubmed26", "2024"
QUESTION = "Is Carcinoma, Non-Small-Cell Lung associated with Tomography, X-Ray Computed?"
SEARCH = "lung cancer screening with computed tomography"
EXPECTED_EVIDENCE = [41604152]  # the one article co-annotated with both concepts
# everything but the concept index and the two evaluation reports: embedding all 154,172
# MeSH surfaces takes CPU-minutes (the hybrid test below puts a small concept index into
# both lakes instead), and the reports are the eval commands' below, which write theirs to
# S3 through the same lake
SELECT = "not key:concept_index and not key:grounding_report and not key:allocation_report"
HYBRID_QUESTIONS = 20  # the first PubMedQA questions, for the hybrid eval's tiny model


def build_into(lake: str) -> int:
    return main(
        [
            "build",
            "--pubmed-source", str(require_reference("pubmed", "mirror")),
            "--mesh-source", str(require_reference("mesh", "tsv")),
            "--lake", lake,
            "--select", SELECT,
        ]
    )  # fmt: skip


def small_concept_index(lake: Lake, scratch: Path) -> str:
    """A concept index of the descriptors the corpus is indexed with, embedded by the tiny
    test BERT and copied into ``lake``; returns the model folder."""
    from kg_platform.embeddings.concepts import CONCEPTS, MESH_TERMS, build_concept_index
    from kg_platform_tests.embeddings.models import tiny_encoder

    edges = pl.from_arrow(read_corpus(lake.scoped(release=RELEASE), "mesh_edges"))
    uis = edges["descriptor_ui"].unique()
    terms = pl.from_arrow(lake.read_parquet(f"mesh/{YEAR}/terms.parquet"))
    built = Lake(str(scratch))
    if not built.exists(f"{CONCEPTS}/manifest.json"):
        built.write_parquet(MESH_TERMS, terms.filter(pl.col("ui").is_in(uis)).to_arrow())
        build_concept_index(built, tiny_encoder())
    target = lake.scoped(mesh_year=YEAR)
    for name in ("vectors.f16.npy", "surfaces.parquet", "manifest.json"):
        target.write_bytes(f"{CONCEPTS}/{name}", built.read_bytes(f"{CONCEPTS}/{name}"))
    return str(tiny_encoder().layout.path)


@pytest.fixture(scope="module")
def lakes(s3_endpoint, tmp_path_factory):
    """One S3 lake and one local lake, each built once by `kg build` from the same sources,
    each with its own KG home; AWS_* set for the whole module as a user would."""
    import boto3

    base = tmp_path_factory.mktemp("s3e2e")
    with pytest.MonkeyPatch.context() as mp:
        for var, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": s3_endpoint,
        }.items():
            mp.setenv(var, value)
        bucket = f"lake-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
        s3_url = f"s3://{bucket}/kg"
        local_root = str(base / "local-lake")
        in_process_runs(use_kg_home(mp, base / "home-local"))
        assert build_into(local_root) == 0
        in_process_runs(use_kg_home(mp, base / "home-s3"))
        assert build_into(s3_url) == 0
        s3, local = Lake(s3_url), Lake(local_root)
        model = small_concept_index(local, base / "concepts")
        small_concept_index(s3, base / "concepts")
        yield {"s3": s3, "local": local, "home": base / "home-s3", "model": model, "mp": mp}


def run_json(capsys, *argv: str) -> dict:
    code = main(list(argv))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)  # the one JSON document each command prints


def without(doc: dict, *keys: str) -> dict:
    return {k: v for k, v in doc.items() if k not in keys}


def test_the_s3_build_holds_what_the_local_build_holds(lakes) -> None:
    s3, local = lakes["s3"], lakes["local"]
    on_s3 = content(s3)
    assert on_s3 == content(local)
    # 7 tables x 2 files, the corpus's 6 in 5 parts each (the pair's PMIDs fall in 5 buckets),
    # the fold's deletions (corpus/<release>/fold/), mesh 9, the corpus profile's rows
    assert len([k for k in on_s3 if k.endswith(".parquet")]) == 14 + 30 + 1 + 9 + 1
    assert len([k for k in on_s3 if k.endswith(".npy")]) == 28  # 21 graph arrays (3 titles)
    corpus = s3.scoped(release=RELEASE)
    assert corpus_rows(corpus, "articles") == 60
    assert corpus_rows(corpus, "citations") == 1349
    # every object published, nothing left staged, nothing written into the S3 home's lake
    assert not any(k.startswith(".staging") for k in lake_keys(s3))
    assert not (lakes["home"] / "lake").exists()
    # DuckDB reads the S3 Parquet itself (through the lake's registered s3fs)
    catalog = Catalog(s3.scoped(release=RELEASE, mesh_year=YEAR))
    con = catalog.connect()
    try:
        views = catalog.refresh_views(con)
        assert {"articles", "citations", "mesh_descriptors", "file_articles"} <= set(views)
        counts = con.execute(
            "SELECT (SELECT count(*) FROM articles), (SELECT count(*) FROM file_articles), "
            "(SELECT count(*) FROM mesh_descriptors)"
        ).fetchone()
    finally:
        con.close()
    assert counts == (60, 60, 30764)


def test_ask_reads_the_s3_lake(lakes, capsys) -> None:
    on_s3 = run_json(capsys, "ask", QUESTION, "--json", "--lake", lakes["s3"].root)
    on_disk = run_json(capsys, "ask", QUESTION, "--json", "--lake", lakes["local"].root)
    # the graph's build id names input modification stamps; timings are the machine's
    assert without(on_s3, "graph_build", "timings_ms", "start_up_ms") == without(
        on_disk, "graph_build", "timings_ms", "start_up_ms"
    )
    assert on_s3["partition"] == {"release": RELEASE, "mesh_year": YEAR}
    assert [g["ui"] for g in on_s3["groundings"]] == ["D002289", "D014057"]
    assert on_s3["verdict"]["answerable"] is True
    assert [e["pmid"] for e in on_s3["evidence"]] == EXPECTED_EVIDENCE
    # the graph's arrays are memory-mapped from copies in the S3 home's cache, by ETag
    cached = sorted(p.name for p in (lakes["home"] / "cache" / "lake").rglob("*.npy"))
    assert "cite_indptr.npy" in cached and "pmids.npy" in cached


def test_search_reads_the_s3_lake(lakes, capsys) -> None:
    argv = ("search", SEARCH, "--json", "--k", "3", "--device", "cpu")
    on_s3 = run_json(capsys, *argv, "--lake", lakes["s3"].root)
    on_disk = run_json(capsys, *argv, "--lake", lakes["local"].root)
    assert without(on_s3, "timings_ms") == without(on_disk, "timings_ms")
    assert on_s3["index_vectors"] == 56
    assert [h["pmid"] for h in on_s3["hits"]][0] == 41604152


def test_eval_grounding_reads_the_s3_lake(lakes, capsys) -> None:
    pubmedqa = str(require_reference("pubmedqa", "pqal_dev400.json"))
    argv = ("eval", "grounding", "--pubmedqa", pubmedqa, "--json")
    on_s3 = run_json(capsys, *argv, "--lake", lakes["s3"].root)
    assert on_s3 == run_json(capsys, *argv, "--lake", lakes["local"].root)
    assert on_s3["partition"] == {"release": RELEASE, "mesh_year": YEAR}
    assert (on_s3["n"], on_s3["bridge_groundings"], on_s3["bridge_hits"]) == (400, 553, 406)
    assert on_s3["coverage"] == 0.425


def test_eval_allocation_writes_its_report_to_s3(lakes, capsys) -> None:
    hotpotqa = str(require_reference("hotpotqa", "hotpot_dev_distractor_first60.json"))
    out = f"{lakes['s3'].root}/evaluations/allocation"
    argv = ("eval", "allocation", "--hotpotqa", hotpotqa, "--json")
    on_s3 = run_json(capsys, *argv, "--out", out)
    assert on_s3 == run_json(capsys, *argv, "--out", str(Path(lakes["local"].root) / "alloc"))
    assert on_s3["n_questions"] == 60
    assert on_s3["budgets"][0]["recovery"]["flat"]["recovered"] == 6
    folder = "evaluations/allocation"
    assert lakes["s3"].list(folder, ".json") == [
        f"{folder}/allocation.json",
        f"{folder}/summary.json",
    ]
    assert json.loads(lakes["s3"].read_bytes(f"{folder}/summary.json"))["n_questions"] == 60


def test_eval_hybrid_reads_the_s3_lake_and_writes_its_report_there(lakes, capsys, tmp_path) -> None:
    questions = json.loads(require_reference("pubmedqa", "pqal_dev400.json").read_text())
    subset = tmp_path / "pqal_first20.json"
    subset.write_text(json.dumps(dict(list(questions.items())[:HYBRID_QUESTIONS])))
    argv = (
        "eval", "hybrid", "--pubmedqa", str(subset), "--json", "--thresholds", "0.6", "0.9",
        "--model", lakes["model"], "--device", "cpu", "--cache", str(tmp_path / "cache"),
    )  # fmt: skip
    report = f"{lakes['s3'].root}/evaluations/hybrid"
    on_s3 = run_json(capsys, *argv, "--lake", lakes["s3"].root, "--report-dir", report)
    on_disk = run_json(capsys, *argv, "--lake", lakes["local"].root)
    s3_index, disk_index = on_s3.pop("concept_index"), on_disk.pop("concept_index")
    # build ids name input modification stamps; span-link seconds are the machine's
    machine = ("graph_build", "span_link_seconds")
    assert without(on_s3, *machine) == without(on_disk, *machine)
    # the lake's own concept index was used, read from S3; nothing embedded into the cache
    assert s3_index["location"] == f"{lakes['s3'].root}/embeddings/concepts/{YEAR}"
    assert s3_index["built_now"] is False
    assert without(s3_index, "location") == without(disk_index, "location")
    assert not (tmp_path / "cache").exists()
    assert on_s3["n"] == HYBRID_QUESTIONS
    assert [r["threshold"] for r in on_s3["rows"]] == [None, 0.6, 0.9]
    lexical = on_s3["rows"][0]["grounding"]
    assert (lexical["n"], lexical["bridge_groundings"], lexical["bridge_hits"]) == (20, 27, 23)
    folder = "evaluations/hybrid"
    assert lakes["s3"].list(folder) == [f"{folder}/report.json", f"{folder}/report.md"]
    assert json.loads(lakes["s3"].read_bytes(f"{folder}/report.json"))["n"] == HYBRID_QUESTIONS


def s3_calls(lake: Lake) -> list[tuple[str, str]]:
    """(operation, key) of every S3 request the lake's client makes from now on."""
    calls: list[tuple[str, str]] = []

    def record(params: dict, model, **_) -> None:
        calls.append((model.name, params.get("Key", "")))

    lake.fs.s3.meta.events.register("before-parameter-build.s3", record)
    return calls


def test_transaction_on_s3_stages_then_copies_each_object_once(s3_lake: Lake) -> None:
    import boto3

    lake = s3_lake.scoped(release=RELEASE)
    bucket, prefix = lake.root.split("://", 1)[1].split("/", 1)
    reader = boto3.client("s3")  # another client: what any other reader of the bucket sees

    def published(name: str) -> bytes:
        key = f"{prefix}/corpus/{RELEASE}/{name}"
        return reader.get_object(Bucket=bucket, Key=key)["Body"].read()

    lake.write_bytes("corpus/articles.parquet", b"old articles")
    with pytest.raises(RuntimeError), lake.transaction() as staged:
        staged.write_bytes("corpus/articles.parquet", b"bad articles")
        staged.write_bytes("corpus/citations.parquet", b"bad citations")
        assert staged.read_bytes("corpus/articles.parquet") == b"bad articles"
        raise RuntimeError("a blocking check failed")
    assert published("articles.parquet") == b"old articles"
    assert lake.list("corpus") == ["corpus/articles.parquet"]
    assert not lake.fs.exists(lake.physical(".staging"))

    calls = s3_calls(lake)
    with lake.transaction() as staged:
        staged.write_bytes("corpus/articles.parquet", b"new articles")
        staged.write_bytes("corpus/citations.parquet", b"new citations")
        # staged under .staging/txn-*/: the published objects are untouched until the end
        assert published("articles.parquet") == b"old articles"
        writes = [(op, key) for op, key in calls if op != "HeadObject"]
        assert [op for op, _ in writes] == ["PutObject", "PutObject"]
        assert all(key.startswith(f"{prefix}/.staging/txn-") for _, key in writes)
        calls.clear()
    assert published("articles.parquet") == b"new articles"
    assert published("citations.parquet") == b"new citations"
    # publication: exactly one CopyObject per object into its key, no PUT of a published key
    copies = [key for op, key in calls if op in ("CopyObject", "PutObject", "UploadPart")]
    assert copies == [
        f"{prefix}/corpus/{RELEASE}/{n}" for n in ("articles.parquet", "citations.parquet")
    ]
    assert [op for op, _ in calls if op in ("CopyObject", "PutObject")] == ["CopyObject"] * 2
    assert not lake.fs.exists(lake.physical(".staging"))
    # a removal inside a transaction: still published until the commit, then gone
    with lake.transaction() as staged:
        staged.remove("corpus/citations.parquet")
        assert not staged.exists("corpus/citations.parquet")
        assert published("citations.parquet") == b"new citations"
    assert lake.list("corpus") == ["corpus/articles.parquet"]


def test_memory_mapped_arrays_come_from_a_cache_keyed_by_etag(s3_lake: Lake, tmp_path) -> None:
    from dataclasses import replace

    lake = replace(s3_lake, cache_dir=str(tmp_path / "cache"))
    lake.write_npy("graph/b1/pmids.npy", np.array([5, 7, 11], dtype=np.int64))
    first = lake.read_npy("graph/b1/pmids.npy")
    assert isinstance(first, np.memmap) and first.tolist() == [5, 7, 11]
    assert first.filename.startswith(str(tmp_path / "cache"))
    assert lake.read_npy("graph/b1/pmids.npy").filename == first.filename  # reused
    lake.write_npy("graph/b1/pmids.npy", np.array([1, 2], dtype=np.int64))
    again = lake.read_npy("graph/b1/pmids.npy")
    assert again.tolist() == [1, 2] and again.filename != first.filename  # a new ETag
    with pytest.raises(FileNotFoundError):
        lake.read_npy("graph/b1/missing.npy")


def test_bad_s3_lakes_are_named(s3_lake: Lake, capsys, monkeypatch) -> None:
    missing = "s3://no-such-bucket-here/kg"
    for argv in (
        ["ask", QUESTION, "--lake", missing],
        ["search", SEARCH, "--lake", missing],
        ["eval", "grounding", "--pubmedqa", str(require_reference("pubmedqa", "pqal_dev400.json")),
         "--lake", missing],
    ):  # fmt: skip
        assert main(argv) == 2
        assert f"{missing}: bucket 'no-such-bucket-here' does not exist at http" in (
            capsys.readouterr().err
        )
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    assert main(["ask", QUESTION, "--lake", s3_lake.root]) == 2
    err = capsys.readouterr().err
    assert f"{s3_lake.root}/graph: EndpointConnectionError" in err
    assert "(endpoint http://127.0.0.1:9)" in err
