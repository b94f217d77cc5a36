import json

import dagster as dg
import polars as pl

from kg_platform.assets.embeddings import embedding_index, embedding_shards
from kg_platform.cli import main
from kg_platform.embeddings.index import INDEX_PMIDS
from kg_platform.resources.encoder import EncoderResource
from kg_platform.resources.lake import LakeResource
from kg_platform.storage.lake import Lake
from kg_platform_tests.embeddings.corpus import FILES, write_corpus
from kg_platform_tests.embeddings.models import tiny_encoder


def test_shards_then_index_materialise_with_passing_checks_and_search_finds_a_title(
    tmp_path, capsys
):
    lake = Lake(str(tmp_path / "lake"))
    corpus = write_corpus(lake, n=12)
    model = str(tiny_encoder().layout.path)
    resources = {
        "lake": LakeResource(root=lake.root),
        "encoder": EncoderResource(model_path=model, device="cpu", batch_size=8),
    }
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("pubmed_files", list(FILES))
    for file in FILES[:2]:
        result = dg.materialize(
            [embedding_shards], partition_key=file, resources=resources, instance=instance
        )
        assert result.success
        checks = result.get_asset_check_evaluations()
        assert [c.passed for c in checks] == [True]

    result = dg.materialize([embedding_index], resources=resources, instance=instance)
    assert result.success
    evaluations = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert {k: v.passed for k, v in evaluations.items()} == {
        "vector_count_equals_quotable": True,  # the third file's gap is explained
        "sample_rows_match_shards": True,
        "norms_about_one": True,
    }
    gap = evaluations["vector_count_equals_quotable"].metadata
    third = corpus.filter(pl.col("file") == FILES[2], pl.col("has_abstract")).height
    assert gap["gap"].value == third == gap["explained_by_missing_shards"].value == 3
    assert len(lake.read_npy(INDEX_PMIDS)) == 6

    # the search command over the same index: a title is its own nearest abstract's prefix
    pmid, title = (
        corpus.filter(pl.col("file") == FILES[0], pl.col("has_abstract"))
        .select("pmid", "title")
        .row(0)
    )
    assert (
        main(
            [
                "search",
                title,
                "--k",
                "3",
                "--json",
                "--lake",
                lake.root,
                "--model",
                model,
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["index_vectors"] == 6 and len(out["hits"]) == 3
    assert all(h["pmid"] in set(lake.read_npy(INDEX_PMIDS).tolist()) for h in out["hits"])
    scores = [h["score"] for h in out["hits"]]
    assert scores == sorted(scores, reverse=True)
    assert any(h["pmid"] == pmid and h["title"] == title for h in out["hits"])


def test_search_names_bad_input(tmp_path, capsys):
    assert main(["search", "   ", "--lake", str(tmp_path)]) == 2
    assert "question: empty" in capsys.readouterr().err
    assert main(["search", "aspirin", "--lake", str(tmp_path / "empty")]) == 2
    assert "embeddings/index/vectors.f16.npy: not in the lake" in capsys.readouterr().err
    assert main(["search", "bad\x07bell", "--lake", str(tmp_path)]) == 2
    assert "control characters" in capsys.readouterr().err
