"""MeSH as the ontology layer: descriptors, tree numbers, broader links, allowable
qualifiers, terms and supplementary aliases, one Parquet each under mesh/."""

import time

import dagster as dg

from kg_platform.assets.checks import check_results, check_specs, data_version
from kg_platform.assets.partitions import mesh_years, scope_for
from kg_platform.assets.table_metadata import table_metadata
from kg_platform.mesh.contracts import CHECKS
from kg_platform.resources.lake import LakeResource
from kg_platform.resources.mesh import MeshSourceResource
from kg_platform.schemas import MESH_TABLES
from kg_platform.storage.mesh import MESH_PREFIX, mesh_key


@dg.asset(
    partitions_def=mesh_years,
    group_name="mesh",
    kinds={"parquet"},
    code_version="3",
    check_specs=check_specs("mesh_tables", CHECKS, mesh_years),
)
def mesh_tables(
    context: dg.AssetExecutionContext, lake: LakeResource, mesh_source: MeshSourceResource
) -> dg.MaterializeResult:
    """MeSH descriptors, tree numbers, broader links, allowable qualifiers, terms (names,
    every concept's entry terms with concept UI, term UI, preferred, permuted and lexical
    tag, de-inverted forms, supplementary aliases), qualifiers and supplementary
    aliases: seven Parquet tables under mesh/<year>/. Partitioned by **MeSH year** (2024):
    NLM publishes one thesaurus a year and a graph is built against one of them."""
    # the step's own libraries (polars, lxml, pandera): loaded here, not with the definitions
    from kg_platform.mesh.checks import check_mesh_build, recount_source
    from kg_platform.mesh.source import mesh_year
    from kg_platform.mesh.tables import build_mesh, write_mesh_tables

    started = time.monotonic()
    year = context.partition_key
    spec = mesh_source.get()
    if mesh_year(spec) != year:
        raise dg.Failure(
            description=f"mesh_tables[{year}]: the MeSH source {spec.location} is MeSH "
            f"{mesh_year(spec)}; build that partition, or point the MeSH source at {year}"
        )
    context.log.info(spec.describe())
    build = build_mesh(spec)
    outcomes = check_mesh_build(build, recount_source(spec))
    the_lake = lake.get().scoped(scope_for(context))
    with the_lake.transaction() as staged:
        results = check_results(context, outcomes, spec.location)
        written = write_mesh_tables(staged, build)
        digest = staged.digest([mesh_key(name) for name in sorted(written)])
    metadata: dict[str, object] = {
        "source": dg.MetadataValue.md(f"```\n{spec.describe()}\n```"),
        "path": the_lake.path(MESH_PREFIX),
        **table_metadata(MESH_TABLES["descriptors"], build.row_counts()["descriptors"]),
        **{f"rows_{name}": rows for name, rows in build.row_counts().items()},
        **{f"bytes_{name}": size for name, size in written.items()},
        **{f"rule_{name}": value for name, value in build.stats.as_dict().items()},
        "supplementary_records": build.n_supplementary,
        "dangling_supplementary_mappings": build.stats.scr_dangling_mappings,
        "seconds": round(time.monotonic() - started, 2),
    }
    return dg.MaterializeResult(
        metadata=metadata, check_results=results, data_version=data_version(digest)
    )


defs = dg.Definitions(assets=[mesh_tables])
