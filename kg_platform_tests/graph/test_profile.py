from __future__ import annotations

import base64
import json
import re

import pyarrow as pa
import pytest

from kg_platform.graph.profile import (
    ROW_COLUMNS,
    ROWS,
    DecadeRow,
    article_rows,
    article_rows_from_parts,
    profile_corpus,
    render_json,
    render_markdown,
    render_png,
    summarise,
)
from kg_platform.storage.catalog import Catalog
from kg_platform.storage.corpus import part_key
from kg_platform.storage.lake import Lake
from kg_platform_tests.graph.corpus import tiny_corpus


def test_profile_of_the_tiny_corpus(lake: Lake) -> None:
    tiny_corpus(lake)
    catalog = Catalog(lake)
    con = catalog.connect()
    catalog.refresh_views(con)
    p = profile_corpus(con)
    assert (p.articles, p.reference_rows, p.in_corpus_rows, p.retention) == (5, 10, 8, 0.8)
    # recency: 50 (2021), 40 (2020), 30 (2001), 10 (1999), 20 (no year); ceil(5 * fraction)
    assert [
        (s.articles, s.earliest_year, s.reference_rows, s.in_corpus_rows) for s in p.slices
    ] == [
        (1, 2021, 3, 2),
        (2, 2020, 5, 4),
        (3, 2001, 9, 7),
    ]
    assert [s.retention for s in p.slices] == [0.666667, 0.8, 0.777778]
    assert p.decades == (
        DecadeRow("1990s", 1, 1.0, 0.0, 0.0),
        DecadeRow("2000s", 1, 1.0, 1.0, 4.0),
        DecadeRow("2020s", 2, 0.5, 0.5, 2.5),
        DecadeRow("unknown", 1, 1.0, 1.0, 1.0),
    )
    markdown = render_markdown(p)
    assert "**in-corpus retention 80.0%**" in markdown
    assert "| most recent 1/8 | 1 | 2021 | 3 | 2 | 66.7% |" in markdown
    assert "| 2020s | 2 | 50.0% | 50.0% | 2.50 |" in markdown
    png = render_png(p)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert render_png(p) == png  # deterministic: the asset renders the plot twice
    for report in (markdown, render_markdown(p, png)):
        assert embedded_pngs(report) == [png]
        assert not re.search(r"""(src=["']?|\]\()(?!data:)[^"')]*\.png""", report)
    assert json.loads(render_json(p))["slices"][2]["retention"] == 0.777778


def embedded_pngs(markdown: str) -> list[bytes]:
    """The PNGs a markdown report embeds as ``data:image/png;base64`` URIs."""
    return [
        base64.b64decode(m, validate=True)
        for m in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", markdown)
    ]


def test_rows_from_the_parts_are_the_rows_of_the_views(lake: Lake) -> None:
    """The profile's rows counted bucket by bucket from the parts equal the DuckDB query's
    over the views, and so do the figures summed from them."""
    tiny_corpus(lake)
    catalog = Catalog(lake)
    con = catalog.connect()
    catalog.refresh_views(con)
    article_rows(con)
    expected = con.execute(f"SELECT {ROW_COLUMNS} FROM {ROWS} ORDER BY pmid").fetchall()
    figures = summarise(con)
    article_rows_from_parts(con, lake)
    assert con.execute(f"SELECT {ROW_COLUMNS} FROM {ROWS} ORDER BY pmid").fetchall() == expected
    assert expected == [
        (10, 1999, False, 0, 0, True),
        (20, None, True, 1, 1, True),
        (30, 2001, True, 4, 3, True),
        (40, 2020, True, 2, 2, False),
        (50, 2021, False, 3, 2, True),
    ]
    assert summarise(con) == figures
    types = con.execute(f"SELECT {ROW_COLUMNS} FROM {ROWS}").to_arrow_table().schema.types
    assert [str(t) for t in types] == ["int64", "int32", "bool", "int64", "int64", "bool"]
    # a part holding a PMID of another bucket is named
    lake.write_parquet(
        part_key("mesh_edges", 0), pa.table({"pmid": pa.array([10, 250_010], pa.int64())})
    )
    with pytest.raises(ValueError, match=r"mesh_edges/part-00000\.parquet: a pmid outside"):
        article_rows_from_parts(con, lake)
