import hashlib
import json

import dagster as dg
import numpy as np
import polars as pl

from kg_platform.assets.embeddings import embedding_index, embedding_shards, embedding_tokens
from kg_platform.cli import main
from kg_platform.embeddings.index import INDEX_PMIDS, index_hash_problems
from kg_platform.orchestration.instance import write_instance_yaml
from kg_platform.resources.encoder import EncoderResource
from kg_platform.resources.lake import LakeResource
from kg_platform.storage.lake import Lake
from kg_platform_tests.embeddings.corpus import FILES, write_corpus, write_tokens
from kg_platform_tests.embeddings.models import tiny_encoder

RELEASE = "pubmed26"  # the release of every file in FILES


def test_shards_then_index_materialise_with_passing_checks_and_search_finds_a_title(
    tmp_path, kg_home, capsys
):
    root = Lake(str(tmp_path / "lake"))
    lake = root.scoped(release=RELEASE)  # corpus/pubmed26/, embeddings/*/pubmed26/
    corpus = write_corpus(lake, n=12)
    model = str(tiny_encoder().layout.path)
    resources = {
        "lake": LakeResource(root=root.root),
        "encoder": EncoderResource(model_path=model, device="cpu", batch_size=8),
    }
    # the persistent instance of KG_HOME, which `kg status` reads below
    write_instance_yaml(kg_home / "dagster", None)
    instance = dg.DagsterInstance.from_config(str(kg_home / "dagster"))
    instance.add_dynamic_partitions("pubmed_files", list(FILES))
    instance.add_dynamic_partitions("pubmed_releases", [RELEASE])
    for file in FILES[:2]:
        # the CPU step's token file, then the GPU step reading it: one run, two steps
        result = dg.materialize(
            [embedding_tokens, embedding_shards],
            partition_key=file,
            resources=resources,
            instance=instance,
        )
        assert result.success
        checks = result.get_asset_check_evaluations()
        assert sorted((c.asset_key.to_user_string(), c.check_name, c.passed) for c in checks) == [
            ("embedding_shards", "one_vector_per_quotable_record", True),
            ("embedding_tokens", "ids_inside_vocabulary", True),
            ("embedding_tokens", "lengths_at_most_max", True),
            ("embedding_tokens", "one_row_per_quotable_record", True),
            ("embedding_tokens", "sample_matches_tokenizer", True),
        ]
        tokens = result.get_asset_materialization_events()[0].materialization
        assert tokens.asset_key == dg.AssetKey("embedding_tokens")
        quotable = corpus.filter(pl.col("file") == file, pl.col("has_abstract")).height
        assert tokens.metadata["records"].value == quotable
        spec = resources["encoder"].tokenizer_spec()
        assert tokens.metadata["tokenizer"].value == spec.key
        assert tokens.metadata["path"].value == str(
            tmp_path / "lake/embeddings/tokens" / RELEASE / spec.key / f"{file}.arrow"
        )
    # backfilling one shard again keeps its verified shard and touches no other file
    shards = tmp_path / "lake" / "embeddings" / "shards" / RELEASE
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(shards.iterdir())}
    again = dg.materialize(
        [embedding_shards], partition_key=FILES[0], resources=resources, instance=instance
    )
    assert again.success
    metadata = again.get_asset_materialization_events()[0].materialization.metadata
    assert (metadata["embedded_now"].value, metadata["kept_verified"].value) == (0, 1)
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(shards.iterdir())} == (
        before
    )

    result = dg.materialize(
        [embedding_index], partition_key=RELEASE, resources=resources, instance=instance
    )
    assert result.success
    evaluations = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert {k: v.passed for k, v in evaluations.items()} == {
        "vector_count_equals_quotable": True,  # the third file's gap is explained
        "sample_rows_match_shards": True,
        "norms_about_one": True,
        "files_match_manifest": True,
    }
    # the manifest records each array's file size and data sha256, as a graph build's does
    index = tmp_path / "lake/embeddings/index" / RELEASE
    arrays = json.loads((index / "manifest.json").read_text())["arrays"]
    for name, file in (("pmids", "pmids.npy"), ("vectors", "vectors.f16.npy")):
        data = np.load(index / file)
        assert arrays[name] == {
            "dtype": data.dtype.str,
            "length": len(data),
            "sha256": hashlib.sha256(data.tobytes()).hexdigest(),
            "nbytes": data.nbytes,
            "size": (index / file).stat().st_size,
        }
    gap = evaluations["vector_count_equals_quotable"].metadata
    third = corpus.filter(pl.col("file") == FILES[2], pl.col("has_abstract")).height
    assert gap["gap"].value == third == gap["explained_by_missing_shards"].value == 3
    assert len(lake.read_npy(INDEX_PMIDS)) == 6
    assert (tmp_path / "lake/embeddings/index" / RELEASE / "pmids.npy").is_file()

    # the search command over the same index (the newest release with one, by default):
    # a title is its own nearest abstract's prefix
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
                root.root,
                "--model",
                model,
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert f"release {RELEASE}" in captured.err
    out = json.loads(captured.out.strip().splitlines()[-1])
    assert out["partition"] == {"release": RELEASE, "mesh_year": None}
    assert out["index_vectors"] == 6 and len(out["hits"]) == 3
    assert all(h["pmid"] in set(lake.read_npy(INDEX_PMIDS).tolist()) for h in out["hits"])
    scores = [h["score"] for h in out["hits"]]
    assert scores == sorted(scores, reverse=True)
    assert any(h["pmid"] == pmid and h["title"] == title for h in out["hits"])

    # a tampered vector file of the same size: the sizes (every open) cannot see it; written
    # after the index was materialised, plain `kg status` hashes it and names it (issue 26),
    # as the hashes of the index's check and `kg status --verify` do
    vectors = index / "vectors.f16.npy"
    good = vectors.read_bytes()
    vectors.write_bytes(good[:-1] + bytes([good[-1] ^ 0xFF]))
    tampered = (
        f"{vectors}: sha256 differs from the index manifest's ({arrays['vectors']['sha256'][:12]}"
        "…); rebuild embedding_index"
    )
    assert index_hash_problems(lake) == [tampered]
    assert main(["status", "--lake", root.root]) == 1
    out = capsys.readouterr().out
    assert "embedding_index: 1 corrupt\n" in out
    assert f"  {RELEASE}: corrupt: {tampered} (written after embedding_index[{RELEASE}] " in out
    assert main(["status", "--lake", root.root, "--verify"]) == 1
    out = capsys.readouterr().out
    assert "embedding_index: 1 corrupt\n" in out
    assert f"  {RELEASE}: corrupt: {tampered}\n" in out
    # cut short: every open and plain `kg status` name it by its size
    vectors.write_bytes(good[:-2])
    cut = (
        f"{vectors}: {len(good) - 2} bytes, the index manifest says {len(good)} bytes; "
        "rebuild embedding_index"
    )
    assert index_hash_problems(lake) == [cut]
    assert main(["status", "--lake", root.root]) == 1
    assert f"  {RELEASE}: corrupt: {cut}\n" in capsys.readouterr().out


