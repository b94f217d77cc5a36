"""What the hybrid grounder tests share: four real MeSH 2024 descriptors with some of their entry
terms, and the hybrid grounder over their concept index (the packaged encoder)."""

from __future__ import annotations

from functools import lru_cache

import polars as pl

from kg_platform.embeddings.concepts import ConceptIndex, build_concept_index
from kg_platform.embeddings.feeder import FeederSettings
from kg_platform.grounding.grounder import Grounder, build_surface_table
from kg_platform.grounding.hybrid import HybridGrounder
from kg_platform.storage.lake import Lake
from kg_platform.text.normalise import normalise
from kg_platform_tests.embeddings.models import packaged_encoder

# a few real MeSH 2024 descriptors with some of their entry terms
DESCRIPTORS = {
    "D001241": ("Aspirin", ["Acetylsalicylic Acid"]),
    "D009203": ("Myocardial Infarction", ["Heart Attack", "Cardiovascular Stroke"]),
    "D006973": ("Hypertension", ["High Blood Pressure"]),
    "D003920": ("Diabetes Mellitus", []),
}


def mesh_terms() -> pl.DataFrame:
    rows = []
    for ui, (name, entries) in DESCRIPTORS.items():
        rows.append((ui, name, normalise(name), "name"))
        rows += [(ui, e, normalise(e), "entry") for e in entries]
    return pl.DataFrame(rows, schema=["ui", "term", "normalised", "kind"], orient="row")


@lru_cache(maxsize=1)
def hybrid_grounder(tmp: str) -> HybridGrounder:
    lake = Lake(tmp)
    lake.write_parquet("mesh/terms.parquet", mesh_terms().to_arrow())
    build = build_concept_index(lake, packaged_encoder(), FeederSettings(workers=0))
    assert (build.surfaces, build.descriptors) == (8, 4)
    names = {ui: name for ui, (name, _) in DESCRIPTORS.items()}
    lexical = Grounder(build_surface_table(mesh_terms()), names)
    return HybridGrounder(lexical, packaged_encoder(), ConceptIndex.open(lake), threshold=0.5)
