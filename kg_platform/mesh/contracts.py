"""What the Dagster definitions declare about MeSH: the default source and the mesh_tables
asset's check names. The definitions load in every process that starts a run; the MeSH
readers and checks (polars, lxml, requests, pandera) are imported by the step that builds
the tables. So this module imports nothing of them.
"""

from kg_platform.schemas import MESH_TABLE_NAMES

NLM_MESH_XML_URL = "https://nlmpubs.nlm.nih.gov/projects/mesh/MESH_FILES/xmlmesh/"

# every check of the mesh_tables asset, in the order kg_platform.mesh.checks returns them
MESH_CHECK_NAMES = (
    *(f"{table}_schema" for table in MESH_TABLE_NAMES),
    "uis_well_formed_unique",
    "tree_parents_exist",
    "supplementary_mappings_known",
    "recount_matches_source",
    "terms_recount_matches_source",
    "terms_descriptors_known",
)
