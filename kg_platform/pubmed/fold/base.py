"""What every part of the fold shares: the per-file tables it reads (their keys and the check
that each file has all of them), the result it returns and a numpy set of PMIDs."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from kg_platform.storage.corpus import CORPUS_TABLES
from kg_platform.storage.lake import Lake
from kg_platform.storage.tables import table_key

CHILD_TABLES = [t for t in CORPUS_TABLES if t != "articles"]


@dataclass(frozen=True)
class FoldResult:
    rows: dict[str, int]  # rows per corpus table
    deleted: int  # PMIDs that had a record and were removed by a later DeleteCitation
    deletions_listed: int  # distinct PMIDs named by DeleteCitation in these files
    dangling_citations: int  # citation rows whose cited PMID is not a corpus article
    files: list[str] = field(default_factory=list)
    mode: str = "full"  # full, incremental (new files folded into the corpus) or unchanged
    reason: str = ""  # why this mode: what the previous fold was, or why it could not be used
    new_files: int = 0  # files read beyond the previous fold (all of them in a full fold)
    touched_pmids: int = 0  # PMIDs with a record or a DeleteCitation in the new files
    touched_parts: list[int] = field(default_factory=list)  # buckets holding a touched PMID


def check_files(lake: Lake, files: list[str]) -> None:
    if not files:
        raise ValueError("fold: no files given")
    if len(set(files)) != len(files):
        dupes = sorted({f for f in files if files.count(f) > 1})
        raise ValueError(f"fold: files listed twice: {', '.join(dupes[:5])}")
    for file in files:
        for table in [*CORPUS_TABLES, "deletions"]:
            if not lake.exists(table_key(table, file)):
                raise FileNotFoundError(
                    f"{file}: per-file table {table_key(table, file)} is missing; "
                    f"materialise pubmed_tables[{file}] first"
                )


def read_frame(lake: Lake, key: str, columns: list[str]) -> pl.DataFrame:
    return pl.from_arrow(lake.read_parquet(key, columns=columns))


# PMIDs run to ~42M, so a byte per possible PMID is a 42 MB set with O(1) lookups; past
# this bound (never seen in PubMed) the set falls back to a sorted array and binary search
PMID_BITMAP_MAX = 200_000_000


class PmidSet:
    """A set of PMIDs for membership of many values at once (numpy, no hashing)."""

    def __init__(self, pmids: np.ndarray) -> None:
        self._top = int(pmids.max()) if len(pmids) else -1
        if 0 <= self._top <= PMID_BITMAP_MAX and (not len(pmids) or pmids.min() >= 0):
            self._bitmap: np.ndarray | None = np.zeros(self._top + 1, dtype=bool)
            self._bitmap[pmids] = True
            self._sorted = None
        else:
            self._bitmap, self._sorted = None, np.unique(pmids)

    def missing(self, values: np.ndarray) -> int:
        """How many of ``values`` are not in the set."""
        if self._bitmap is not None and _within(values, self._top):
            # every value inside the bitmap (the usual case): one gather, no mask
            return len(values) - int(np.count_nonzero(self._bitmap[values]))
        return len(values) - int(np.count_nonzero(self.contains(values)))

    def contains(self, values: np.ndarray) -> np.ndarray:
        """Whether each of ``values`` is in the set."""
        if self._bitmap is not None and _within(values, self._top):
            return self._bitmap[values]
        if self._bitmap is not None:
            inside = (values >= 0) & (values <= self._top)
            found = np.zeros(len(values), dtype=bool)
            found[inside] = self._bitmap[values[inside]]
            return found
        if self._sorted is None or not len(self._sorted):
            return np.zeros(len(values), dtype=bool)
        at = np.searchsorted(self._sorted, values).clip(max=len(self._sorted) - 1)
        return self._sorted[at] == values


def _within(values: np.ndarray, top: int) -> bool:
    """Every one of ``values`` in [0, top] (True when there are none)."""
    return not len(values) or (int(values.min()) >= 0 and int(values.max()) <= top)


# a PmidMap's dense array holds 8 bytes per possible PMID: 336 MB at PubMed's ~42M PMIDs;
# past this bound it is a sorted array and binary search
PMID_MAP_MAX = 100_000_000


class PmidMap:
    """Nonzero int64 values by PMID, looked up many at once (numpy, no hashing): an array
    indexed by PMID while the PMIDs are at most PMID_MAP_MAX, else a sorted array. Each
    PMID once."""

    def __init__(self, pmids: np.ndarray, values: np.ndarray) -> None:
        self._top = int(pmids.max()) if len(pmids) else -1
        self._dense: np.ndarray | None = None
        if 0 <= self._top <= PMID_MAP_MAX and int(pmids.min()) >= 0:
            self._dense = np.zeros(self._top + 1, dtype=np.int64)
            self._dense[pmids] = values
        else:
            order = np.argsort(pmids, kind="stable")
            self._sorted, self._values = pmids[order], np.asarray(values, dtype=np.int64)[order]

    def get(self, pmids: np.ndarray) -> np.ndarray:
        """The value of each of ``pmids``, 0 for a PMID not in the map."""
        if self._dense is not None:
            if _within(pmids, self._top):
                return self._dense[pmids]
            inside = (pmids >= 0) & (pmids <= self._top)
            out = np.zeros(len(pmids), dtype=np.int64)
            out[inside] = self._dense[pmids[inside]]
            return out
        if not len(self._sorted):
            return np.zeros(len(pmids), dtype=np.int64)
        at = np.searchsorted(self._sorted, pmids).clip(max=len(self._sorted) - 1)
        return np.where(self._sorted[at] == pmids, self._values[at], 0)
