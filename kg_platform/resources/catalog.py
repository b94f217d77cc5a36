import dagster as dg

from kg_platform.storage.catalog import Catalog
from kg_platform.storage.lake import Lake


class CatalogResource(dg.ConfigurableResource):
    """A DuckDB database file with views over the lake's Parquet (`:memory:` for none)."""

    database: str = ".kg/catalog.duckdb"

    def get(self, lake: Lake) -> Catalog:
        return Catalog(lake, self.database)
