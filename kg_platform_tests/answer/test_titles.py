"""Evidence titles by row group: the 30 real records of the last 2026 baseline file, parsed
and written sorted by PMID in row groups of 4, looked up by PMID. Titles checked against
the XML: 41576520's ArticleTitle, and 41605226's, which is empty (`<ArticleTitle/>`, the
record has only a VernacularTitle)."""

from __future__ import annotations

import polars as pl
import pyarrow.parquet as pq
import pytest

from kg_platform.answer.titles import TitleLookup
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference

# the file's PMIDs (41576520..41605226) are all in the bucket 41,500,000..41,749,999
KEY = "corpus/articles/part-00166.parquet"
URIC_ACID = (
    "The Relationship of Serum Uric Acid With Neurocognitive Functions in Children and "
    "Adolescents With Mild to Moderate Chronic Kidney Disease."
)
FATIGUE = (
    "Cross-sectional survey: Characteristics and associated factors of cancer-related "
    "fatigue in patients after glioma surgery."
)


@pytest.fixture(scope="module")
def articles() -> pl.DataFrame:
    from kg_platform.pubmed.parse import parse_file

    path = require_reference("pubmed", "mirror", "baseline", "pubmed26n1334.xml.gz")
    return pl.from_arrow(parse_file(path)["articles"]).sort("pmid")


def _lake(tmp_path, frame: pl.DataFrame, row_group_size: int = 4) -> Lake:
    (tmp_path / "corpus" / "articles").mkdir(parents=True)
    pq.write_table(frame.to_arrow(), tmp_path / KEY, row_group_size=row_group_size)
    return Lake(str(tmp_path))


def test_titles_by_row_group(tmp_path, articles) -> None:
    lake = _lake(tmp_path, articles)
    assert pq.ParquetFile(tmp_path / KEY).metadata.num_row_groups == 8  # 30 rows by 4
    lookup = TitleLookup(lake)
    found = lookup.titles([41605226, 41576697, 41576520, 1, 99999999])
    # the first, second and last PMIDs of the file; unknown PMIDs are simply absent
    assert found == {41576520: URIC_ACID, 41576697: FATIGUE, 41605226: None}
    assert lookup._parts[KEY]._group_min is not None and lookup._parts[KEY]._group_min.size == 8
    # every title of the file, in one call, equals the table it came from
    every = dict(articles.select("pmid", "title").iter_rows())
    assert lookup.titles(list(every)) == every
    assert lookup.titles([]) == {}


def test_unsorted_file_is_read_with_a_filter(tmp_path, articles) -> None:
    # row groups that overlap in PMID range: the binary search would be wrong, so the
    # lookup falls back to a filtered read and gives the same titles
    lake = _lake(tmp_path, articles.sort("title", nulls_last=True))
    lookup = TitleLookup(lake)
    assert lookup.titles([41576520, 41576697]) == {41576520: URIC_ACID, 41576697: FATIGUE}
    assert lookup._parts[KEY]._group_min is None


def test_no_titles_without_a_title_column_or_a_corpus(tmp_path, articles) -> None:
    lake = _lake(tmp_path, articles.drop("title"))
    assert TitleLookup(lake).titles([41576520]) == {}
    assert TitleLookup(Lake(str(tmp_path / "empty"))).titles([41576520]) == {}


def test_a_corrupt_articles_file_is_named(tmp_path) -> None:
    (tmp_path / "corpus" / "articles").mkdir(parents=True)
    (tmp_path / KEY).write_bytes(b"not parquet at all")
    lookup = TitleLookup(Lake(str(tmp_path)))
    with pytest.raises(ValueError, match=r"part-00166\.parquet: not a readable Parquet file"):
        lookup.titles([41576520])
    assert (tmp_path / KEY).read_bytes() == b"not parquet at all"  # left as it was
