"""Reader configurations as lake objects, keyed by reader kind plus a content-hash prefix.

A configuration fixes everything a posterior cache depends on besides the question set:
the reader kind and its recipe, the seed, the cross-fitting folds, the truncations swept,
the number of shuffled-label seeds, the candidates per question and the DEV question set the
reader is trained on. Each registered configuration is one ``readers/configs/<key>.json``
object (``cues-1a2b3c4d``) and one ``reader_configs`` partition, so a changed configuration
is a new partition, never a silent overwrite (as question sets are, ``common/question_sets.py``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kg_platform.answer.readers.base import content_hash
from kg_platform.evaluation.common.configs import load_config, register_config
from kg_platform.evaluation.pubmedqa.candidates import MAX_CANDIDATES, TRUNCATIONS
from kg_platform.storage.lake import Lake
from kg_platform.storage.studies import READER_CONFIGS

# cues: the n-gram cue reader; minilm: the cross-encoder classifier on the packaged MiniLM;
# probe: a logistic regression on the frozen packaged MiniLM's question and text vectors;
# folder: a reader saved in a local folder (not retrained, so neither cross-fitted nor shuffled)
READER_KINDS = ("cues", "minilm", "probe", "folder")
CONFIGS_PREFIX = READER_CONFIGS


@dataclass(frozen=True)
class ReaderConfig:
    """One reader configuration; ``recipe`` overrides the reader recipe's defaults."""

    reader: str
    training_set: str
    recipe: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    folds: int = 5
    truncations: tuple[int, ...] = TRUNCATIONS
    shuffled_seeds: int = 3
    candidates: int = MAX_CANDIDATES
    folder: str = ""  # reader "folder": the saved reader's local path
    folder_hash: str = ""  # and its content hash, so a changed folder is a new configuration

    def __post_init__(self) -> None:
        if self.reader not in READER_KINDS:
            raise ValueError(f"reader {self.reader!r}: expected one of {READER_KINDS}")
        if (self.reader == "folder") != bool(self.folder):
            raise ValueError(f"reader {self.reader!r}: a folder is given exactly for 'folder'")
        if self.folds < 2 or self.shuffled_seeds < 0 or self.candidates < 1:
            raise ValueError(f"{self}: folds >= 2, shuffled_seeds >= 0, candidates >= 1 required")
        if not self.truncations or any(t < 0 for t in self.truncations):
            raise ValueError(f"truncations {self.truncations}: expected characters >= 0")

    def to_json(self) -> dict[str, Any]:
        payload = asdict(self)
        payload["recipe"] = dict(sorted(self.recipe.items()))
        payload["truncations"] = list(self.truncations)
        return payload

    @classmethod
    def from_json(cls, payload: Mapping[str, Any]) -> ReaderConfig:
        values = dict(payload)
        values["truncations"] = tuple(int(t) for t in values.get("truncations", TRUNCATIONS))
        return cls(**values)

    @property
    def key(self) -> str:
        """``<reader>-<sha256 of the sorted JSON>[:8]``: the partition key."""
        blob = json.dumps(self.to_json(), sort_keys=True).encode()
        return f"{self.reader}-{hashlib.sha256(blob).hexdigest()[:8]}"

    @property
    def retrainable(self) -> bool:
        """Whether its recipe can be trained again (cross-fitting, shuffled labels)."""
        return self.reader != "folder"


def recipe_of(config: ReaderConfig) -> Any:
    """The recipe ``crossfit.train_reader`` trains (None for a saved folder)."""
    if config.reader == "cues":
        from kg_platform.answer.readers.cues import CueRecipe

        return CueRecipe(**config.recipe)
    if config.reader == "minilm":
        from kg_platform.answer.readers.classifier import ClassifierRecipe

        return ClassifierRecipe(**config.recipe)
    if config.reader == "probe":
        from kg_platform.answer.readers.probe import ProbeRecipe

        return ProbeRecipe(**config.recipe)
    return None


def register_reader_config(lake: Lake, config: ReaderConfig) -> str:
    return register_config(lake, CONFIGS_PREFIX, config)


def load_reader_config(lake: Lake, key: str) -> ReaderConfig:
    hint = "register it with `kg eval pubmedqa`"
    return load_config(
        lake, CONFIGS_PREFIX, key, ReaderConfig.from_json, "reader configuration", hint
    )


def folder_config(folder: str | Path, training_set: str, **options: Any) -> ReaderConfig:
    """A configuration reading the saved reader in ``folder`` (its content hash recorded)."""
    from kg_platform.answer.readers.loading import reader_kind

    folder = Path(folder).absolute()
    reader_kind(folder)  # a ValueError naming the folder when it holds no reader
    return ReaderConfig(
        reader="folder",
        training_set=training_set,
        folder=str(folder),
        folder_hash=content_hash(folder),
        **options,
    )


READERS = ("cues", "minilm", "probe")


def config_for(reader: str, recipe: str, training_set: str, **options: Any) -> ReaderConfig:
    """The configuration of `kg eval pubmedqa --reader` (a name in READERS with its
    ``--recipe`` JSON, or a reader folder); a ValueError naming the option that is wrong."""
    if reader in READERS:
        try:
            fields = json.loads(recipe)
        except json.JSONDecodeError as error:
            raise ValueError(f"--recipe {recipe}: not JSON ({error})") from None
        config = ReaderConfig(reader=reader, training_set=training_set, recipe=fields, **options)
        try:
            recipe_of(config)
        except TypeError as error:  # an unknown field
            raise ValueError(f"--recipe {recipe}: {error}") from None
        return config
    if Path(reader).is_dir():
        return folder_config(reader, training_set, **options)
    raise ValueError(
        f"--reader {reader}: unknown reader (expected cues, minilm, probe or a reader folder)"
    )
