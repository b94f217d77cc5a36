"""The graph store (CSR arrays over corpus + MeSH) and the corpus profile report."""

from __future__ import annotations

import dagster as dg

from kg_platform.graph import layout
from kg_platform.graph.build import build_graph
from kg_platform.graph.checks import check_invariants, recount
from kg_platform.graph.profile import profile_corpus, render_json, render_markdown, render_png
from kg_platform.graph.store import KGStore
from kg_platform.resources.catalog import CatalogResource
from kg_platform.resources.lake import LakeResource

GRAPH_CHECKS = [
    ("graph_invariants", "indptr monotone, indices in range and ascending, flags aligned, sha256"),
    ("graph_recount", "totals and >=100 random descriptors and articles recounted from DuckDB"),
]
PROFILE_PREFIX = "reports/corpus_profile"
# always recounted when present: the most used descriptor in PubMed, and a common disease
NAMED_DESCRIPTORS = ("D006801", "D009203")  # Humans, Myocardial Infarction


@dg.asset(
    deps=["corpus", "mesh_tables"],
    group_name="graph",
    kinds={"numpy", "duckdb"},
    check_specs=[
        dg.AssetCheckSpec(name, asset="graph", description=desc, blocking=True)
        for name, desc in GRAPH_CHECKS
    ],
)
def graph(lake: LakeResource, catalog: CatalogResource) -> dg.MaterializeResult:
    """Memory-mapped CSR arrays of the corpus: citations both ways, MeSH descriptor <-> article
    with major flags, per-article year and flags, under graph/<build-id>/ (published to
    graph/current.json only when both checks pass)."""
    the_lake = lake.get()
    build = build_graph(the_lake)
    store = KGStore.open(the_lake, build.build_id)
    the_catalog = catalog.get(the_lake)
    con = the_catalog.connect()
    try:
        the_catalog.refresh_views(con)
        outcomes = [check_invariants(store), recount(store, con, named_uis=NAMED_DESCRIPTORS)]
    finally:
        con.close()
    published = all(o.passed for o in outcomes)
    if published:
        layout.publish(the_lake, build.build_id)
    s = build.stats
    return dg.MaterializeResult(
        metadata={
            "build_id": build.build_id,
            "published": published,
            "path": the_lake.path(build.prefix),
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
        },
        check_results=[
            dg.AssetCheckResult(
                check_name=o.name,
                passed=o.passed,
                metadata={"details": o.description, **o.metadata},
            )
            for o in outcomes
        ],
    )


@dg.asset(deps=["corpus"], group_name="graph", kinds={"duckdb"})
def corpus_profile(lake: LakeResource, catalog: CatalogResource) -> dg.MaterializeResult:
    """How much citation graph the corpus keeps (overall and for its most recent 1/8, 1/4,
    1/2 by year) and per decade: articles, share with MeSH and abstract, mean references."""
    the_lake = lake.get()
    the_catalog = catalog.get(the_lake)
    con = the_catalog.connect()
    try:
        the_catalog.refresh_views(con)
        profile = profile_corpus(con)
    finally:
        con.close()
    markdown = render_markdown(profile)
    the_lake.write_bytes(f"{PROFILE_PREFIX}/profile.png", render_png(profile))
    the_lake.write_bytes(f"{PROFILE_PREFIX}/profile.json", render_json(profile))
    the_lake.write_bytes(f"{PROFILE_PREFIX}/report.md", markdown.encode())
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
        }
    )


defs = dg.Definitions(assets=[graph, corpus_profile])
