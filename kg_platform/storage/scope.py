"""Which partition of the platform a lake key belongs to.

The domain code names artefacts by short keys (``corpus/articles.parquet``,
``mesh/terms.parquet``, ``graph/current.json``). A :class:`Scope` routes them to the folder of
one partition, so two releases or two MeSH years live side by side in one lake:

====================  ==========================================  ====================
key area              routed to                                   partition
====================  ==========================================  ====================
corpus/               corpus/<release>/                           release
embeddings/index/     embeddings/index/<release>/                 release
embeddings/shards/    embeddings/shards/<release>/                release of the file
embeddings/tokens/    embeddings/tokens/<release>/                release of the file
mesh/                 mesh/<mesh_year>/                           MeSH year
grounding/            grounding/<mesh_year>/                      MeSH year
embeddings/concepts/  embeddings/concepts/<mesh_year>/            MeSH year
graph/                graph/<release>/<mesh_year>/                graph build
reports/<name>/       reports/<name>/<report>/                    the report's partition
====================  ==========================================  ====================

``tables/`` and ``raw/`` are per file and never routed. An empty scope routes nothing, so
domain code and its tests run on a plain folder unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RELEASE_AREAS = ("corpus", "embeddings/index", "embeddings/shards", "embeddings/tokens")
MESH_AREAS = ("mesh", "grounding", "embeddings/concepts")
GRAPH_AREAS = ("graph",)
REPORTS = "reports"
# a partition key as a folder name: letters, digits and - _ . only
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def _in_area(key: str, area: str) -> bool:
    return key == area or key.startswith(area + "/")


def _checked(value: str | None, what: str) -> str | None:
    if value is not None and not _SAFE.match(value):
        raise ValueError(f"{what} {value!r}: not usable as a lake folder name")
    return value


@dataclass(frozen=True)
class Scope:
    release: str | None = None  # pubmed26
    mesh_year: str | None = None  # 2024
    report: str | None = None  # a report partition as a folder path, e.g. pqal_dev400-1a2b/2024

    def __post_init__(self) -> None:
        _checked(self.release, "release")
        _checked(self.mesh_year, "MeSH year")
        if self.report is not None:
            for part in self.report.split("/"):
                _checked(part, "report partition")

    @property
    def empty(self) -> bool:
        return self.release is None and self.mesh_year is None and self.report is None

    def label(self) -> str:
        parts = [p for p in (self.release, self.mesh_year, self.report) if p]
        return " / ".join(parts) or "unscoped"

    def _need(self, value: str | None, what: str, key: str) -> str:
        if value is None:
            raise ValueError(f"{key}: belongs to a {what} partition, but the scope is {self}")
        return value

    def route(self, key: str) -> str:
        """The key of ``key`` inside this scope's partition folders."""
        if self.empty:
            return key
        for area in RELEASE_AREAS:
            if _in_area(key, area):
                return area + "/" + self._need(self.release, "release", key) + key[len(area) :]
        for area in MESH_AREAS:
            if _in_area(key, area):
                year = self._need(self.mesh_year, "MeSH year", key)
                return area + "/" + year + key[len(area) :]
        for area in GRAPH_AREAS:
            if _in_area(key, area):
                release = self._need(self.release, "release", key)
                year = self._need(self.mesh_year, "MeSH year", key)
                return f"{area}/{release}/{year}{key[len(area) :]}"
        if _in_area(key, REPORTS) and self.report is not None:
            parts = key.split("/", 2)
            if len(parts) >= 2:
                rest = "/" + parts[2] if len(parts) == 3 else ""
                return f"{REPORTS}/{parts[1]}/{self.report}{rest}"
        return key
