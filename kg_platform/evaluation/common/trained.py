"""Trained-model records: the JSON pointer a model asset writes for its configuration
(``readers/trained/<config key>.json``, ``verifiers/trained/<config key>.json``), and the
model's files read back from the lake."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kg_platform.answer.verifier import ClassifierVerifier, ProbeVerifier, load_verifier
from kg_platform.storage.lake import Lake
from kg_platform.storage.studies import READERS_TRAINED, VERIFIERS_TRAINED


def reader_trained_key(config_key: str) -> str:
    return f"{READERS_TRAINED}/{config_key}.json"


def read_trained_record(lake: Lake, key: str, what: str, asset: str) -> dict:
    """The JSON record a model asset wrote at ``key``; a clear error naming ``what`` (the
    configuration) and the asset to materialise when it is missing."""
    if not lake.exists(key):
        raise FileNotFoundError(f"{what}: {lake.path(key)} is missing; materialise {asset} first")
    return json.loads(lake.read_bytes(key))


def read_trained_reader(lake: Lake, config_key: str) -> dict:
    return read_trained_record(
        lake, reader_trained_key(config_key), f"reader configuration {config_key}", "reader_model"
    )


@contextmanager
def reader_folder(lake: Lake, record: dict) -> Iterator[Path]:
    """A local folder holding the trained reader's files as the lake holds them (staged
    ones inside a transaction)."""
    with tempfile.TemporaryDirectory(prefix="kg-reader-") as tmp:
        for name in record["files"]:
            key, target = f"{record['model_prefix']}/{name}", Path(tmp) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if lake.is_local:
                os.symlink(lake.path(key), target)
            else:
                target.write_bytes(lake.read_bytes(key))
        yield Path(tmp)


def verifier_trained_key(config_key: str) -> str:
    return f"{VERIFIERS_TRAINED}/{config_key}.json"


def read_trained_verifier(lake: Lake, config_key: str) -> dict:
    return read_trained_record(
        lake,
        verifier_trained_key(config_key),
        f"verifier configuration {config_key}",
        "verifier_model",
    )


def load_trained_verifier(lake: Lake, record: dict) -> ClassifierVerifier | ProbeVerifier:
    """The verifier ``verifier_model`` saved, with its tau."""
    with reader_folder(lake, record) as folder:
        return load_verifier(folder, device="cpu")
