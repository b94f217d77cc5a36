"""Reader configurations: stable keys, lake registration, recipes, and saved-reader folders."""

from __future__ import annotations

import json

import pytest

from kg_platform.answer.readers.base import content_hash
from kg_platform.answer.readers.classifier import ClassifierRecipe
from kg_platform.answer.readers.cues import CueRecipe, train_cue_reader
from kg_platform.answer.readers.probe import ProbeRecipe
from kg_platform.evaluation.common.configs import config_object
from kg_platform.evaluation.pubmedqa.reader_configs import (
    CONFIGS_PREFIX,
    ReaderConfig,
    folder_config,
    load_reader_config,
    recipe_of,
    register_reader_config,
)
from kg_platform.storage.lake import Lake
from kg_platform_tests.evaluation.pubmedqa.fixtures import dev_questions


def test_keys_are_stable_and_order_free() -> None:
    # a changed key orphans every registered partition: this pins the hashing
    assert ReaderConfig("cues", "dev-1234abcd").key == "cues-c0f9308b"
    one = ReaderConfig("minilm", "dev-1234abcd", recipe={"epochs": 2, "max_length": 128})
    other = ReaderConfig("minilm", "dev-1234abcd", recipe={"max_length": 128, "epochs": 2})
    assert one.key == other.key == "minilm-6bbe3f94"
    assert ReaderConfig("cues", "dev-1234abcd", seed=1).key != "cues-c0f9308b"


def test_register_and_load_round_trip(tmp_path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    config = ReaderConfig("cues", "dev-1234abcd", folds=3, truncations=(1100, 3000))
    key = register_reader_config(lake, config)
    assert key == config.key
    assert load_reader_config(lake, key) == config
    assert (tmp_path / "lake" / config_object(CONFIGS_PREFIX, key)).is_file()


def test_an_altered_configuration_file_is_refused(tmp_path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    key = register_reader_config(lake, ReaderConfig("cues", "dev-1234abcd"))
    path = tmp_path / "lake" / config_object(CONFIGS_PREFIX, key)
    payload = json.loads(path.read_text())
    path.write_text(json.dumps({**payload, "folds": 2}))
    with pytest.raises(ValueError, match=f"hashes to cues-[0-9a-f]{{8}}, not {key}"):
        load_reader_config(lake, key)
    with pytest.raises(FileNotFoundError, match="reader configuration cues-00000000"):
        load_reader_config(lake, "cues-00000000")


def test_recipes() -> None:
    assert recipe_of(ReaderConfig("cues", "d-1", recipe={"C": 0.5})) == CueRecipe(C=0.5)
    assert recipe_of(ReaderConfig("minilm", "d-1")) == ClassifierRecipe()
    probe = ReaderConfig("probe", "d-1", recipe={"features": ["t", "prod"], "C": 0.1})
    assert recipe_of(probe) == ProbeRecipe(features=("t", "prod"), C=0.1)
    assert probe.retrainable and probe.key.startswith("probe-")
    with pytest.raises(ValueError, match="pooling .median."):
        recipe_of(ReaderConfig("probe", "d-1", recipe={"pooling": "median"}))
    with pytest.raises(ValueError, match="reader 'gpt'"):
        ReaderConfig("gpt", "d-1")
    with pytest.raises(ValueError, match="folds >= 2"):
        ReaderConfig("cues", "d-1", folds=1)


def test_a_saved_reader_folder_is_a_configuration(tmp_path) -> None:
    reader = train_cue_reader(dev_questions()[:30], 0, CueRecipe())
    reader.save(tmp_path / "saved")
    config = folder_config(tmp_path / "saved", "d-1")
    assert config.reader == "folder" and not config.retrainable
    assert config.folder_hash == content_hash(tmp_path / "saved")
    assert config.key.startswith("folder-")
    assert recipe_of(config) is None
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty: neither reader.json"):
        folder_config(tmp_path / "empty", "d-1")
