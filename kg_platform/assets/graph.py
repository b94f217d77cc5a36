"""The graph store (CSR arrays over corpus + MeSH) and the corpus profile report."""

import hashlib
import json
import tempfile

import dagster as dg

from kg_platform.assets.checks import check_results, check_specs, data_version
from kg_platform.assets.partitions import graph_builds, on_dimension, pubmed_releases, scope_for
from kg_platform.graph.contracts import CHECKS
from kg_platform.graph.version import GRAPH_FORMAT
from kg_platform.orchestration.records import latest
from kg_platform.resources.catalog import CatalogResource
from kg_platform.resources.lake import LakeResource
from kg_platform.storage.catalog import Catalog
from kg_platform.storage.reports import CORPUS_PROFILE as PROFILE_PREFIX

# always recounted when present: the most used descriptor in PubMed, and a common disease
NAMED_DESCRIPTORS = ("D006801", "D009203")  # Humans, Myocardial Infarction


def _graph_version(build) -> str:
    blob = "\n".join(f"{n}:{a.sha256}" for n, a in sorted(build.arrays.items()))
    return hashlib.sha256(blob.encode()).hexdigest()


def _judged(the_lake, store, delta) -> list:
    """The graph's checks of the staged build ``store``: its invariants, and the recount
    against the corpus (``delta``: an update's), whose aggregates run under the fold's memory
    limit, spilling past it: unbounded, DuckDB's peak follows its threads and the RAM it sees
    (benchmarks/recount_memory.py; docs/BENCHMARKS.md, *The graph recount's memory*)."""
    from kg_platform.graph.checks import check_invariants, recount

    the_catalog = Catalog(the_lake)  # in memory: concurrent builds share no database file
    with tempfile.TemporaryDirectory(prefix="kg-graph-recount-") as spill:
        con = the_catalog.connect_bounded(spill)
        try:
            the_catalog.refresh_views(con)
            return [
                check_invariants(store),
                recount(store, con, named_uis=NAMED_DESCRIPTORS, delta=delta),
            ]
        finally:
            con.close()


@dg.asset(
    partitions_def=graph_builds,
    deps=[on_dimension("corpus", "release"), on_dimension("mesh_tables", "mesh_year")],
    group_name="graph",
    kinds={"numpy", "duckdb"},
    code_version=str(GRAPH_FORMAT),
    check_specs=check_specs("graph", CHECKS, graph_builds),
)
def graph(
    context: dg.AssetExecutionContext, lake: LakeResource, catalog: CatalogResource
) -> dg.MaterializeResult:
    """Memory-mapped CSR arrays of one release's corpus against one MeSH year: citations
    both ways, MeSH descriptor <-> article with major flags, per-article year and flags,
    under graph/<release>/<year>/<build-id>/, published to its current.json only when both
    checks pass. Partitioned by **graph build = release x MeSH year**: the same corpus can
    be annotated against a newer thesaurus without rebuilding either."""
    # the step's own libraries (polars, duckdb): loaded here, not with the definitions
    from kg_platform.graph import layout
    from kg_platform.graph.checks import update_delta
    from kg_platform.graph.patch import build_update
    from kg_platform.graph.store import KGStore

    scope = scope_for(context)
    the_lake = lake.get().scoped(scope)
    provenance = {}
    for asset, partition in (("corpus", scope.release), ("mesh_tables", scope.mesh_year)):
        found = latest(context.instance, asset, partition)
        provenance[asset] = {"partition": partition, "data_version": found and found.data_version}
    # the build readers open now: an update's build is patched and recounted from it and the
    # fold's change
    try:
        published: str | None = layout.current_build_id(the_lake)
    except (FileNotFoundError, ValueError):  # none yet, or a pointer this build replaces
        published = None
    # patched from the published build when the last fold's change applies to it
    build, made = build_update(the_lake, published, provenance)
    store = KGStore.open(the_lake, build.build_id)
    delta, recounted_from = update_delta(the_lake, published, store)
    outcomes = _judged(the_lake, store, delta)
    results = check_results(context, outcomes, f"graph build {build.build_id}")
    layout.publish(the_lake, build.build_id)
    s = build.stats
    return dg.MaterializeResult(
        metadata={
            "build_id": build.build_id,
            "published": True,
            "path": the_lake.path(build.prefix),
            "corpus_partition": scope.release,
            "corpus_data_version": str(provenance["corpus"]["data_version"]),
            "mesh_partition": scope.mesh_year,
            "mesh_data_version": str(provenance["mesh_tables"]["data_version"]),
            "dagster/row_count": s.edges,
            "articles": s.n_articles,
            "descriptors": s.n_descriptors,
            "unknown_descriptors": s.n_unknown_descriptors,
            "citation_edges": s.citation_edges,
            "dangling_citations": s.dangling_citations,
            "duplicate_citations": s.duplicate_citations,
            "citation_retention": s.citation_retention,
            "mesh_pairs": s.mesh_pairs,
            "major_pairs": s.major_pairs,
            "quotable": s.quotable,
            "retracted": s.retracted,
            "expression_of_concern": s.concern,
            "edges": s.edges,
            "array_bytes": s.array_bytes,
            "build_seconds": s.seconds,
            # how the arrays were made: patched from the published build, or in full and why
            "build": made,
            # what graph_recount counted: every row, or the previous build and the update
            "recount": ("update: " if delta else "full: ") + recounted_from,
        },
        check_results=results,
        data_version=data_version(_graph_version(build)),
    )


