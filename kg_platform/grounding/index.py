"""The grounding index: the surface lookup table (orthography applied, derived surfaces
added, clashes resolved), precomputed from mesh/terms so ``KnowledgeGraph.open`` does not
redo it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import polars as pl

from kg_platform.grounding.common_words import COMMON_WORD_GUARD
from kg_platform.grounding.grounder import build_surface_table
from kg_platform.grounding.orthography import ORTHOGRAPHY_RULES
from kg_platform.storage.lake import Lake

SURFACES_KEY = "grounding/surfaces.parquet"
MANIFEST_KEY = "grounding/manifest.json"


@dataclass(frozen=True)
class GroundingIndexStats:
    terms: int
    surfaces: int
    surfaces_by_kind: dict[str, int]
    descriptors_reachable: int
    orthography_rules: int
    common_words: int


def build_grounding_index(lake: Lake) -> GroundingIndexStats:
    """Read mesh/terms, write grounding/surfaces.parquet, then its manifest (last)."""
    key = "mesh/terms.parquet"
    if not lake.exists(key):
        raise FileNotFoundError(f"{lake.path(key)}: materialise `mesh_tables` first")
    terms = pl.from_arrow(lake.read_parquet(key))
    surfaces = build_surface_table(terms)
    by_kind = dict(surfaces.group_by("kind").len().sort("kind").iter_rows())
    stats = GroundingIndexStats(
        terms=terms.height,
        surfaces=surfaces.height,
        surfaces_by_kind={k: int(v) for k, v in by_kind.items()},
        descriptors_reachable=int(surfaces["ui"].n_unique()),
        orthography_rules=len(ORTHOGRAPHY_RULES),
        common_words=len(COMMON_WORD_GUARD),
    )
    lake.write_parquet(SURFACES_KEY, surfaces.to_arrow())
    lake.write_bytes(MANIFEST_KEY, json.dumps(asdict(stats), indent=1).encode())
    return stats
