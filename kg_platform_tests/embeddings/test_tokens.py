"""Token files (embedding_tokens) and the GPU step's path from them (issue 40), on CPU with
real SciFact abstracts: the same vectors as the text path, whatever the batch widths; a
damaged token file is judged and never published; another tokenizer's file is refused."""

import io

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from kg_platform.embeddings.feeder import FeederSettings, FeederStats, embed_texts, embed_tokens
from kg_platform.embeddings.shards import (
    build_tokens,
    embed_shards,
    read_quotable,
    vectors_key,
)
from kg_platform.embeddings.tokens import (
    TokenFileError,
    make_token_file,
    read_tokens,
    tokens_key,
)
from kg_platform.resources.encoder import EncoderResource
from kg_platform.storage.lake import Lake
from kg_platform_tests.embeddings.corpus import FILES, write_corpus, write_tokens
from kg_platform_tests.embeddings.models import packaged_encoder, scifact_abstracts, tiny_encoder


def _texts(n: int) -> list[str]:
    # abstracts and their titles: lengths from a few tokens to the 96-token cap
    out = []
    for _, title, abstract in scifact_abstracts(n // 2):
        out += [f"{title} {abstract}", title]
    return out


def test_the_token_path_gives_the_text_paths_vectors_in_the_same_order():
    encoder = packaged_encoder()
    texts = _texts(12)
    spec = encoder.tokenizer_spec()
    tokens = make_token_file(spec, "pubmed26n0001", np.arange(len(texts)), texts)
    # the ids are the tokenizer's, and the encoder's own tokenizer says the same
    assert tokens.row(1) == encoder.tokenizer(texts[1])["input_ids"]
    assert tokens.lengths.max() == 96 and tokens.lengths.min() < 30
    # chunks of 7: the text path's super-batches are whole chunks, here the same 7 + 5 rows
    settings = FeederSettings(batch_size=4, super_batch=7, chunk=7, workers=0)
    from_text = embed_texts(encoder, texts, settings)
    from_tokens = np.concatenate(
        list(embed_tokens(encoder, [(tokens.ids, tokens.lengths)], settings))
    )
    # same ids, same sorting and batches: bit for bit the same rows
    assert np.array_equal(from_tokens, from_text)
    # and the plain encoder (unsorted, padded to each batch's longest) agrees to 1e-4
    plain = encoder.encode(texts)
    cosines = (from_tokens.astype(np.float32) * plain).sum(1) / np.linalg.norm(
        from_tokens.astype(np.float32), axis=1
    )
    assert cosines.min() >= 0.9999


def test_rounding_the_batch_widths_changes_no_vector():
    encoder = packaged_encoder()
    texts = _texts(10)
    tokens = make_token_file(encoder.tokenizer_spec(), "f", np.arange(10), texts)
    runs = {}
    for step, warm in ((1, False), (16, False), (32, True)):
        stats = FeederStats()
        settings = FeederSettings(batch_size=3, super_batch=10, width_step=step, warm_up=warm)
        blocks = embed_tokens(encoder, [(tokens.ids, tokens.lengths)], settings, stats)
        runs[step] = np.concatenate(list(blocks)).astype(np.float32)
        runs[f"padded_{step}"] = stats.padded_tokens
    # the widths are the texts' own, then multiples of 16 and 32 capped at the 96 maximum;
    # with warm-up the last short batch is filled to 3 rows (4 batches of 3 = 12 rows)
    lengths = np.sort(tokens.lengths)[::-1].astype(int)
    exact = sum(int(lengths[i]) * len(lengths[i : i + 3]) for i in range(0, 10, 3))
    assert runs["padded_1"] == exact
    assert runs["padded_16"] > exact
    assert runs["padded_32"] == 3 * sum(
        min(-(-int(lengths[i]) // 32) * 32, 96) for i in (0, 3, 6, 9)
    )
    assert {(3, 32), (3, 64), (3, 96)} <= encoder.__dict__["_warm_shapes"]
    for step in (16, 32):
        assert np.abs(runs[step] - runs[1]).max() <= 1e-3  # one fp16 step at most
        cosines = (runs[step] * runs[1]).sum(1) / (
            np.linalg.norm(runs[step], axis=1) * np.linalg.norm(runs[1], axis=1)
        )
        assert cosines.min() >= 0.99999


def test_a_token_file_feeds_its_shard_and_another_tokenizers_file_is_refused(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    write_corpus(lake, n=8, files=("pubmed26n0001",))
    tiny, packaged = tiny_encoder(), packaged_encoder()
    write_tokens(lake, tiny, ("pubmed26n0001",))
    tiny_spec, packaged_spec = tiny.tokenizer_spec(), packaged.tokenizer_spec()
    # the tiny model's file laid where the packaged model's should be
    lake.write_bytes(
        tokens_key(packaged_spec.key, "pubmed26n0001"),
        lake.read_bytes(tokens_key(tiny_spec.key, "pubmed26n0001")),
    )
    with pytest.raises(TokenFileError) as refused:
        read_tokens(lake, packaged_spec, "pubmed26n0001")
    assert (
        f"pubmed26n0001.arrow: made by tokenizer {tiny_spec.fingerprint} (max length 64); "
        f"the model's tokenizer is {packaged_spec.fingerprint} (max length 96)"
    ) in str(refused.value)
    run = embed_shards(lake, packaged, ["pubmed26n0001"], FeederSettings(batch_size=4, workers=0))
    assert run.shards[0].embedded is False
    assert f"made by tokenizer {tiny_spec.fingerprint}" in run.unverified[0].reason
    assert not lake.exists(vectors_key("pubmed26n0001"))
    # the tiny model's own file embeds: 6 quotable records of 8
    run = embed_shards(lake, tiny, ["pubmed26n0001"], FeederSettings(batch_size=4, workers=0))
    assert [(r.vectors, r.embedded) for r in run.shards] == [(6, True)]


def test_the_packaged_model_and_its_resource_share_one_tokenizer_fingerprint():
    # the CPU step reads tokenizer.json alone; the GPU step serialises transformers' tokenizer
    resource = EncoderResource().tokenizer_spec()
    encoder = packaged_encoder().tokenizer_spec()
    assert resource.fingerprint == encoder.fingerprint
    assert (resource.max_length, encoder.max_length) == (256, 96)
    assert resource.key == f"{resource.fingerprint}-L256"
    assert (resource.vocab_size, resource.pad_id) == (30522, 0)


class _CorruptingLake(Lake):
    """A lake whose storage changes a token file on the way to disk: ``how`` rewrites its
    Arrow table (metadata kept, so the checksum or the checks must find it)."""

    how = None

    def write_bytes(self, key: str, data: bytes) -> int:
        if key.startswith("embeddings/tokens/") and self.how is not None:
            table = type(self).how(ipc.open_file(pa.BufferReader(data)).read_all())
            sink = io.BytesIO()
            with ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
            data = sink.getvalue()
        return super().write_bytes(key, data)


def _resealed(table: pa.Table, ids: list[list[int]] | None = None, drop_last=False) -> pa.Table:
    """``table`` with new ids (or its last row dropped) and its metadata sealed again, as a
    writer with a bug would: only the checks can tell."""
    import json

    from kg_platform.embeddings.tokens import METADATA_KEY, ids_sha256

    meta = json.loads(table.schema.metadata[METADATA_KEY])
    if drop_last:
        table = table.slice(0, table.num_rows - 1)
    if ids is not None:
        table = table.set_column(2, "ids", pa.array(ids, pa.list_(pa.uint16())))
    flat = table.column("ids").combine_chunks().flatten().to_numpy()
    meta.update(count=table.num_rows, tokens=len(flat), ids_sha256=ids_sha256(flat))
    return table.replace_schema_metadata({METADATA_KEY: json.dumps(meta)})


def _ids(table: pa.Table) -> list[list[int]]:
    return table.column("ids").to_pylist()


@pytest.mark.parametrize(
    ("how", "failed", "detail"),
    [
        # bytes changed after sealing: the checksum refuses the file, every check fails
        (
            lambda t: t.set_column(
                2, "ids", pa.array([[0, *r[1:]] for r in _ids(t)], t.schema.field("ids").type)
            ),
            {
                "one_row_per_quotable_record",
                "ids_inside_vocabulary",
                "lengths_at_most_max",
                "sample_matches_tokenizer",
            },
            "ids sha256 differs from the one sealed in its metadata",
        ),
        (
            lambda t: _resealed(t, [[*r[:-1], 40000] for r in _ids(t)]),
            {"ids_inside_vocabulary", "sample_matches_tokenizer"},
            "largest id 40000, vocabulary 37",
        ),
        (
            lambda t: _resealed(t, drop_last=True),
            {"one_row_per_quotable_record", "sample_matches_tokenizer"},
            "4 rows for 5 quotable records: the PMIDs differ from the corpus's",
        ),
        (
            lambda t: _resealed(t, [r[:1] + r for r in _ids(t)]),
            {"lengths_at_most_max", "sample_matches_tokenizer"},
            "the length column disagrees with the id lists",
        ),
    ],
    ids=["bytes", "id", "row", "length"],
)
def test_a_corrupted_token_file_fails_its_checks_and_publishes_nothing(
    tmp_path, how, failed, detail
):
    lake = _CorruptingLake(str(tmp_path / "lake"))
    write_corpus(lake, n=6, files=("pubmed26n0001",))
    spec = tiny_encoder().tokenizer_spec()
    good = build_tokens(lake, spec, "pubmed26n0001")  # published, as a last good file
    assert good.passed and good.rows == 5  # the fourth of six has no abstract
    published = lake.read_bytes(tokens_key(spec.key, "pubmed26n0001"))
    _CorruptingLake.how = staticmethod(how)
    try:
        with pytest.raises(RuntimeError, match="blocking"), lake.transaction() as staged:
            built = build_tokens(staged, spec, "pubmed26n0001")
            # what the asset does (check_results): a failed blocking check raises inside
            # the transaction, which discards the staged file
            if not built.passed:
                raise RuntimeError("blocking check failed")
    finally:
        _CorruptingLake.how = None
    assert {o.name for o in built.outcomes if not o.passed} == failed
    assert any(detail in (o.details or "") for o in built.outcomes)
    assert lake.read_bytes(tokens_key(spec.key, "pubmed26n0001")) == published


def test_token_files_hold_one_row_per_quotable_record_in_pmid_order(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    write_corpus(lake)
    encoder = tiny_encoder()
    write_tokens(lake, encoder)
    spec = encoder.tokenizer_spec()
    records = read_quotable(lake, list(FILES))
    for file in FILES:
        tokens = read_tokens(lake, spec, file)
        assert tokens.pmids.tolist() == records[file].pmids.tolist()
        expected = [spec.load().encode(t).ids for t in records[file].texts]
        assert [tokens.row(i) for i in range(len(tokens))] == expected
        assert tokens.lengths.tolist() == [len(e) for e in expected]
        assert tokens.ids.dtype == np.uint16 and tokens.lengths.dtype == np.uint16


def test_the_benchmark_reads_token_files_without_dagster_or_polars():
    # benchmarks/embed.py runs on a bare GPU machine: numpy, torch, transformers, tokenizers
    # and pyarrow; what it imports from the project must not pull in the platform's stack
    import subprocess
    import sys
    from pathlib import Path

    probe = (
        "import sys, runpy; sys.argv = ['embed']; "
        "module = runpy.run_path('benchmarks/embed.py', run_name='probe'); "
        "import kg_platform.embeddings.encoder, kg_platform.embeddings.feeder, "
        "kg_platform.embeddings.tokenising, kg_platform.embeddings.tokens; "
        "print(sorted(m for m in ('dagster', 'polars', 'pandas', 'pandera', 'duckdb', "
        "'fsspec', 'torch') if m in sys.modules))"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    # torch too is imported only when main() runs
    assert done.stdout.strip() == "[]"


def test_the_asset_fails_a_token_file_its_checks_refuse_and_keeps_the_last_good_one(tmp_path):
    import dagster as dg

    from kg_platform.assets.embeddings import embedding_tokens
    from kg_platform.resources.lake import LakeResource

    class CorruptingLakeResource(LakeResource):
        def get(self) -> Lake:
            return _CorruptingLake(self.root)

    root = Lake(str(tmp_path / "lake"))
    release = root.scoped(release="pubmed26")
    write_corpus(release, n=6, files=("pubmed26n0001",))
    encoder = EncoderResource(model_path=str(tiny_encoder().layout.path), device="cpu")
    spec = encoder.tokenizer_spec()
    build_tokens(release, spec, "pubmed26n0001")  # the last good file, published
    published = release.read_bytes(tokens_key(spec.key, "pubmed26n0001"))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("pubmed_files", ["pubmed26n0001"])
    _CorruptingLake.how = staticmethod(lambda t: _resealed(t, [[*r[:-1], 40000] for r in _ids(t)]))
    try:
        result = dg.materialize(
            [embedding_tokens],
            partition_key="pubmed26n0001",
            resources={"lake": CorruptingLakeResource(root=root.root), "encoder": encoder},
            instance=instance,
            raise_on_error=False,
        )
    finally:
        _CorruptingLake.how = None
    assert not result.success
    assert result.get_asset_materialization_events() == []
    # a step that fails logs its check rows before raising: they are on the instance
    records = instance.get_records_for_run(
        result.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
    ).records
    evaluations = [r.event_log_entry.dagster_event.asset_check_evaluation_data for r in records]
    assert sorted((e.check_name, e.passed) for e in evaluations) == [
        ("ids_inside_vocabulary", False),
        ("lengths_at_most_max", True),
        ("one_row_per_quotable_record", True),
        ("sample_matches_tokenizer", False),
    ]
    failure = result.get_step_failure_events()[0].step_failure_data.error.message
    assert "embedding_tokens[pubmed26n0001]: blocking check failed: ids_inside_vocabulary " in (
        failure
    )
    assert "(largest id 40000, vocabulary 37)" in failure
    assert release.read_bytes(tokens_key(spec.key, "pubmed26n0001")) == published


def test_another_model_with_the_same_tokenizer_reuses_the_token_files(tmp_path):
    import json
    import shutil

    from kg_platform.embeddings.encoder import Encoder

    lake = Lake(str(tmp_path / "lake"))
    write_corpus(lake, n=8, files=("pubmed26n0001",))
    first = tiny_encoder()
    write_tokens(lake, first, ("pubmed26n0001",))
    # the same weights and tokenizer files under another config: another model fingerprint
    folder = tmp_path / "tiny-bert-2"
    shutil.copytree(first.layout.path, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "classifier_dropout": 0.2}))
    second = Encoder(str(folder), device="cpu", batch_size=8)
    assert second.fingerprint != first.fingerprint
    assert second.tokenizer_spec().key == first.tokenizer_spec().key
    run = embed_shards(lake, second, ["pubmed26n0001"], FeederSettings(batch_size=4))
    assert [(r.vectors, r.embedded, r.reason) for r in run.shards] == [(6, True, "embedded")]
    # the one token folder, the first model's: nothing was tokenised again
    assert lake.list("embeddings/tokens") == [f"embeddings/tokens/{first.tokenizer_spec().key}"]
