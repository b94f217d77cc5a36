"""What the Dagster definitions declare about MeSH: the default source and the mesh_tables
asset's checks. The definitions load in every process that starts a run; the MeSH
readers and checks (polars, lxml, requests, pandera) are imported by the step that builds
the tables. So this module imports nothing of them.
"""

from kg_platform.checks import Checks
from kg_platform.schemas import MESH_TABLE_NAMES
from kg_platform.storage.mesh import mesh_key

NLM_MESH_XML_URL = "https://nlmpubs.nlm.nih.gov/projects/mesh/MESH_FILES/xmlmesh/"

# every check of the mesh_tables asset, in the order kg_platform.mesh.checks returns them;
# the schemas and the UI check guard every downstream reader of mesh/ (blocking: a failure
# stops the tables being written)
CHECKS: Checks = {
    **{
        f"{table}_schema": (f"{mesh_key(table)} matches its pandera model", True)
        for table in MESH_TABLE_NAMES
    },
    "uis_well_formed_unique": (
        "descriptor, qualifier and supplementary UIs are well formed and unique; every row "
        "names a known descriptor",
        True,
    ),
    "tree_parents_exist": (
        "every tree number's parent prefix exists, except category roots",
        False,
    ),
    "supplementary_mappings_known": (
        "every supplementary alias maps to a known descriptor (dangling mappings are dropped "
        "and counted)",
        False,
    ),
    "recount_matches_source": (
        "an independent pass over the source files counts the descriptors, tree numbers, "
        "entry terms and supplementary records that were loaded",
        False,
    ),
    "terms_recount_matches_source": (
        "an independent pass over the thesaurus terms file (or the descriptor XML) counts "
        "the term rows, descriptors and concepts that were loaded",
        False,
    ),
    "terms_descriptors_known": ("every term names a descriptor present in mesh/descriptors", False),
}
