"""Imported once by each Celery worker's parent process (`celery worker -I`), so every
prefork child, one per step, starts with dagster, the assets and their libraries loaded and
only reads `kg_platform.definitions` (and with it the current kg settings) itself. The
step modules (the parser, pandera's models, the evaluations) are imported here explicitly:
the definitions no longer import them (kg_platform.assets.stages.STEP_MODULES)."""

import warnings

# Dagster flags beta parameters (backfill_policy) on every import; not the operator's concern
warnings.filterwarnings("ignore", message=r".*is currently in (beta|preview)")

import dagster  # noqa: E402, F401
import dagster_celery.tasks  # noqa: E402, F401
import dagster_postgres  # noqa: E402, F401

# every stage of kg_platform.definitions, from the one list it merges
from kg_platform.assets import stages  # noqa: E402
from kg_platform.resources import catalog, encoder, lake, pubmed_source  # noqa: E402, F401
from kg_platform.resources import mesh as mesh_resource  # noqa: E402, F401

# and what the steps import when they run (the definitions leave it to them): once here,
# not once per step in each child
stages.load_step_imports()
