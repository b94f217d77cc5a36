"""Titles (and texts) of evidence articles, read from the corpus articles by row group.

An answer shows the title of each of its top paths' terminal articles: a handful of PMIDs
out of the whole corpus. The fold writes the articles table as one part per PMID bucket
(kg_platform.storage.corpus), each sorted by PMID in row groups of
``kg_platform.pubmed.fold.ARTICLE_ROW_GROUP_ROWS`` rows, so a PMID's part is known from the
PMID and the PMID range of each row group from the part's footer. The lookup parses a part's
footer once, finds the row group of each PMID by binary search over the groups' smallest
PMIDs, and reads only the ``pmid`` and ``title`` columns of those groups. Reading with a PMID filter instead costs a footer parse
and a dataset scan plan on every question (``benchmarks/titles.py`` compares the two).
A file written otherwise (unsorted, or without statistics) is read with a filter, as before.

``texts`` reads the same row groups for what a reader reads: title and abstract together.
"""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kg_platform.storage.corpus import corpus_part_of
from kg_platform.storage.lake import Lake


class TitleLookup:
    """PMID -> title (or text) over the corpus articles: each PMID's part (corpus_part_of),
    opened on first use, then kept."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake
        self._lock = threading.Lock()
        self._parts: dict[str, _PartLookup] = {}

    def titles(self, pmids: list[int]) -> dict[int, str | None]:
        """Title of each PMID found (a corpus without titles gives none)."""
        found: dict[int, str | None] = {}
        for part, mine in self._by_part(pmids).items():
            found.update(part.titles(mine))
        return found

    def texts(self, pmids: list[int]) -> dict[int, str]:
        """Title and abstract of each PMID found, joined by a newline and stripped: "" for an
        article with neither (or a corpus with neither column); absent PMIDs are not keys."""
        found: dict[int, str] = {}
        for part, mine in self._by_part(pmids).items():
            found.update(part.texts(mine))
        return found

    def _by_part(self, pmids: list[int]) -> dict[_PartLookup, list[int]]:
        grouped: dict[_PartLookup, list[int]] = {}
        with self._lock:
            for pmid in pmids:
                key = corpus_part_of("articles", pmid)
                if key not in self._parts:
                    self._parts[key] = _PartLookup(self.lake, key)
                grouped.setdefault(self._parts[key], []).append(pmid)
        return grouped


class _PartLookup:
    """PMID -> title (or text) over one articles part; opened on first use, then kept."""

    def __init__(self, lake: Lake, key: str) -> None:
        self.lake, self.key = lake, key
        self._lock = threading.Lock()
        self._opened = False
        self._file: pq.ParquetFile | None = None
        self._columns: frozenset[str] = frozenset()
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
        self._columns = frozenset(parquet.schema_arrow.names)
        self._file = parquet
        self._group_min = _sorted_group_minimums(parquet)
        self._opened = True

    def titles(self, pmids: list[int]) -> dict[int, str | None]:
        """Title of each PMID found (a corpus without titles gives none)."""
        rows = self._rows(pmids, ["title"])
        if rows is None:
            return {}
        return dict(zip(rows["pmid"], rows["title"], strict=True))

    def texts(self, pmids: list[int]) -> dict[int, str]:
        """Title and abstract of each PMID found, joined by a newline and stripped: "" for an
        article with neither (or a corpus with neither column); absent PMIDs are not keys."""
        rows = self._rows(pmids, ["title", "abstract"])
        if rows is None:
            return {}
        n = len(rows["pmid"])
        parts = [rows.get(c, [None] * n) for c in ("title", "abstract")]
        return {
            pmid: "\n".join(p.strip() for p in (title, abstract) if p and p.strip())
            for pmid, title, abstract in zip(rows["pmid"], *parts, strict=True)
        }

    def _rows(self, pmids: list[int], wanted: list[str]) -> dict[str, list] | None:
        """The ``pmid`` and those of ``wanted`` columns the file has, as Python values, for
        the rows of ``pmids`` (in file order); None without a corpus or without any of
        ``wanted``."""
        if not pmids:
            return None
        with self._lock:
            if not self._opened:
                self._open()
            if self._file is None:
                return None
            columns = ["pmid", *(c for c in wanted if c in self._columns)]
            if len(columns) == 1:
                return None
            if self._group_min is None:
                table = self._file.read(columns=columns)
            else:
                keys = np.asarray(pmids, dtype=np.int64)
                groups = np.searchsorted(self._group_min, keys, side="right") - 1
                # a set, not np.unique: that imports numpy.ma (~45 ms of a cold `kg ask`)
                groups = sorted({g for g in groups.tolist() if g >= 0})
                table = self._file.read_row_groups(groups, columns=columns)
        # a row group holds thousands of articles: find the wanted rows with numpy and turn
        # only those into Python values (pyarrow.compute and pa.array, which imports pandas,
        # would cost a cold `kg ask` ~0.1-0.3 s of imports)
        in_file = np.concatenate([_int64s(c) for c in table["pmid"].chunks] or [np.zeros(0)])
        wanted_pmids = np.sort(np.asarray(pmids, dtype=np.int64))
        at = np.minimum(np.searchsorted(wanted_pmids, in_file), wanted_pmids.size - 1)
        found = np.flatnonzero(wanted_pmids[at] == in_file).tolist()
        return {c: [table[c][i].as_py() for i in found] for c in table.column_names}


def _int64s(chunk: pa.Array) -> np.ndarray:
    """An integer Arrow array as int64, read from its data buffer (``to_numpy`` imports
    pandas); nulls (never in ``pmid``) come back as -1."""
    if chunk.null_count:
        return np.array([-1 if v is None else v for v in chunk.to_pylist()], dtype=np.int64)
    width = chunk.type.bit_width // 8
    data = np.frombuffer(chunk.buffers()[1], dtype=f"<i{width}", count=len(chunk) + chunk.offset)
    return data[chunk.offset :].astype(np.int64)


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
