"""``load_reader``: one way to open a reader folder, whatever kind wrote it; every error
names the folder or the file that is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kg_platform.answer.readers.classifier import CrossEncoderClassifier
from kg_platform.answer.readers.cues import CueReader, CueRecipe, train_cue_reader
from kg_platform.answer.readers.loading import load_reader, reader_kind
from kg_platform_tests.answer.readers.conftest import synthetic_questions


def tiny_sequence_classifier(folder: Path, tiny_bert: Path, num_labels: int = 3) -> Path:
    """A 2-layer BERT with a ``num_labels``-way head built from a config, no reader.json:
    the shape of any Hugging Face sequence-classification folder."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    config = BertConfig.from_pretrained(str(tiny_bert), num_labels=num_labels)
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(str(folder))
    BertTokenizerFast.from_pretrained(str(tiny_bert)).save_pretrained(str(folder))
    return folder


def test_cue_folder_round_trip(tmp_path) -> None:
    questions = synthetic_questions(30)
    reader = train_cue_reader(questions, seed=0, recipe=CueRecipe(C=10.0))
    reader.save(tmp_path / "cues")
    assert reader_kind(tmp_path / "cues") == "cues"
    loaded = load_reader(tmp_path / "cues")
    assert isinstance(loaded, CueReader) and loaded.name == "cues"
    texts = [q.context for q in questions[:6]]
    out = loaded.posteriors(questions[0].question, texts)
    np.testing.assert_array_equal(out, reader.posteriors(questions[0].question, texts))
    # the cue word decides the label: yes, no, maybe, yes, no, maybe
    assert out.argmax(axis=1).tolist() == [0, 1, 2, 0, 1, 2]


def test_hugging_face_sequence_classifier_folder(tmp_path, tiny_bert) -> None:
    folder = tiny_sequence_classifier(tmp_path / "bert-cls", tiny_bert)
    assert json.loads((folder / "config.json").read_text())["architectures"] == [
        "BertForSequenceClassification"
    ]
    assert reader_kind(folder) == "cross-encoder"
    reader = load_reader(folder, device="cpu")
    assert isinstance(reader, CrossEncoderClassifier)
    assert reader.name == "cross-encoder:bert-cls"
    out = reader.posteriors("does the treatment work", ["improved dose", "unclear", ""])
    assert out.dtype == np.float32 and out.shape == (3, 3)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-6)
    # two labels are not yes/no/maybe
    two = tiny_sequence_classifier(tmp_path / "bert-2", tiny_bert, num_labels=2)
    with pytest.raises(ValueError, match=f"^{two}: 2 labels, a reader needs 3$"):
        load_reader(two, device="cpu")


def test_causal_lm_config_is_recognised(tmp_path) -> None:
    folder = tmp_path / "lm"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    assert reader_kind(folder) == "causal-lm"
    # no weights or tokenizer: the error names the folder
    with pytest.raises(ValueError, match=f"^{folder}: cannot load a causal LM"):
        load_reader(folder, device="cpu")


def test_bogus_folders_are_named(tmp_path, tiny_bert) -> None:
    with pytest.raises(ValueError, match=f"^{tmp_path}/missing: reader folder not found$"):
        load_reader(tmp_path / "missing")
    # folder: (its reader.json, or None for none; the error)
    for name, (written, error) in {
        "empty": (None, ": neither reader.json nor a Hugging Face config.json$"),
        "unknown": ('{"reader": "oracle"}', "/reader.json: unknown reader kind 'oracle'$"),
        "broken": ("{not json", "/reader.json: not JSON"),
        # a cue reader's metadata without its model file
        "half": ('{"reader": "cues"}', ": not a saved cue reader"),
    }.items():
        folder = tmp_path / name
        folder.mkdir()
        if written is not None:
            (folder / "reader.json").write_text(written)
        with pytest.raises(ValueError, match=f"^{folder}{error}"):
            load_reader(folder)
    # an encoder without a head is not a reader
    with pytest.raises(
        ValueError, match=rf"^{tiny_bert}/config.json: architectures \['BertModel'\]"
    ):
        load_reader(tiny_bert)
