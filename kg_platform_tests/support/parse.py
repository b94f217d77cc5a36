"""What the parser tests share: the rows each reference file parses to (read off the XML by
hand and by the byte-level recount), and the fast path's helpers."""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path

import pyarrow as pa
import pytest

from kg_platform.pubmed import _fast
from kg_platform.pubmed.columns import Columns
from kg_platform.pubmed.parse import (
    _FLUSH_EVERY,
    _open_xml,
    _read_with_lxml,
    _slow_record,
    file_key,
)
from kg_platform_tests.conftest import require_reference

# rows per table: articles, mesh_edges, citations, corrections, chemicals, pubtypes, deletions
EXPECTED_ROWS: dict[str, tuple[int, ...]] = {
    "efetch/biopython_pubmed1.xml": (2, 32, 0, 0, 4, 3, 0),
    "efetch/biopython_pubmed2.xml": (2, 14, 0, 0, 0, 3, 0),
    "efetch/biopython_pubmed4.xml": (1, 23, 0, 49, 2, 5, 0),
    "efetch/biopython_pubmed5.xml": (1, 0, 0, 40, 0, 1, 0),
    "efetch/biopython_pubmed6.xml": (1, 0, 0, 53, 0, 1, 0),
    "efetch/biopython_pubmed7.xml": (1, 0, 49, 0, 0, 1, 0),
    "efetch/tipplerow_29355075.xml": (1, 20, 0, 1, 2, 2, 0),
    "efetch/tipplerow_30073290.xml": (1, 15, 36, 0, 2, 6, 0),
    "efetch/tipplerow_31400583.xml": (1, 15, 0, 0, 3, 4, 0),
    "efetch/tipplerow_31408116.xml": (1, 4, 0, 0, 0, 1, 0),
    "efetch/tipplerow_32048627.xml": (1, 0, 0, 0, 0, 1, 0),
    "efetch/tipplerow_32260179.xml": (1, 0, 0, 0, 0, 1, 0),
    "efetch/tipplerow_pubmed_sample.xml": (7, 44, 47, 1, 16, 10, 3),
    "legacy/medline16n0902.xml.gz": (604, 1601, 0, 3620, 403, 912, 1),
    "mirror/baseline/pubmed26n1334.xml.gz": (30, 112, 286, 2, 9, 37, 0),
    "mirror/updatefiles/pubmed26n1335.xml.gz": (30, 259, 1063, 2, 31, 43, 6),
    "samples/pubmed20/pubmed20n0001.xml.gz": (10, 130, 0, 2, 47, 19, 0),
    "samples/pubmed20/pubmed20n0002.xml.gz": (10, 114, 0, 0, 39, 20, 0),
    "samples/pubmed20/pubmed20n1203.xml.gz": (10, 95, 0, 0, 1, 11, 23),
    "samples/pubmed23/baseline/pubmed23n1166.xml.gz": (34, 110, 506, 2, 17, 43, 0),
    "samples/pubmed23/updatefiles/pubmed23n1167.xml.gz": (23, 0, 0, 2, 0, 24, 0),
    "samples/pubmed24/baseline/pubmed24n1219.xml.gz": (30, 46, 589, 2, 9, 36, 0),
    "samples/pubmed24/updatefiles/pubmed24n1220.xml.gz": (30, 557, 359, 4, 153, 69, 0),
    "samples/pubmed25/baseline/pubmed25n1274.xml.gz": (30, 86, 514, 3, 5, 37, 0),
    "samples/pubmed25/updatefiles/pubmed25n1275.xml.gz": (30, 83, 216, 3, 11, 37, 0),
}


def require_compiled_reader() -> None:
    """Skip when the extension is not built (a source tree), fail under CI=true."""
    if _fast.compiled_reader is None:
        message = "the compiled reader is not built (pip install -e .)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)


HEAD = b'<?xml version="1.0" encoding="UTF-8"?>\n<PubmedArticleSet>\n'


def lxml_tables(path: Path) -> dict[str, pa.Table]:
    columns, _ = _read_with_lxml(path, file_key(path))
    return columns.to_tables()


def fast_only(path: Path) -> tuple[dict[str, pa.Table], int]:
    """The fast path alone (raising NotSimple rather than falling back), and how many records
    it handed to lxml."""
    columns = Columns(file_key(path))
    handed: list[bytes] = []
    slow = _slow_record(columns, path.name)

    def counted(record: bytes) -> None:
        handed.append(record)
        slow(record)

    with _open_xml(path, fast=True) as stream:
        _fast.stream_records(stream, path.name, columns, counted, _FLUSH_EVERY)
    return columns.to_tables(), len(handed)


def assert_same(fast: dict[str, pa.Table], tree: dict[str, pa.Table]) -> None:
    assert fast.keys() == tree.keys()
    for name, table in tree.items():
        assert fast[name].to_pylist() == table.to_pylist(), name


def first_record() -> bytes:
    path = require_reference("pubmed", "mirror/baseline/pubmed26n1334.xml.gz")
    data = gzip.decompress(path.read_bytes())
    return re.search(rb"<PubmedArticle>.*?</PubmedArticle>", data, re.S).group(0)


def with_title(record: bytes, title: bytes) -> bytes:
    return re.sub(rb"<ArticleTitle>.*?</ArticleTitle>", title, record, count=1, flags=re.S)