@dg.asset(
    partitions_def=pubmed_releases,
    deps=["corpus"],
    group_name="graph",
    kinds={"duckdb"},
    code_version="2",
)
def corpus_profile(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    """How much citation graph the corpus keeps (overall and for its most recent 1/8, 1/4,
    1/2 by year) and per decade: articles, share with MeSH and abstract, mean references.
    Partitioned by **release**, like the corpus it profiles. After an incremental fold it is
    made from the last profile's per-article rows and the PMIDs the fold touched (the same
    figures as reading every row, graph/profile.article_rows_since); the metadata's
    `profiled` says which."""
    from kg_platform.graph import profile as p

    the_lake = lake.get().scoped(scope_for(context))
    inputs = p.profile_inputs(the_lake)  # before reading: what these rows are made from
    delta, how = p.profile_delta(the_lake)
    the_catalog = Catalog(the_lake)
    with tempfile.TemporaryDirectory(prefix="kg-profile-") as spill:
        # the citations aggregate holds a row per citing article: bounded, it spills
        con = the_catalog.connect_bounded(spill)
        try:
            the_catalog.refresh_views(con)
            if delta is None:
                p.article_rows_from_parts(con, the_lake)
                moved = {}
            else:
                moved = p.article_rows_since(con, delta.previous, delta.touched)
            profile = p.summarise(con)
            rows = con.sql(f"SELECT {p.ROW_COLUMNS} FROM {p.ROWS}").to_arrow_table()
        finally:
            con.close()
    png = p.render_png(profile)
    markdown = p.render_markdown(profile, png)
    with the_lake.transaction() as staged:
        staged.write_bytes(f"{PROFILE_PREFIX}/profile.png", png)
        staged.write_bytes(f"{PROFILE_PREFIX}/profile.json", p.render_json(profile))
        staged.write_bytes(f"{PROFILE_PREFIX}/report.md", markdown.encode())
        staged.write_parquet(p.PROFILE_ROWS, rows)
        staged.write_bytes(p.PROFILE_INPUTS, json.dumps(inputs, sort_keys=True).encode())
        digest = staged.digest([f"{PROFILE_PREFIX}/profile.json"])
    return dg.MaterializeResult(
        metadata={
            "report": dg.MetadataValue.md(markdown),
            "path": the_lake.path(PROFILE_PREFIX),
            "articles": profile.articles,
            "retention": profile.retention,
            **{
                f"retention_{s.label.replace('most recent ', 'recent_').replace('/', '_of_')}": (
                    s.retention
                )
                for s in profile.slices
            },
            # what the rows were made from: every corpus row, or the last profile and the fold
            "profiled": ("update: " if delta else "full: ") + how,
            **{f"profiled_{k}": v for k, v in moved.items()},
        },
        data_version=data_version(digest),
    )


defs = dg.Definitions(assets=[graph, corpus_profile])
