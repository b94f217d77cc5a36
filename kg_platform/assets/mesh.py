"""MeSH as the ontology layer: descriptors, tree numbers, broader links, allowable
qualifiers, terms and supplementary aliases, one Parquet each under mesh/."""

import time

import dagster as dg

from kg_platform.mesh.checks import MESH_CHECK_NAMES, check_mesh_build, recount_source
from kg_platform.mesh.tables import build_mesh, write_mesh_tables
from kg_platform.resources.lake import LakeResource
from kg_platform.resources.mesh import MeshSourceResource

CHECK_DESCRIPTIONS = {
    **{
        name: f"mesh/{name.removesuffix('_schema')}.parquet matches its pandera model"
        for name in MESH_CHECK_NAMES
        if name.endswith("_schema")
    },
    "uis_well_formed_unique": "descriptor, qualifier and supplementary UIs are well formed "
    "and unique; every row names a known descriptor",
    "tree_parents_exist": "every tree number's parent prefix exists, except category roots",
    "supplementary_mappings_known": "every supplementary alias maps to a known descriptor "
    "(dangling mappings are dropped and counted)",
    "recount_matches_source": "an independent pass over the source files counts the "
    "descriptors, tree numbers, entry terms and supplementary records that were loaded",
}
# these guard every downstream reader of mesh/: a failure stops the tables being written
BLOCKING = {name for name in MESH_CHECK_NAMES if name.endswith("_schema")} | {
    "uis_well_formed_unique"
}


@dg.asset(
    group_name="mesh",
    kinds={"parquet"},
    check_specs=[
        dg.AssetCheckSpec(
            name,
            asset="mesh_tables",
            description=CHECK_DESCRIPTIONS[name],
            blocking=name in BLOCKING,
        )
        for name in MESH_CHECK_NAMES
    ],
)
def mesh_tables(
    context: dg.AssetExecutionContext, lake: LakeResource, mesh_source: MeshSourceResource
) -> dg.MaterializeResult:
    """MeSH descriptors, tree numbers, broader links, allowable qualifiers, terms (names,
    entry terms, de-inverted forms, supplementary aliases), qualifiers and supplementary
    aliases: seven Parquet tables under mesh/."""
    started = time.monotonic()
    spec = mesh_source.get()
    context.log.info(spec.describe())
    build = build_mesh(spec)
    outcomes = check_mesh_build(build, recount_source(spec))
    failed_blocking = [o.name for o in outcomes if o.name in BLOCKING and not o.passed]
    if failed_blocking:
        # the previous mesh/ tables stay as they were: nothing is written
        raise dg.Failure(
            description=f"{spec.location}: MeSH checks failed: {', '.join(failed_blocking)}",
            metadata={o.name: str(o.metadata)[:2000] for o in outcomes if not o.passed},
        )
    written = write_mesh_tables(lake.get(), build)
    metadata: dict[str, object] = {
        "source": dg.MetadataValue.md(f"```\n{spec.describe()}\n```"),
        **{f"rows_{name}": rows for name, rows in build.row_counts().items()},
        **{f"bytes_{name}": size for name, size in written.items()},
        **{f"rule_{name}": value for name, value in build.stats.as_dict().items()},
        "supplementary_records": build.n_supplementary,
        "dangling_supplementary_mappings": build.stats.scr_dangling_mappings,
        "seconds": round(time.monotonic() - started, 2),
    }
    return dg.MaterializeResult(
        metadata=metadata,
        check_results=[
            dg.AssetCheckResult(
                check_name=o.name,
                passed=o.passed,
                metadata={
                    k: v if isinstance(v, int | str) else str(v) for k, v in o.metadata.items()
                },
                severity=dg.AssetCheckSeverity.ERROR
                if o.name in BLOCKING
                else dg.AssetCheckSeverity.WARN,
            )
            for o in outcomes
        ],
    )


defs = dg.Definitions(assets=[mesh_tables])
