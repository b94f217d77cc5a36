"""KGStore: the graph's arrays, memory-mapped and read only when touched.

Node ids: article i is row i of corpus/articles ordered by PMID; descriptor d is row d of the
sorted MeSH UIs. Every neighbour list is ascending, so two lists intersect by binary search.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kg_platform.graph import layout
from kg_platform.storage.lake import Lake
from kg_platform.storage.mapped import load_npy, release


@dataclass(frozen=True)
class Expansion:
    """Neighbours of many nodes at once: ``neighbours[indptr[k]:indptr[k+1]]`` belong to
    ``nodes[k]``."""

    nodes: np.ndarray
    indptr: np.ndarray
    neighbours: np.ndarray

    def of(self, k: int) -> np.ndarray:
        return self.neighbours[self.indptr[k] : self.indptr[k + 1]]


class KGStore:
    """One graph build. Construct with ``KGStore.open(lake)`` (the published build) or
    ``KGStore.open(lake, build_id)``; arrays load lazily on first use."""

    def __init__(self, lake: Lake, build_id: str, manifest: dict) -> None:
        self.lake = lake
        self.build_id = build_id
        self.manifest = manifest
        self._arrays: dict[str, np.ndarray] = {}
        self._pairs: dict[str, tuple[memoryview, np.ndarray]] = {}
        self._title_views: tuple[memoryview, memoryview, memoryview] | None = None

    @classmethod
    def open(cls, lake: Lake, build_id: str | None = None) -> KGStore:
        build_id = build_id or layout.current_build_id(lake)
        manifest = layout.read_manifest(lake, build_id)
        # every open checks the files' sizes (one listing) and each edge kind's shape (the
        # O(1) checks: a header and two entries read per array); the graph's check hashes
        # and scans them
        problems = layout.size_problems(lake, build_id, manifest)
        if problems:
            raise ValueError(f"{problems[0]}; `kg build` rebuilds it")
        store = cls(lake, build_id, manifest)
        for kind, edge in layout.EDGE_KINDS.items():
            for name in edge.arrays:
                store.array(name)  # an array that cannot be mapped names its file
            try:
                store.csr(kind)  # a Csr runs its O(1) checks when made
            except ValueError as exc:
                raise ValueError(
                    f"{lake.path(layout.build_prefix(build_id))}: {exc}; `kg build` rebuilds it"
                ) from exc
        return store

    def array(self, name: str) -> np.ndarray:
        """The named array, memory-mapped (read-only) on a local lake."""
        found = self._arrays.get(name)
        if found is None:
            if name not in self.manifest["arrays"]:
                raise KeyError(f"graph build {self.build_id} has no array {name!r}")
            key = layout.array_key(self.build_id, name)
            try:
                # memory-mapped; `kg serve` reads small files into memory instead and
                # records each file it opened (storage.mapped)
                mapped = load_npy(self.lake.local_path(key), self)
            except (ValueError, OSError) as exc:
                raise ValueError(
                    f"{self.lake.path(key)}: array {name} of graph build {self.build_id} "
                    f"cannot be opened ({exc})"
                ) from exc
            # a plain ndarray view of the map: slicing a np.memmap costs microseconds more
            found = np.asarray(mapped)
            self._arrays[name] = found
        return found

    def release(self) -> None:
        """Drop the pages of every array this store has mapped from the process's memory
        (``mapped.release``): a check that has read the whole build hands its memory back
        before the next step; the arrays stay mapped, and a later read maps its pages again.
        Nothing for arrays read into memory."""
        for array in self._arrays.values():
            release(array)

    def __getattr__(self, name: str) -> np.ndarray:
        # arrays by name (store.cite_indptr); only reached when normal lookup fails
        if name.startswith("_") or name not in layout.ALL_ARRAYS:
            raise AttributeError(name)
        return self.array(name)

    # -- sizes ----------------------------------------------------------------------------
    @property
    def stats(self) -> dict:
        return dict(self.manifest["stats"])

    @property
    def n_articles(self) -> int:
        return int(self.manifest["arrays"]["pmids"]["length"])

    @property
    def n_descriptors(self) -> int:
        return int(self.manifest["arrays"]["mesh_uis"]["length"])

    # -- ids ------------------------------------------------------------------------------
    def idx(self, pmid: int) -> int:
        """Node index of a PMID; KeyError when it is not in the corpus."""
        pmids = self.array("pmids")
        i = int(np.searchsorted(pmids, pmid))
        if i == pmids.size or int(pmids[i]) != pmid:
            raise KeyError(f"PMID {pmid} is not in graph build {self.build_id}")
        return i

    def idx_many(self, pmids: np.ndarray) -> np.ndarray:
        """Node indices of many PMIDs, -1 for those not in the corpus."""
        table = self.array("pmids")
        pmids = np.asarray(pmids, dtype=np.int64)
        # searched as the table's own dtype (int32): wider keys make numpy convert the whole
        # mapped table on every call (14 ms at 10M articles, for a handful of PMIDs)
        bounds = np.iinfo(table.dtype)
        fits = (pmids >= bounds.min) & (pmids <= bounds.max)
        keys = np.where(fits, pmids, 0).astype(table.dtype)
        pos = np.searchsorted(table, keys)
        found = fits & (table[np.minimum(pos, table.size - 1)] == keys)
        return np.where(found, pos, -1)

    def pmid(self, i: int) -> int:
        return int(self.array("pmids")[i])

    def desc_idx(self, ui: str) -> int:
        """Descriptor index of a MeSH UI; KeyError when no article or MeSH row has it."""
        uis = self.array("mesh_uis")
        key = np.array(ui.encode("ascii"), dtype=uis.dtype)
        d = int(np.searchsorted(uis, key))
        if d == uis.size or uis[d] != key or len(ui) > uis.dtype.itemsize:
            raise KeyError(f"MeSH descriptor {ui} is not in graph build {self.build_id}")
        return d

    def mesh_ui(self, d: int) -> str:
        return self.array("mesh_uis")[d].decode("ascii")

    # -- per node -------------------------------------------------------------------------
    def year(self, i: int) -> int:
        return int(self.array("year")[i])

    # -- titles (format 2) ----------------------------------------------------------------
    @property
    def has_titles(self) -> bool:
        """Whether the build holds the title store (builds of format 1 do not)."""
        return all(name in self.manifest["arrays"] for name in layout.TITLE_ARRAYS)

    def titles(self, pmids: list[int]) -> dict[int, str | None]:
        """Title of each PMID in the graph (None: the corpus has none for it); PMIDs not in
        the graph are not keys. Slices of the mapped bytes, read through memoryviews."""
        views = self._title_views
        if views is None:
            views = self._title_views = (
                memoryview(self.array("title_offsets")),
                memoryview(self.array("title_bytes")),
                memoryview(self.array("title_null")),
            )
        offsets, data, null = views
        found = {}
        for pmid, i in zip(pmids, self.idx_many(np.asarray(pmids)).tolist(), strict=True):
            if i >= 0:
                found[pmid] = None if null[i] else str(data[offsets[i] : offsets[i + 1]], "utf-8")
        return found

    # -- neighbours (each ascending) ------------------------------------------------------
    def csr(self, kind: str) -> layout.Csr:
        """The arrays of one edge kind (cite, cited_by, mesh2art, art2mesh), given the O(1)
        checks."""
        edge = layout.EDGE_KINDS[kind]
        n_rows, n_cols = (
            self.n_articles if articles else self.n_descriptors
            for articles in (edge.rows_are_articles, edge.columns_are_articles)
        )
        arrays = [self.array(name) for name in edge.arrays]
        flag = arrays[2] if edge.flagged else None
        return layout.Csr(edge, arrays[0], arrays[1], n_rows, n_cols, flag)

    def _pair(self, kind: str) -> tuple[memoryview, np.ndarray]:
        pair = self._pairs.get(kind)
        if pair is None:
            # a memoryview yields Python ints, which slice an array faster than numpy scalars
            indptr = memoryview(np.ascontiguousarray(self.array(f"{kind}_indptr")))
            pair = self._pairs[kind] = (indptr, self.array(f"{kind}_indices"))
        return pair

    def cites(self, i: int) -> np.ndarray:
        indptr, indices = self._pairs.get("cite") or self._pair("cite")
        return indices[indptr[i] : indptr[i + 1]]

    def cited_by(self, i: int) -> np.ndarray:
        indptr, indices = self._pairs.get("cited_by") or self._pair("cited_by")
        return indices[indptr[i] : indptr[i + 1]]

    def articles_of(self, d: int, major_only: bool = False) -> np.ndarray:
        return self._flagged_row("mesh2art", d, major_only)

    def mesh_of(self, i: int, major_only: bool = False) -> np.ndarray:
        return self._flagged_row("art2mesh", i, major_only)

    def _flagged_row(self, kind: str, i: int, major_only: bool) -> np.ndarray:
        indptr, indices = self._pairs.get(kind) or self._pair(kind)
        lo, hi = indptr[i], indptr[i + 1]
        if major_only:
            return indices[lo:hi][self.array(f"{kind}_major")[lo:hi]]
        return indices[lo:hi]

    # -- batched --------------------------------------------------------------------------
    def expand(self, kind: str, nodes: np.ndarray) -> Expansion:
        """Neighbours of every node in ``nodes`` for ``kind`` in cite, cited_by, mesh2art,
        art2mesh: one gather, no Python loop over nodes."""
        nodes = np.asarray(nodes, dtype=np.int64)
        indptr = self.array(f"{kind}_indptr")
        starts = indptr[nodes]
        lengths = indptr[nodes + 1] - starts
        out_ptr = np.zeros(nodes.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=out_ptr[1:])
        gather = _run_positions(starts, lengths)
        return Expansion(nodes, out_ptr, self.array(f"{kind}_indices")[gather])


def _run_positions(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Every position of the runs ``starts[k] .. starts[k] + lengths[k]``, run after run: a
    cumulative sum of steps that are 1 inside a run and jump to the next run's start
    between runs (one pass, where arange + repeat takes two)."""
    filled = np.flatnonzero(lengths)
    if filled.size == 0:
        return np.zeros(0, dtype=np.int64)
    starts, lengths = starts[filled], lengths[filled]
    offsets = np.cumsum(lengths[:-1])  # where runs 1.. begin in the output
    steps = np.ones(int(lengths.sum()), dtype=np.int64)
    steps[0] = starts[0]
    steps[offsets] = starts[1:] - (starts[:-1] + lengths[:-1]) + 1
    return np.cumsum(steps, out=steps)


