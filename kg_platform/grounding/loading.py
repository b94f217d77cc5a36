"""The grounder and each descriptor's role for a published graph, read from the lake.

From the load-ready grounding index when it is published (memory-mapped, read per
question; the roles read from it too under the default RoleConfig); else rebuilt from the
MeSH tables (a lake materialised before the index existed, or another RoleConfig). polars
is imported only on the rebuild, so a cold question over an indexed lake never loads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from kg_platform.graph.store import KGStore
from kg_platform.grounding.grounder import Grounder
from kg_platform.grounding.roles import RoleConfig
from kg_platform.grounding.surface_index import INDEX_KEY, IndexedRoles, SurfaceIndex
from kg_platform.storage.lake import Lake
from kg_platform.storage.mesh import read_mesh

if TYPE_CHECKING:
    import polars as pl

# descriptor UI -> (role, reason): a dict, or read per descriptor from the index
RoleTable = Mapping[str, tuple[str, str]]

DEFAULT_ROLES = RoleConfig()


def load_grounder(
    lake: Lake, store: KGStore, config: RoleConfig = DEFAULT_ROLES
) -> tuple[Grounder, RoleTable]:
    """The grounder and each descriptor's (role, reason) for ``store``'s graph."""
    if lake.exists(INDEX_KEY):
        index = SurfaceIndex.open(lake)
        grounder = Grounder(index, index.names)
        if config == DEFAULT_ROLES:
            return grounder, IndexedRoles(index, store, config)
        return grounder, _table_roles(lake, store, config)
    import polars as pl

    from kg_platform.grounding.grounder import build_surface_table
    from kg_platform.grounding.index import SURFACES_KEY

    descriptors = pl.from_arrow(read_mesh(lake, "descriptors"))
    names = dict(zip(descriptors["ui"].to_list(), descriptors["name"].to_list(), strict=True))
    if lake.exists(SURFACES_KEY):
        surfaces = pl.from_arrow(lake.read_parquet(SURFACES_KEY))
    else:
        surfaces = build_surface_table(pl.from_arrow(read_mesh(lake, "terms")))
    return Grounder(surfaces, names), _table_roles(lake, store, config, descriptors)


def _table_roles(
    lake: Lake, store: KGStore, config: RoleConfig, descriptors: pl.DataFrame | None = None
) -> RoleTable:
    import polars as pl

    from kg_platform.grounding.roles import assign_roles

    if descriptors is None:
        descriptors = pl.from_arrow(read_mesh(lake, "descriptors"))
    tree = pl.from_arrow(read_mesh(lake, "tree"))
    roles = assign_roles(descriptors, tree, config, graph_article_counts(store), store.n_articles)
    return dict(
        zip(
            roles["ui"].to_list(),
            zip(roles["role"].to_list(), roles["reason"].to_list(), strict=True),
            strict=True,
        )
    )


def graph_article_counts(store: KGStore) -> pl.DataFrame:
    """The graph's article count per descriptor (``ui``, ``n_articles``)."""
    import polars as pl

    uis = np.char.decode(np.asarray(store.array("mesh_uis")), "ascii")
    return pl.DataFrame({"ui": uis, "n_articles": np.asarray(store.array("mesh_article_count"))})
