"""Dagster table metadata (column schema and row count) derived from the pandera models."""

from __future__ import annotations

from typing import TYPE_CHECKING

import dagster as dg

if TYPE_CHECKING:
    import pandera.polars as pa


def table_metadata(model: type[pa.DataFrameModel], rows: int) -> dict[str, object]:
    """``dagster/column_schema`` from the model's columns and ``dagster/row_count``."""
    from kg_platform.schemas import columns  # the models, and pandera, load on first use

    return {
        "dagster/column_schema": dg.TableSchema(
            columns=[
                dg.TableColumn(name, type_name, description=description or None)
                for name, type_name, description in columns(model)
            ]
        ),
        "dagster/row_count": rows,
    }
