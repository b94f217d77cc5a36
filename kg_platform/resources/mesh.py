from __future__ import annotations

from typing import TYPE_CHECKING

import dagster as dg

from kg_platform.mesh.contracts import NLM_MESH_XML_URL

if TYPE_CHECKING:
    from kg_platform.mesh.source import MeshSourceSpec


class MeshSourceResource(dg.ConfigurableResource):
    """Where MeSH comes from: NLM's XML URL, or a local folder holding NLM's XML files
    (desc/qual/supp*.xml[.gz]) or the mapping TSVs (+ optional allowable-pairs CSV)."""

    location: str = NLM_MESH_XML_URL
    year: int | None = None  # MeSH year for a bare NLM URL; default: this year

    def get(self) -> MeshSourceSpec:
        # the MeSH readers (polars, lxml, requests) load with the step that reads MeSH
        from kg_platform.mesh.source import resolve_mesh_source

        return resolve_mesh_source(self.location, year=self.year)
