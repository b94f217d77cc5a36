import dagster as dg

from kg_platform.mesh.source import NLM_MESH_XML_URL, MeshSourceSpec, resolve_mesh_source


class MeshSourceResource(dg.ConfigurableResource):
    """Where MeSH comes from: NLM's XML URL, or a local folder holding NLM's XML files
    (desc/qual/supp*.xml[.gz]) or the mapping TSVs (+ optional allowable-pairs CSV)."""

    location: str = NLM_MESH_XML_URL
    year: int | None = None  # MeSH year for a bare NLM URL; default: this year

    def get(self) -> MeshSourceSpec:
        return resolve_mesh_source(self.location, year=self.year)
