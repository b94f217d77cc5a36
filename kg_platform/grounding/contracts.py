"""What the Dagster definitions declare about the grounding index's checks
(kg_platform.grounding.index runs them; it loads Polars, imported by the step)."""

from kg_platform.checks import Checks

# each guards every question grounded against the index: a failure leaves the last good one
CHECKS: Checks = {
    "every_surface_unique_and_mapped": (
        "each surface stands once, for one descriptor of mesh/descriptors; every descriptor "
        "with a name has a surface",
        True,
    ),
    "index_round_trips": (
        "the load-ready index hashes to its header; every surface and descriptor name of the "
        "tables comes back from it, and nothing else",
        True,
    ),
    "index_grounds_as_table": (
        "a grounder over the index grounds questions made from the surfaces exactly as one "
        "over the table",
        True,
    ),
}
