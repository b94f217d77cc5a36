"""What the Dagster definitions declare about a graph build: its checks (kg_platform.graph.checks
runs them; that module loads numpy and DuckDB, imported by the step that builds the graph)."""

from kg_platform.checks import Checks

# both guard every reader of the graph: a failure leaves the published build in place
CHECKS: Checks = {
    "graph_invariants": (
        "indptr monotone, indices in range and ascending, flags aligned, sha256",
        True,
    ),
    "graph_recount": (
        "totals and >=100 random descriptors and articles recounted from DuckDB",
        True,
    ),
}
