"""Study configurations as lake objects: ``<prefix>/<key>.json``, written once under the key
their content hashes to (a changed configuration is a new partition, never an overwrite) and
read back only while they still hash to it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from kg_platform.storage.lake import Lake

Config = TypeVar("Config")


def config_object(prefix: str, key: str) -> str:
    return f"{prefix}/{key}.json"


def register_config(lake: Lake, prefix: str, config: Any) -> str:
    """Write ``config`` (a ``key`` and a ``to_json()``) under its key, once; returns the key."""
    target = config_object(prefix, config.key)
    if not lake.exists(target):
        lake.write_bytes(target, json.dumps(config.to_json(), indent=2, sort_keys=True).encode())
    return config.key


def load_config(
    lake: Lake, prefix: str, key: str, parse: Callable[[dict], Config], what: str, hint: str
) -> Config:
    """The registered configuration ``key`` parsed; a clear error naming ``what`` when it is
    missing (with ``hint``: how to register it) or altered."""
    target = config_object(prefix, key)
    if not lake.exists(target):
        raise FileNotFoundError(f"{what} {key}: {lake.path(target)} is missing; {hint}")
    config = parse(json.loads(lake.read_bytes(target)))
    if config.key != key:
        raise ValueError(f"{lake.path(target)}: its content hashes to {config.key}, not {key}")
    return config
