"""Backfilling one partition of embedding_index, concept_index and allocation_report redoes
that partition and leaves every other partition's files byte- and mtime-identical."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg

from kg_platform.assets.allocation import allocation_report
from kg_platform.assets.embeddings import concept_index, embedding_index, embedding_shards
from kg_platform.embeddings.concepts import MESH_TERMS
from kg_platform.evaluation.common.question_sets import register_question_set
from kg_platform.mesh.tables import build_mesh_tables
from kg_platform.resources.encoder import EncoderResource
from kg_platform.resources.lake import LakeResource
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.embeddings.corpus import write_corpus, write_tokens
from kg_platform_tests.embeddings.models import tiny_encoder


def files_under(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def materialize(assets, key, resources, instance) -> dg.ExecuteInProcessResult:
    result = dg.materialize(assets, partition_key=key, resources=resources, instance=instance)
    assert result.success
    assert all(c.passed for c in result.get_asset_check_evaluations())
    return result


def test_one_release_and_one_mesh_year_of_the_embedding_indexes(tmp_path) -> None:
    root = Lake(str(tmp_path / "lake"))
    releases = {"pubmed25": ("pubmed25n0001", "pubmed25n0002"), "pubmed26": ("pubmed26n0001",)}
    for release, files in releases.items():
        write_corpus(root.scoped(release=release), n=8, files=files)
        write_tokens(root.scoped(release=release), tiny_encoder(), files)
    terms = build_mesh_tables(str(require_reference("mesh", "xml")))["terms"]
    for year in ("2019", "2020"):
        root.scoped(mesh_year=year).write_parquet(MESH_TERMS, terms)
    resources = {
        "lake": LakeResource(root=root.root),
        "encoder": EncoderResource(
            model_path=str(tiny_encoder().layout.path), device="cpu", batch_size=8
        ),
    }
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("pubmed_files", [f for fs in releases.values() for f in fs])
    instance.add_dynamic_partitions("pubmed_releases", list(releases))
    instance.add_dynamic_partitions("mesh_years", ["2019", "2020"])
    for files in releases.values():
        for file in files:
            materialize([embedding_shards], file, resources, instance)
    for release in releases:
        materialize([embedding_index], release, resources, instance)
    for year in ("2019", "2020"):
        materialize([concept_index], year, resources, instance)

    lake = tmp_path / "lake"
    index = lake / "embeddings" / "index"
    concepts = lake / "embeddings" / "concepts"
    assert sorted(p.name for p in index.iterdir()) == ["pubmed25", "pubmed26"]
    assert sorted(p.name for p in concepts.iterdir()) == ["2019", "2020"]
    others = {
        "index": files_under(index / "pubmed25"),
        "concepts": files_under(concepts / "2019"),
        "shards": files_under(lake / "embeddings" / "shards"),
        "corpus": files_under(lake / "corpus"),
    }
    assert sorted(others["index"]) == ["manifest.json", "pmids.npy", "vectors.f16.npy"]
    redone_before = files_under(index / "pubmed26")

    materialize([embedding_index], "pubmed26", resources, instance)
    materialize([concept_index], "2020", resources, instance)

    assert files_under(index / "pubmed25") == others["index"]
    assert files_under(concepts / "2019") == others["concepts"]
    assert files_under(lake / "embeddings" / "shards") == others["shards"]
    assert files_under(lake / "corpus") == others["corpus"]
    # the backfilled partition was written again (new mtimes), with the same vectors
    redone = files_under(index / "pubmed26")
    assert {k: v[0] for k, v in redone.items() if k != "manifest.json"} == {
        k: v[0] for k, v in redone_before.items() if k != "manifest.json"
    }
    assert all(redone[k][1] > redone_before[k][1] for k in redone)
    # 6 of 8 articles per release are quotable (every fourth has no abstract)
    for release in releases:
        manifest = json.loads((index / release / "manifest.json").read_text())
        assert manifest["vectors"] == 6, manifest


def test_one_question_set_of_the_allocation_report(tmp_path) -> None:
    source = require_reference("hotpotqa", "hotpot_dev_distractor_first60.json")
    questions = json.loads(source.read_text())
    first20 = tmp_path / "hotpot_first20.json"
    first20.write_text(json.dumps(questions[:20]))
    root = Lake(str(tmp_path / "lake"))
    sets = [register_question_set(root, "hotpotqa", p) for p in (source, first20)]
    resources = {"lake": LakeResource(root=root.root)}
    reports = tmp_path / "lake" / "reports" / "allocation"
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("hotpotqa_sets", sets)
        keys = [
            dg.MultiPartitionKey({"question_set": s, "configuration": "matched_ceilings"})
            for s in sets
        ]
        for key in keys:
            materialize([allocation_report], key, resources, instance)
        kept = files_under(reports / sets[0])
        before = files_under(reports / sets[1])
        result = materialize([allocation_report], keys[1], resources, instance)
    summary = result.asset_materializations_for_node("allocation_report")[0].metadata
    assert summary["question_set"].value == sets[1]
    assert files_under(reports / sets[0]) == kept
    after = files_under(reports / sets[1])
    assert sorted(after) == sorted(before)
    assert {k: v[0] for k, v in after.items()} == {k: v[0] for k, v in before.items()}
    assert all(after[k][1] > before[k][1] for k in after)