def in_sorted(values: np.ndarray, ascending: np.ndarray) -> np.ndarray:
    """Mask of ``values`` found in the ascending array (binary search, vectorised)."""
    if ascending.size == 0 or values.size == 0:
        return np.zeros(values.size, dtype=bool)
    pos = np.searchsorted(ascending, values)
    return ascending[np.minimum(pos, ascending.size - 1)] == values


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` for a 1-d array, by a sort: numpy 2.4's ``np.unique`` counts
    distinct values in a hash set, 60-120x slower than a sort when most values are distinct
    (17 CPU-s for 10M PMIDs, 0.15 s sorted)."""
    ordered = np.sort(values)
    if ordered.size < 2:
        return ordered
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


def intersect_sorted(a: np.ndarray, b: np.ndarray, n_nodes: int | None = None) -> np.ndarray:
    """Common values of two ascending, duplicate-free arrays, ascending.

    Without ``n_nodes``: a binary search of the shorter in the longer, O(m log n). With it
    (every value below ``n_nodes``), the cheapest of three equivalent ways: that binary
    search when the lists are lopsided, a boolean table over every node when they are dense,
    a linear merge otherwise."""
    small, large = (a, b) if a.size <= b.size else (b, a)
    if small.size == 0:
        return small[:0]
    if n_nodes is None or small.size * 16 < large.size:
        return small[in_sorted(small, large)]
    if (a.size + b.size) * 20 >= n_nodes:
        table = np.zeros(n_nodes, dtype=bool)
        table[large] = True
        return small[np.flatnonzero(table[small])]
    # a stable sort of two ascending runs is one linear merge (timsort); a value in both
    # lists ends up next to itself
    merged = np.concatenate([a, b])
    merged.sort(kind="stable")
    return merged[1:][merged[1:] == merged[:-1]]
