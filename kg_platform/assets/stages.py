"""Every stage's definitions in pipeline order: what `kg_platform.definitions` merges and
what a Celery worker preloads. Importing it reads no settings.

The asset modules import the domain modules their steps run inside the step functions, so
loading the definitions (the code server, every run and every step: each a fresh
interpreter) does not pay for what only a step uses (pandera, the parser, the evaluations
and their libraries). A Celery worker's parent imports them once instead
(:func:`load_step_imports`), so that its prefork children, one per step, start with them
loaded.
"""

import importlib

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

# what the steps import when they run: the modules the asset functions and the resources'
# get() import, and the libraries those import on first use (test_preload checks the list
# against the asset and resource modules' function-level imports)
# what a file run's step imports on first use: the parser and its recount, the pandera
# models (pandera, polars, pandas), pyarrow's Parquet writer and the lake's local filesystem
# (a transaction's digest reads through it); `kg build`'s forkserver preloads these for its
# runs (kg_platform.assets.run_imports)
FILE_RUN_MODULES = (
    "kg_platform.pubmed.parse",
    "kg_platform.pubmed.recount",
    "kg_platform.schemas.models",
    "kg_platform.schemas.one_pass",
    "pyarrow.parquet",
    "fsspec",
)
STEP_MODULES = (
    # pubmed: a file run's, then the fold's, the source's and the checks' libraries
    *FILE_RUN_MODULES,
    "kg_platform.pubmed.tables",
    "kg_platform.pubmed.fold",
    "kg_platform.pubmed.source",
    "pandera.errors",
    "polars",
    "numpy",
    "duckdb",
    # mesh
    "kg_platform.mesh.checks",
    "kg_platform.mesh.source",
    "kg_platform.mesh.tables",
    # graph
    "kg_platform.graph.build",
    "kg_platform.graph.checks",
    "kg_platform.graph.patch",
    "kg_platform.graph.profile",
    "kg_platform.graph.store",
    # grounding
    "kg_platform.grounding.index",
    "kg_platform.grounding.surface_index",
    "kg_platform.evaluation.grounding.evaluation",
    "kg_platform.evaluation.grounding.hybrid",
    # embeddings
    "kg_platform.embeddings.encoder",
    "kg_platform.embeddings.concepts",
    "kg_platform.embeddings.index",
    "kg_platform.embeddings.shards",
    "kg_platform.embeddings.tokens",
    # evaluation, answering and verification reports
    "kg_platform.evaluation.allocation.evaluation",
    "kg_platform.evaluation.common.question_sets",
    "kg_platform.evaluation.pubmedqa.answering",
    "kg_platform.evaluation.pubmedqa.report",
    "kg_platform.evaluation.pubmedqa.reader_configs",
    "kg_platform.evaluation.scifact.verifier_training",
    "kg_platform.evaluation.scifact.report",
    "kg_platform.evaluation.scifact.transfer",
    "kg_platform.evaluation.refusal.report",
)


def load_step_imports() -> list[str]:
    """Import every module of STEP_MODULES (what a worker's parent does once); returns them."""
    for name in STEP_MODULES:
        importlib.import_module(name)
    return list(STEP_MODULES)
