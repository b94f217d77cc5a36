"""Titles of evidence articles, read from corpus/articles.parquet by row group.

An answer shows the title of each of its top paths' terminal articles: a handful of PMIDs
out of the whole corpus. The fold writes the articles table sorted by PMID in row groups of
``kg_platform.pubmed.fold.ARTICLE_ROW_GROUP_ROWS`` rows, so the PMID range of each row group is known from the
footer's statistics. The lookup parses the footer once, finds the row group of each PMID
by binary search over the groups' smallest PMIDs, and reads only the ``pmid`` and
``title`` columns of those groups. Reading with a PMID filter instead costs a footer parse
and a dataset scan plan on every question (``benchmarks/titles.py`` compares the two).
A file written otherwise (unsorted, or without statistics) is read with a filter, as before.
"""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kg_platform.storage.lake import Lake


class TitleLookup:
    """PMID -> title over one articles file; opened on first use, then kept."""

    def __init__(self, lake: Lake, key: str) -> None:
        self.lake, self.key = lake, key
        self._lock = threading.Lock()
        self._opened = False
        self._file: pq.ParquetFile | None = None
        self._has_title = False
        self._group_min: np.ndarray | None = None  # None: no usable statistics

    def _open(self) -> None:
        if not self.lake.exists(self.key):
            self._opened = True
            return
        source = self.lake.path(self.key) if self.lake.is_local else self.lake.open(self.key)
        try:
            parquet = pq.ParquetFile(source)
        except (pa.ArrowInvalid, OSError) as error:
            raise ValueError(
                f"{self.lake.path(self.key)}: not a readable Parquet file ({error}); "
                "rematerialise `corpus`"
            ) from None
        self._has_title = "title" in parquet.schema_arrow.names
        self._file = parquet
        self._group_min = _sorted_group_minimums(parquet)
        self._opened = True

    def titles(self, pmids: list[int]) -> dict[int, str | None]:
        """Title of each PMID found (a corpus without titles gives none)."""
        if not pmids:
            return {}
        with self._lock:
            if not self._opened:
                self._open()
            if self._file is None or not self._has_title:
                return {}
            if self._group_min is None:
                table = self._file.read(columns=["pmid", "title"])
            else:
                wanted = np.asarray(pmids, dtype=np.int64)
                groups = np.searchsorted(self._group_min, wanted, side="right") - 1
                groups = np.unique(groups[groups >= 0]).tolist()
                table = self._file.read_row_groups(groups, columns=["pmid", "title"])
        # keep the wanted rows in Arrow: a row group holds thousands of titles
        pmid = table["pmid"]
        table = table.filter(pc.is_in(pmid, value_set=pa.array(pmids, type=pmid.type)))
        return dict(zip(table["pmid"].to_pylist(), table["title"].to_pylist(), strict=True))


def _sorted_group_minimums(parquet: pq.ParquetFile) -> np.ndarray | None:
    """The smallest PMID of each row group when every group has PMID statistics and the
    groups follow one another in PMID order; otherwise None."""
    metadata = parquet.metadata
    column = parquet.schema_arrow.get_field_index("pmid")
    if column < 0 or metadata.num_row_groups == 0:
        return None
    minimums, maximums = [], []
    for g in range(metadata.num_row_groups):
        stats = metadata.row_group(g).column(column).statistics
        if stats is None or not stats.has_min_max:
            return None
        minimums.append(int(stats.min))
        maximums.append(int(stats.max))
    low, high = np.asarray(minimums, dtype=np.int64), np.asarray(maximums, dtype=np.int64)
    if np.any(low[1:] <= high[:-1]):
        return None
    return low
