"""The concept index's vector cache: a rebuild embeds only the surfaces the cache lacks.

Real encoders (the packaged MiniLM; the tiny BERT as the "other model") on a small table of
real MeSH 2024 descriptors and terms. A corrupt or misaligned cache is an error naming the
object, never a silent re-embedding.
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from kg_platform.embeddings.concepts import (
    CONCEPT_CACHE,
    CONCEPT_MANIFEST,
    CONCEPT_SURFACES,
    CONCEPT_VECTORS,
    MESH_TERMS,
    ConceptIndex,
    ConceptIndexBuild,
    ConceptIndexError,
    build_concept_index,
    concept_checks,
    encoder_key,
)
from kg_platform.embeddings.feeder import FeederSettings
from kg_platform.evaluation.grounding.hybrid import provide_concept_index
from kg_platform.storage.lake import Lake
from kg_platform.text.normalise import normalise
from kg_platform_tests.embeddings.models import TEST_MAX_LENGTH, packaged_encoder, tiny_encoder

INLINE = FeederSettings(workers=0)

# real MeSH 2024 descriptors: the preferred concept's terms first ...
FIRST = {
    "D001241": ("Aspirin", ["Acetylsalicylic Acid", "Acylpyrin"]),
    "D009203": ("Myocardial Infarction", ["Heart Attack", "Myocardial Infarct"]),
    "D006973": ("Hypertension", ["High Blood Pressure"]),
    "D003920": ("Diabetes Mellitus", []),
}
# ... then what the thesaurus adds: other concepts' terms and two more descriptors
ADDED = {
    "D009203": ("Myocardial Infarction", ["Cardiovascular Stroke"]),
    "D001943": ("Breast Neoplasms", ["Breast Cancer", "Breast Tumors"]),
    "D008175": ("Lung Neoplasms", ["Lung Cancer"]),
}


def _terms(*vocabularies: dict[str, tuple[str, list[str]]]) -> pl.DataFrame:
    rows = []
    for vocabulary in vocabularies:
        for ui, (name, entries) in vocabulary.items():
            rows.append((ui, name, normalise(name), "name"))
            rows += [(ui, e, normalise(e), "entry") for e in entries]
    frame = pl.DataFrame(rows, schema=["ui", "term", "normalised", "kind"], orient="row")
    return frame.unique(["ui", "normalised", "kind"], keep="first", maintain_order=True)


def _build(lake: Lake, terms: pl.DataFrame, encoder=None):
    lake.write_parquet(MESH_TERMS, terms.to_arrow())
    return build_concept_index(lake, encoder or packaged_encoder(), INLINE)


def _vectors_by_surface(lake: Lake) -> dict[tuple[str, str], bytes]:
    surfaces = pl.from_arrow(lake.read_parquet(CONCEPT_SURFACES))
    vectors = lake.read_npy(CONCEPT_VECTORS, mmap=False)
    keys = zip(surfaces["ui"].to_list(), surfaces["term"].to_list(), strict=True)
    return {key: vectors[i].tobytes() for i, key in enumerate(keys)}


def _segments(lake: Lake, encoder) -> list[str]:
    return lake.list(f"{CONCEPT_CACHE}/{encoder_key(encoder)}", ".parquet")


def test_a_rebuild_embeds_exactly_the_new_surfaces_and_reuses_old_vectors_byte_for_byte(
    tmp_path,
):
    lake = Lake(str(tmp_path / "lake"))
    first = _build(lake, _terms(FIRST))
    assert (first.surfaces, first.descriptors, first.embedded, first.reused) == (9, 4, 9, 0)
    before = _vectors_by_surface(lake)
    [segment] = _segments(lake, packaged_encoder())

    second = _build(lake, _terms(FIRST, ADDED))
    # 9 old surfaces; new: Cardiovascular Stroke, Breast Neoplasms (+2), Lung Neoplasms (+1)
    assert (second.surfaces, second.descriptors, second.embedded, second.reused) == (15, 6, 6, 9)
    manifest = json.loads(lake.read_bytes(CONCEPT_MANIFEST))
    assert (manifest["surfaces"], manifest["embedded"], manifest["reused"]) == (15, 6, 9)
    assert manifest["cache"] == f"{CONCEPT_CACHE}/{encoder_key(packaged_encoder())}"
    # the new segment holds exactly the new texts, and nothing else was written
    [new_segment] = [s for s in _segments(lake, packaged_encoder()) if s != segment]
    embedded_now = lake.read_parquet(new_segment)["text"].to_pylist()
    assert sorted(embedded_now) == [
        "Breast Cancer",
        "Breast Neoplasms",
        "Breast Tumors",
        "Cardiovascular Stroke",
        "Lung Cancer",
        "Lung Neoplasms",
    ]
    after = _vectors_by_surface(lake)
    assert {k: after[k] for k in before} == before
    assert len(after) == 15

    # nothing new: nothing embedded, the index byte-identical
    vectors = lake.read_bytes(CONCEPT_VECTORS)
    third = _build(lake, _terms(FIRST, ADDED))
    assert (third.embedded, third.reused) == (0, 15)
    assert lake.read_bytes(CONCEPT_VECTORS) == vectors
    assert len(_segments(lake, packaged_encoder())) == 2

    # the opened index is the one the grounder reads: same rows, same vectors
    index = ConceptIndex.open(lake)
    assert (
        len(index.uis) == 15
        and index.vectors.tobytes()
        == np.asarray(lake.read_npy(CONCEPT_VECTORS, mmap=False)).tobytes()
    )


def test_another_encoder_reembeds_everything_in_its_own_cache_folder(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    _build(lake, _terms(FIRST))
    tiny = _build(lake, _terms(FIRST), tiny_encoder())
    assert (tiny.embedded, tiny.reused, tiny.dim) == (9, 0, 32)
    assert encoder_key(tiny_encoder()) != encoder_key(packaged_encoder())
    assert tiny.cache == f"{CONCEPT_CACHE}/{encoder_key(tiny_encoder())}"
    # back to MiniLM: its cache was left alone
    again = _build(lake, _terms(FIRST))
    assert (again.embedded, again.reused, again.dim) == (0, 9, 384)


def test_the_cache_key_names_model_sequence_limit_and_dtype():
    key = encoder_key(packaged_encoder())
    fingerprint = packaged_encoder().fingerprint.replace(":", "-")
    assert key == f"{fingerprint}-len{TEST_MAX_LENGTH}-float32"


@pytest.fixture
def cached(tmp_path):
    """A lake whose cache holds one segment of the FIRST surfaces."""
    lake = Lake(str(tmp_path / "lake"))
    _build(lake, _terms(FIRST))
    [table] = _segments(lake, packaged_encoder())
    return lake, table, table.removesuffix(".parquet") + ".npy"


def test_a_misaligned_cache_segment_is_an_error_naming_it(cached):
    lake, _, npy = cached
    vectors = lake.read_npy(npy, mmap=False)
    lake.write_npy(npy, vectors[:-1])
    with pytest.raises(ConceptIndexError) as error:
        _build(lake, _terms(FIRST))
    message = str(error.value)
    assert message.startswith(f"{npy}: float16 (8, 384) vectors, expected float16 (9, 384)")
    assert f"remove {lake.path(f'{CONCEPT_CACHE}/{encoder_key(packaged_encoder())}')}" in message


def test_a_cache_segment_of_the_wrong_dtype_is_an_error_naming_it(cached):
    lake, _, npy = cached
    lake.write_npy(npy, lake.read_npy(npy, mmap=False).astype(np.float32))
    with pytest.raises(ConceptIndexError, match=f"^{npy}: float32 \\(9, 384\\) vectors"):
        _build(lake, _terms(FIRST))


def test_an_unreadable_cache_segment_is_an_error_naming_it(cached):
    lake, table, npy = cached
    lake.write_bytes(npy, b"not an npy file")
    with pytest.raises(ConceptIndexError, match=f"^{npy}: unreadable cache segment"):
        _build(lake, _terms(FIRST))
    lake.write_bytes(table, b"not parquet")
    with pytest.raises(ConceptIndexError, match=f"^{table}: unreadable cache segment"):
        _build(lake, _terms(FIRST))


def test_a_hash_table_without_its_vectors_is_an_error_naming_them(cached):
    lake, table, npy = cached
    lake.remove(npy)
    with pytest.raises(ConceptIndexError, match=f"^{npy}: missing; its hash table {table}"):
        _build(lake, _terms(FIRST))


def test_vectors_without_a_hash_table_are_an_interrupted_write_and_ignored(cached):
    lake, table, _ = cached
    lake.remove(table)
    build = _build(lake, _terms(FIRST))
    assert (build.embedded, build.reused) == (9, 0)
    assert _segments(lake, packaged_encoder()) == [table]


def test_the_evaluation_cache_shares_vectors_between_vocabularies(tmp_path):
    root = tmp_path / "cache"
    encoder = packaged_encoder()
    first, info = provide_concept_index(_terms(FIRST), encoder, None, root)
    assert (info.built_now, info.surfaces, info.embedded, info.reused) == (True, 9, 9, 0)
    bigger, info = provide_concept_index(_terms(FIRST, ADDED), encoder, None, root)
    assert (info.built_now, info.surfaces, info.embedded, info.reused) == (True, 15, 6, 9)
    again, info = provide_concept_index(_terms(FIRST, ADDED), encoder, None, root)
    assert (info.built_now, info.surfaces) == (False, 15)
    assert again.vectors.tobytes() == bigger.vectors.tobytes()
    aspirin = first.terms.index("Aspirin")
    assert bigger.vectors[bigger.terms.index("Aspirin")].tobytes() == (
        first.vectors[aspirin].tobytes()
    )


def test_the_cache_works_the_same_on_an_s3_lake(s3_lake, tmp_path, monkeypatch):
    monkeypatch.setenv("KG_HOME", str(tmp_path / "home"))  # where S3 segments are mapped
    first = _build(s3_lake, _terms(FIRST), tiny_encoder())
    assert (first.embedded, first.reused) == (9, 0)
    before = _vectors_by_surface(s3_lake)
    second = _build(s3_lake, _terms(FIRST, ADDED), tiny_encoder())
    assert (second.surfaces, second.embedded, second.reused) == (15, 6, 9)
    after = _vectors_by_surface(s3_lake)
    assert {k: after[k] for k in before} == before
    assert len(_segments(s3_lake, tiny_encoder())) == 2


def test_the_concept_norm_check_is_the_index_rule():
    def checked(low: float, high: float) -> list[tuple]:
        build = ConceptIndexBuild(3, 3, 32, 0.0, min_norm=low, max_norm=high)
        return [(o.name, o.passed, o.metadata) for o in concept_checks(build)]

    assert checked(0.995, 1.004) == [("norms_about_one", True, {"min": 0.995, "max": 1.004})]
    assert checked(0.98, 1.0) == [("norms_about_one", False, {"min": 0.98, "max": 1.0})]
