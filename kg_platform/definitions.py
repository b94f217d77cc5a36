"""The Dagster code location: every stage's assets, jobs, sensors and schedules, with the
resources bound from kg_platform.settings (environment, then `.kg/sources.json`)."""

import dagster as dg

from kg_platform.assets.stages import STAGES
from kg_platform.orchestration.executor import executor_for
from kg_platform.resources.catalog import CatalogResource
from kg_platform.resources.encoder import EncoderResource
from kg_platform.resources.lake import LakeResource
from kg_platform.resources.mesh import MeshSourceResource
from kg_platform.resources.pubmed_source import PubmedSourceResource
from kg_platform.settings import Settings

# Dagster's default executor: steps in their own processes (multiprocess) unless a run's
# config asks for `in_process`. `kg build` asks for it: its backfill's runs are one partition
# each with a linear chain of steps (download -> tables; fold -> profile), so its parallelism
# is the run queue's, and a step process would only add its start-up (a fresh interpreter
# loading the definitions, for every step).
EXECUTOR = dg.multi_or_in_process_executor


def build_resources(settings: Settings) -> dict[str, dg.ConfigurableResource]:
    return {
        "lake": LakeResource(root=settings.lake),
        "catalog": CatalogResource(database=settings.catalog),
        "pubmed_source": PubmedSourceResource(base=settings.pubmed_source),
        "mesh_source": MeshSourceResource(location=settings.mesh_source),
        "encoder": EncoderResource(),
    }


def build_definitions(settings: Settings | None = None) -> dg.Definitions:
    settings = settings or Settings.load()
    return dg.Definitions.merge(
        *STAGES,
        dg.Definitions(
            resources=build_resources(settings), executor=executor_for(settings, EXECUTOR)
        ),
    )


defs = build_definitions()
