"""Where a MeSH year's tables live in the lake, and the one way to reach one.

Each MeSH table (descriptors, tree, terms, ...; ``kg_platform.schemas.MESH_TABLE_NAMES``) is
one Parquet file, ``mesh/<table>.parquet``, and ``mesh/manifest.json``, written last, names
the set. Readers never spell a key: :func:`mesh_key` is a table's key and :func:`read_mesh`
reads it, naming the missing file and the asset that writes it. The writer is
``kg_platform.mesh.tables.write_mesh_tables``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kg_platform.storage.lake import Lake

if TYPE_CHECKING:
    import pyarrow as pa

MESH_PREFIX = "mesh"
MESH_MANIFEST = f"{MESH_PREFIX}/manifest.json"


def mesh_key(table: str) -> str:
    """The lake key of a MeSH table."""
    return f"{MESH_PREFIX}/{table}.parquet"


def read_mesh(lake: Lake, table: str, columns: list[str] | None = None) -> pa.Table:
    """A MeSH table (``columns`` of it); a FileNotFoundError naming the file when the
    lake has none."""
    key = mesh_key(table)
    if not lake.exists(key):
        raise FileNotFoundError(f"{lake.path(key)}: missing; materialise `mesh_tables` first")
    return lake.read_parquet(key, columns=columns)
