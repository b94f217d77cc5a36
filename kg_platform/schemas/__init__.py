"""The tables' contract between stages: pandera (polars) models, one per table, declared in
:mod:`kg_platform.schemas.models` with the views derived from them (the parser's Arrow
schemas :data:`ARROW_SCHEMAS`, the UI's column descriptions :func:`columns`).

Importing this package costs nothing: pandera is loaded when a model is first used. Every
process that loads the Dagster definitions (the code server, each run, each step) imports
the modules that name these tables, and most never validate one. So the table names here
are plain tuples, the four registries (:data:`PUBMED_TABLES`, :data:`CORPUS_MODELS`,
:data:`MESH_TABLES`, :data:`ARROW_SCHEMAS`) are read-only mappings whose keys are known
without pandera and whose values come from the models module on first access, and every
other name of the models module (``Articles``, ``arrow_schema``, ...) is resolved from it
on first access (:func:`__getattr__`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

UI_DESCRIPTOR = r"^D\d{6,9}$"
UI_QUALIFIER = r"^Q\d{6,9}$"
UI_SUPPLEMENTARY = r"^C\d{6,9}$"

# the registries' keys, in their order (the models module's dicts are checked against them)
PUBMED_TABLE_NAMES = (
    "articles",
    "mesh_edges",
    "citations",
    "corrections",
    "chemicals",
    "pubtypes",
    "deletions",
)
# the corpus holds the current state: the per-file tables minus deletions
CORPUS_TABLE_NAMES = tuple(t for t in PUBMED_TABLE_NAMES if t != "deletions")
MESH_TABLE_NAMES = (
    "descriptors",
    "tree",
    "broader",
    "allowable",
    "terms",
    "qualifiers",
    "scr_aliases",
)

_MODELS = "kg_platform.schemas.models"


class _Registry(Mapping[str, Any]):
    """A read-only mapping with known keys whose values are the models module's dict
    ``attr``, loaded on the first access to a value."""

    def __init__(self, attr: str, names: tuple[str, ...]) -> None:
        self._attr = attr
        self._names = names
        self._values: dict[str, Any] | None = None

    def _loaded(self) -> dict[str, Any]:
        if self._values is None:
            loaded = getattr(importlib.import_module(_MODELS), self._attr)
            if tuple(loaded) != self._names:
                raise RuntimeError(
                    f"kg_platform.schemas.{self._attr}: the models module declares "
                    f"{tuple(loaded)}, the package names {self._names}"
                )
            self._values = loaded
        return self._values

    def __getitem__(self, name: str) -> Any:
        if name not in self._names:
            raise KeyError(name)
        return self._loaded()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __repr__(self) -> str:
        return f"<kg_platform.schemas.{self._attr}: {', '.join(self._names)}>"


PUBMED_TABLES: Mapping[str, Any] = _Registry("PUBMED_TABLES", PUBMED_TABLE_NAMES)
CORPUS_MODELS: Mapping[str, Any] = _Registry("CORPUS_MODELS", CORPUS_TABLE_NAMES)
MESH_TABLES: Mapping[str, Any] = _Registry("MESH_TABLES", MESH_TABLE_NAMES)
# the parser's Arrow schema per PubMed per-file table, keyed as PUBMED_TABLES
ARROW_SCHEMAS: Mapping[str, Any] = _Registry("ARROW_SCHEMAS", PUBMED_TABLE_NAMES)


def __getattr__(name: str) -> Any:
    """A model, constant or function of the models module (imported, with pandera, now)."""
    if name.startswith("__"):
        raise AttributeError(name)
    models = importlib.import_module(_MODELS)
    try:
        return getattr(models, name)
    except AttributeError:
        raise AttributeError(f"module 'kg_platform.schemas' has no attribute {name!r}") from None
