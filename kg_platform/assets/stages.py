"""Every stage's definitions in pipeline order: what `kg_platform.definitions` merges and
what a Celery worker preloads. Importing it reads no settings."""

from kg_platform.assets import (
    allocation,
    answering,
    embeddings,
    graph,
    grounding,
    mesh,
    pubmed,
    updates,
    verification,
)

STAGES = [
    pubmed.defs,
    updates.defs,
    mesh.defs,
    graph.defs,
    grounding.defs,
    embeddings.defs,
    allocation.defs,
    answering.defs,
    verification.defs,
]
