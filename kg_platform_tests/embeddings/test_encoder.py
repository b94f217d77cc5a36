import json

import numpy as np
import pytest
import torch

from kg_platform.embeddings.encoder import (
    Encoder,
    EncoderError,
    packaged_model_path,
    pick_device,
    read_model_layout,
)
from kg_platform_tests.embeddings.models import (
    TEST_MAX_LENGTH,
    build_tiny_bert,
    packaged_encoder,
    scifact_abstracts,
)


def test_packaged_model_layout_is_read_from_its_sentence_transformers_files():
    layout = read_model_layout("")
    assert layout.path == packaged_model_path()
    assert layout.pooling == "mean"
    assert layout.max_length == 256  # sentence_bert_config.json, not the tokenizer's 512
    assert layout.fingerprint.startswith("model:")


def test_packaged_encoder_matches_sentence_transformers_on_real_abstracts():
    from sentence_transformers import SentenceTransformer

    encoder = packaged_encoder()
    texts = [f"{title} {abstract}" for _, title, abstract in scifact_abstracts(6)]
    ours = encoder.encode(texts)
    reference = SentenceTransformer(str(packaged_model_path()), device="cpu")
    reference.max_seq_length = TEST_MAX_LENGTH
    theirs = reference.encode(texts, normalize_embeddings=True)
    assert ours.shape == (6, 384)
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_fp16_round_trip_keeps_unit_norm_and_cosines():
    encoder = packaged_encoder()
    texts = [f"{t} {a}" for _, t, a in scifact_abstracts(4)]
    vectors = encoder.encode(texts)
    half = vectors.astype(np.float16).astype(np.float32)
    assert np.abs(half - vectors).max() < 1e-3
    np.testing.assert_allclose(np.linalg.norm(half, axis=1), 1.0, atol=2e-3)
    np.testing.assert_allclose(half @ half.T, vectors @ vectors.T, atol=2e-3)


def test_cpu_uses_fp32_and_auto_picks_the_available_device():
    encoder = packaged_encoder()
    assert encoder.device == "cpu"
    assert encoder.dtype == torch.float32
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available() and torch.backends.mps.is_available():
        expected = "mps"
    assert pick_device("auto") == expected


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_asking_for_cuda_without_one_is_a_clear_error():
    with pytest.raises(EncoderError, match="CUDA is not available"):
        pick_device("cuda")
    with pytest.raises(EncoderError, match="expected auto, cpu"):
        pick_device("tpu")


def test_any_local_hugging_face_folder_works(tmp_path):
    folder = build_tiny_bert(tmp_path / "tiny", max_position_embeddings=48)
    encoder = Encoder(str(folder), device="cpu")
    assert encoder.dim == 32
    assert encoder.pooling == "mean"
    # no sentence_bert_config.json: the default limit, capped by the model's positions
    assert encoder.max_length == 48
    vectors = encoder.encode(["aspirin reduces heart attack risk", "tumour cells", ""])
    assert vectors.shape == (3, 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # mean pooling by hand over the model's own hidden states
    batch = encoder.tokenizer(["tumour cells"], return_tensors="pt")
    with torch.inference_mode():
        hidden = encoder.model(**batch)[0][0]
    pooled = hidden.mean(0).numpy()
    np.testing.assert_allclose(vectors[1], pooled / np.linalg.norm(pooled), atol=1e-5)


def test_cls_pooling_is_read_from_a_sentence_transformers_pooling_config(tmp_path):
    folder = build_tiny_bert(tmp_path / "tiny")
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False})
    )
    encoder = Encoder(str(folder), device="cpu")
    assert encoder.pooling == "cls"
    batch = encoder.tokenizer(["aspirin"], return_tensors="pt")
    with torch.inference_mode():
        cls = encoder.model(**batch)[0][0, 0].numpy()
    np.testing.assert_allclose(encoder.encode(["aspirin"])[0], cls / np.linalg.norm(cls), atol=1e-5)


def test_bad_model_paths_name_the_path_and_the_problem(tmp_path):
    with pytest.raises(EncoderError, match="is not a folder"):
        Encoder(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(EncoderError, match="no config.json"):
        Encoder(str(tmp_path / "empty"))
    folder = build_tiny_bert(tmp_path / "tiny")
    (folder / "model.safetensors").unlink()
    with pytest.raises(EncoderError, match="no model weights"):
        Encoder(str(folder))


def test_bad_texts_are_named():
    encoder = packaged_encoder()
    with pytest.raises(EncoderError, match="one string"):
        encoder.encode("a single string")
    with pytest.raises(EncoderError, match=r"texts\[1\]: expected str, got int"):
        encoder.encode(["fine", 3])