def test_a_range_of_files_is_one_run_recording_each_file(tmp_path) -> None:
    """A backfill hands embedding_shards a range of files: one step embeds them in one
    stream, and each file is its own partition: materialisation, data version (its shard's
    vectors sha256) and check row."""
    root = Lake(str(tmp_path / "lake"))
    write_corpus(root.scoped(release=RELEASE), n=12)
    write_tokens(root.scoped(release=RELEASE), tiny_encoder())
    resources = {
        "lake": LakeResource(root=root.root),
        "encoder": EncoderResource(
            model_path=str(tiny_encoder().layout.path), device="cpu", batch_size=8
        ),
    }
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("pubmed_files", list(FILES))
    result = dg.materialize(
        [embedding_shards],
        resources=resources,
        instance=instance,
        tags={
            "dagster/asset_partition_range_start": FILES[0],
            "dagster/asset_partition_range_end": FILES[-1],
        },
    )
    assert result.success
    shards = tmp_path / "lake" / "embeddings" / "shards" / RELEASE
    recorded = {
        e.partition: e.materialization.tags["dagster/data_version"]
        for e in result.get_asset_materialization_events()
    }
    assert recorded == {
        f: json.loads((shards / f"{f}.meta.json").read_text())["vectors_sha256"][:16] for f in FILES
    }
    assert sorted(
        (c.partition, c.check_name, c.passed) for c in result.get_asset_check_evaluations()
    ) == [(f, "one_vector_per_quotable_record", True) for f in FILES]


def test_search_names_bad_input(tmp_path, capsys):
    assert main(["search", "   ", "--lake", str(tmp_path)]) == 2
    assert "question: empty" in capsys.readouterr().err
    assert main(["search", "aspirin", "--lake", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert "empty/embeddings/index: no embedding index" in err
    assert "materialise `embedding_index` first" in err
    # a named release without an index: the release searched, then the missing matrix
    empty = str(tmp_path / "empty")
    assert main(["search", "aspirin", "--lake", empty, "--release", RELEASE]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"release {RELEASE}\n")
    assert "embeddings/index/vectors.f16.npy: not in the lake" in err
    assert main(["search", "bad\x07bell", "--lake", str(tmp_path)]) == 2
    assert "control characters" in capsys.readouterr().err
