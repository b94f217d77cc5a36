"""Build the graph's arrays from the folded corpus and the MeSH tables.

Node index = row of ``corpus/articles`` ordered by PMID. Each edge kind is packed into one
int64 key per row: the row index in the high 32 bits, the column index (shifted left by one
for the major flag) in the low 32 bits; MeSH rows are keyed by article (the fold writes them
ordered by PMID), so ``art2mesh`` is the forward direction and ``mesh2art`` the reverse.
The keys are sorted once (a run of whole rows at a time when the rows already ascend, as
the fold writes them), then one compiled pass (``kg_platform.graph.csr``) de-duplicates
them, cuts the forward indptr, indices and flag, and re-packs each key reversed (column
high, row low) over the part of the same buffer it has already read; a second sort and one
more pass cut the reverse direction, each list ascending. numpy's 64-bit sort is
vectorised: it beat a counting scatter (numba, 3x slower per key: a cache miss per edge), a
stable argsort and scipy's csr->csc counting sort. The numpy-only way the arrays were
made before is kept as the tests' and the benchmark's reference, the same bytes
(``kg_platform_tests/support/sorting_csr.py``).

What keeps it fast and small:
- Every phase runs on a thread per core the process may use (``settings.usable_cores``: its CPU
  affinity): the corpus parts are read, mapped through a dense PMID lookup table and packed
  into keys a part per thread (one compiled pass per record batch, dangling citations
  dropped in it; integer and boolean columns straight from Arrow's buffers, booleans as
  bitmaps); the keys' chunks of whole rows are sorted, cut and re-packed one per thread,
  and the reverse direction cut by column range (``_fused_csr``). Arrow's decoding, numpy's
  sorts and the compiled passes release the GIL.
- One buffer per edge kind serves packing, sorting, de-duplication and the reverse (the COO
  is never held twice), so peak memory is that buffer plus the output arrays.
- Citations and MeSH are built on two threads at once (``parallel``): the serial moments of
  one (the parts moved together, a column range's merge) are filled by the other.
- Each finished array is written and hashed in the same pass on writer threads while the
  build goes on (``arrays.ArrayWriter``).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kg_platform.graph import layout
from kg_platform.graph.arrays import (
    FLAG_MARKS,
    ArrayInfo,
    ArrayWriter,
    Clock,
    GraphInputError,
    batches,
    column_of,
    descriptor_attributes,
    input_files,
    int_values,
    ints,
    marked_pmids,
    open_parquet,
    part_batches,
    part_rows,
    read_descriptor_uis,
    read_input,
    title_pieces,
    true_mask,
    years,
)
from kg_platform.settings import usable_cores as workers
from kg_platform.storage.corpus import corpus_fingerprint
from kg_platform.storage.digest import array_sha256  # noqa: F401 (named here for the tests)
from kg_platform.storage.lake import Lake

BATCH_ROWS = 1_000_000  # rows decoded at a time: bounds the temporaries per batch
_MAX_PMID = 2**31 - 2  # pmids are stored as int32
_DESCRIPTOR_UI = re.compile(r"^D\d{6,9}$")


@dataclass(frozen=True)
class GraphStats:
    n_articles: int
    n_descriptors: int
    n_unknown_descriptors: int  # UIs in mesh_edges absent from mesh/descriptors: kept as nodes
    citation_rows: int
    citation_edges: int  # distinct in-corpus (citing, cited) pairs
    dangling_citations: int  # rows whose cited PMID is not a corpus article
    duplicate_citations: int  # in-corpus rows repeating a pair already counted
    citation_retention: float  # in-corpus rows / all rows
    mesh_rows: int  # raw rows (one per qualifier)
    mesh_pairs: int  # distinct (article, descriptor)
    major_pairs: int
    quotable: int
    retracted: int
    concern: int
    array_bytes: int
    seconds: float

    @property
    def edges(self) -> int:
        """Traversable edges, each counted once (the stored reverse is the same edge)."""
        return self.citation_edges + self.mesh_pairs


@dataclass(frozen=True)
class GraphBuild:
    build_id: str
    inputs: dict[str, dict[str, str | int]]
    arrays: dict[str, ArrayInfo]
    stats: GraphStats
    # per phase of this build: wall seconds, and CPU seconds of the thread that ran it (not
    # part of the manifest: they vary run to run); with parallel=True phases overlap
    phase_seconds: dict[str, float] = field(default_factory=dict)
    phase_cpu_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def prefix(self) -> str:
        return layout.build_prefix(self.build_id)


def _rounded(seconds: dict[str, float]) -> dict[str, float]:
    return {phase: round(s, 3) for phase, s in seconds.items()}


# -- build id -----------------------------------------------------------------------------


def input_fingerprints(lake: Lake) -> dict[str, dict[str, str | int]]:
    """Size and modification stamp of every input, keyed by table name."""
    prints: dict[str, dict[str, str | int]] = {}
    for name, key in layout.CORPUS_INPUTS.items():
        input_files(lake, key)  # a table without parts is missing
        prints[name] = corpus_fingerprint(lake, name)
    for name, key in layout.MESH_INPUTS.items():
        if not lake.exists(key):
            raise GraphInputError(f"{lake.path(key)}: missing; materialise `mesh_tables` first")
        prints[name] = lake.fingerprint(key)
    return prints


def compute_build_id(inputs: dict[str, dict[str, str | int]]) -> str:
    """A short hash naming the exact corpus and MeSH files (and the array format)."""
    blob = json.dumps({"format": layout.GRAPH_FORMAT, "inputs": inputs}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


# -- PMIDs to nodes ------------------------------------------------------------------------


def _to_index(lut: np.ndarray, pmids: np.ndarray) -> np.ndarray:
    """Node index of each PMID, -1 where it is not a corpus article."""
    # clip mode maps PMIDs beyond the table to its last slot and negatives to slot 0 (PMID 0):
    # both hold -1, and no temporary index array is made
    return lut.take(pmids, mode="clip")


def _require_in_corpus(idx: np.ndarray, pmids: np.ndarray, where: str, column: str) -> None:
    if idx.size == 0 or idx.min() >= 0:  # one pass, no temporary, in the common case
        return
    outside = idx < 0
    examples = np.unique(pmids[outside])[:5].tolist()
    raise GraphInputError(
        f"{where}: {int(outside.sum())} row(s) whose {column} is not in corpus/articles "
        f"(e.g. {examples}); child tables must only hold rows of surviving articles"
    )


# -- per article --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Articles:
    pmids: np.ndarray  # int64, ascending
    year: np.ndarray  # int16, 0 = unknown
    quotable: np.ndarray  # bool
    lut: np.ndarray  # int32 node index by PMID, -1 = not an article
    order: np.ndarray | None = None  # file row of each node when the file is not in PMID order


def _read_articles(lake: Lake, pool: ThreadPoolExecutor) -> _Articles:
    key = layout.CORPUS_INPUTS["articles"]
    where = lake.path(key)
    table = read_input(lake, key, ["pmid", "year", "has_abstract"], pool)
    if table.num_rows == 0:
        raise GraphInputError(f"{where}: no articles")
    pmids = ints(table, "pmid", where)
    year = years(table, where)
    quotable = true_mask(table, "has_abstract", where)
    if pmids.min() <= 0 or pmids.max() > _MAX_PMID:
        raise GraphInputError(f"{where}: pmid outside 1..{_MAX_PMID} (int32 node ids)")
    order = None
    if not np.all(pmids[1:] > pmids[:-1]):
        order = np.argsort(pmids, kind="stable")
        pmids, year, quotable = pmids[order], year[order], quotable[order]
        repeated = pmids[1:] == pmids[:-1]
        if repeated.any():
            raise GraphInputError(
                f"{where}: {int(repeated.sum())} PMID(s) appear more than once "
                f"(e.g. {pmids[1:][repeated][:5].tolist()}); the corpus holds one row per PMID"
            )
    lut = np.full(int(pmids[-1]) + 2, -1, dtype=np.int32)  # slot 0 and the last stay -1
    lut[pmids] = np.arange(len(pmids), dtype=np.int32)
    return _Articles(pmids, year, quotable, lut, order)


# -- titles -------------------------------------------------------------------------------


def _put_titles(
    lake: Lake, articles: _Articles, out: ArrayWriter, batch_rows: int, pool: ThreadPoolExecutor
) -> None:
    """The title store (``layout.TITLE_ARRAYS``): each article's title in node order, so an
    answer's evidence titles are slices of mapped arrays instead of a Parquet row group
    decoded per question. Offsets and nulls come from one read of the column; the bytes are
    streamed to the lake by a second read on the writer thread (the file is in PMID order
    when the fold wrote it), so the build never holds every title at once. A file in
    another order is read whole and reordered; one without titles gives every one null."""
    key = layout.CORPUS_INPUTS["articles"]
    where = lake.path(key)
    n = articles.pmids.size
    with open_parquet(lake, input_files(lake, key)[0], []) as pf:
        has_title = "title" in pf.schema_arrow.names
    if not has_title:
        out.put("title_offsets", np.zeros(n + 1, dtype=np.int64))
        out.put("title_bytes", np.zeros(0, dtype=np.uint8))
        out.put("title_null", np.ones(n, dtype=bool))
        return
    if articles.order is not None:
        title = read_input(lake, key, ["title"], pool).column("title")
        lengths, null, data = title_pieces(title, where)
        starts = (np.cumsum(lengths) - lengths)[articles.order]
        lengths, null = lengths[articles.order], null[articles.order]
        begin = np.cumsum(lengths) - lengths
        data = data[np.arange(int(lengths.sum())) + np.repeat(starts - begin, lengths)]
    else:

        def lengths_and_nulls(part: str) -> list[tuple[np.ndarray, np.ndarray]]:
            return [
                title_pieces(batch.column("title"), where)[:2]
                for batch in part_batches(lake, part, ["title"], batch_rows)
            ]

        # the parts at once, a part per thread, in part order
        parts = [p for got in pool.map(lengths_and_nulls, input_files(lake, key)) for p in got]
        lengths = np.concatenate([p[0] for p in parts] or [np.zeros(0, np.int64)])
        null = np.concatenate([p[1] for p in parts] or [np.zeros(0, bool)])
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    out.put("title_offsets", offsets)
    out.put("title_null", null)
    if articles.order is not None:
        out.put("title_bytes", data)
        return

    def streamed() -> Iterator[np.ndarray]:
        for batch in batches(lake, key, ["title"], batch_rows):
            yield title_pieces(batch.column("title"), where)[2]

    out.put_stream("title_bytes", np.dtype(np.uint8), int(offsets[-1]), streamed)


def _article_flags(lake: Lake, articles: _Articles, batch_rows: int) -> np.ndarray:
    flags = np.where(articles.quotable, layout.QUOTABLE, 0).astype(np.uint8)
    for table, column, value, bit in FLAG_MARKS:
        key = layout.CORPUS_INPUTS[table]
        for batch in batches(lake, key, ["pmid", column], batch_rows):
            pmids = marked_pmids(batch, column, value, lake.path(key))
            idx = _to_index(articles.lut, pmids)
            _require_in_corpus(idx, pmids, lake.path(key), "pmid")
            flags[idx] |= bit  # repeated indices all set the same bit: order does not matter
    return flags


# -- CSR from an edge list ----------------------------------------------------------------


@dataclass(frozen=True)
class _Built:
    edges: int  # distinct (row, column) pairs
    rev_indptr: np.ndarray
    rev_flag_counts: np.ndarray  # flagged entries per reverse row (empty: no flag)


def _key_range(keys: np.ndarray, n_rows: int, kind: layout.EdgeKind) -> None:
    """Sorted keys' rows (high halves) within 0..n_rows - 1: the compiled cut writes
    ``indptr[row + 1]`` unchecked."""
    if keys.size and (keys[0] < 0 or keys[-1] >> 32 >= n_rows):
        raise ValueError(
            f"{kind.name}: keys span rows {int(keys[0] >> 32)} to {int(keys[-1] >> 32)}, "
            f"expected 0 to {n_rows - 1}"
        )


def _row_chunks(keys: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """``keys`` (rows ascending) cut into up to ``parts`` chunks of whole rows of about
    equal size. A key is below ``row << 32`` exactly when its row is below ``row``, so a
    binary search finds where a row starts even while each row's keys are unordered."""
    n = keys.size
    bounds = [0]
    for c in range(1, parts):
        at = n * c // parts
        if at <= bounds[-1]:
            continue
        at = int(np.searchsorted(keys, ((keys[at - 1] >> 32) + 1) << 32))
        if at >= n:
            break
        if at > bounds[-1]:
            bounds.append(at)
    bounds.append(n)
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _column_splits(
    keys: np.ndarray, starts: np.ndarray, stops: np.ndarray, n_cols: int, parts: int
) -> list[int]:
    """Up to ``parts`` column ranges (their first columns, then ``n_cols``) holding about as
    many entries each, read off the largest of the ascending runs of reversed keys."""
    i = int(np.argmax(stops - starts)) if starts.size else 0
    size = int(stops[i] - starts[i]) if starts.size else 0
    picks = [int(keys[starts[i] + size * c // parts] >> 32) for c in range(1, parts) if size]
    return sorted({0, n_cols, *(c for c in picks if 0 < c < n_cols)})


def _run_range(
    keys: np.ndarray, starts: np.ndarray, stops: np.ndarray, n_rows: int, kind: layout.EdgeKind
) -> None:
    """``_key_range`` of keys held as ascending runs ``keys[starts[i]:stops[i]]``."""
    full = stops > starts
    if full.any():
        first, last = int(keys[starts[full]].min()), int(keys[stops[full] - 1].max())
        if first < 0 or last >> 32 >= n_rows:
            raise ValueError(
                f"{kind.name}: keys span rows {first >> 32} to {last >> 32}, "
                f"expected 0 to {n_rows - 1}"
            )


def _fused_csr(
    keys: np.ndarray,
    n_rows: int,
    n_cols: int,
    kind: layout.EdgeKind,
    out: ArrayWriter,
    clock: Clock,
    label: str,
) -> _Built:
    """Both directions of an edge kind from its packed keys (row high, column low; the
    buffer is reused), on a thread per core (``settings.usable_cores``): the keys are cut into
    chunks of whole rows, one per thread, and each chunk sorted (``csr.sort_keys``) and its
    distinct entries counted; then each chunk is cut (its forward entries written at its
    offset, its keys re-packed reversed over its own front, ``csr.cut_range``) and its
    reversed keys sorted; then the reverse direction is cut by column range, one per
    thread, each merging the chunks' sorted runs (``csr.merge_cut``). Keys whose rows do
    not ascend are sorted whole first. Every array is put as soon as it is final; the
    bytes are those of one sort and one pass (``kg_platform_tests/graph/test_build_fused``)."""
    from kg_platform.graph import csr  # numba loads only when a graph is built

    flag_bits = 1 if kind.flagged else 0
    threads = workers()
    with ThreadPoolExecutor(threads) as pool:
        if keys.size and not csr.rows_ascend(keys):
            keys.sort()
        chunks = _row_chunks(keys, threads)

        def sort_and_count(chunk: tuple[int, int]) -> int:
            part = keys[chunk[0] : chunk[1]]
            csr.sort_keys(part)
            return csr.count_distinct(part, flag_bits)

        kept_in = np.array(list(pool.map(sort_and_count, chunks)), dtype=np.int64)
        _key_range(keys, n_rows, kind)
        offsets = np.concatenate([np.zeros(1, np.int64), np.cumsum(kept_in)])
        kept = int(offsets[-1])
        indptr = np.zeros(n_rows + 1, dtype=np.int64)
        indices = np.empty(kept, dtype=np.int32)
        flag = np.empty(kept if kind.flagged else 0, dtype=bool)

        def forward(c: int) -> None:
            lo, hi = chunks[c]
            csr.cut_range(keys[lo:hi], flag_bits, indptr, indices, flag, int(offsets[c]))

        list(pool.map(forward, range(len(chunks))))
        np.cumsum(indptr, out=indptr)
        # written while the reverse is made, so the writer frees them before its arrays exist
        out.put_csr(
            layout.Csr(kind, indptr, indices, n_rows, n_cols, flag if kind.flagged else None)
        )
        clock.lap(f"{label}: sort, dedup")  # and the forward cut, the reverse re-pack
        starts = np.array([lo for lo, _ in chunks], dtype=np.int64)
        stops = starts + kept_in
        # each chunk's reversed keys sorted: one ascending run per chunk
        list(pool.map(lambda run: keys[run[0] : run[1]].sort(), zip(starts, stops, strict=True)))
        reverse = layout.EDGE_KINDS[kind.reverse]
        _run_range(keys, starts, stops, n_cols, reverse)
        clock.lap(f"{label}: reverse sort")
        rev_indptr = np.zeros(n_cols + 1, dtype=np.int64)
        rev = np.empty(kept, dtype=np.int32)
        rev_flag = np.empty(kept if kind.flagged else 0, dtype=bool)
        flag_counts = np.zeros(n_cols if kind.flagged else 0, dtype=np.int64)
        splits = _column_splits(keys, starts, stops, n_cols, threads)
        # where each column range starts in each run, and in the reverse direction
        at = [
            starts
            + np.array(
                [
                    np.searchsorted(keys[a:b], column << 32)
                    for a, b in zip(starts, stops, strict=True)
                ],
                dtype=np.int64,
            )
            for column in splits[:-1]
        ] + [stops]
        begin = [int((a - starts).sum()) for a in at]

        def backward(r: int) -> None:
            csr.merge_cut(
                keys, at[r], at[r + 1], flag_bits, rev_indptr, rev, rev_flag, flag_counts,
                begin[r],
            )  # fmt: skip

        list(pool.map(backward, range(len(splits) - 1)))
        np.cumsum(rev_indptr, out=rev_indptr)
    rev_csr = layout.Csr(
        reverse, rev_indptr, rev, n_cols, n_rows, rev_flag if kind.flagged else None
    )
    out.put_csr(rev_csr)
    clock.lap(f"{label}: cut")
    return _Built(kept, rev_indptr, flag_counts)


# how both directions of an edge kind are made (the tests and benchmarks/graph.py swap in
# the numpy passes the compiled ones replaced, kg_platform_tests/support/sorting_csr.py)
_make_csr = _fused_csr

# -- citations ----------------------------------------------------------------------------


def _keys_by_part(
    lake: Lake,
    key: str,
    columns: list[str],
    batch_rows: int,
    fill: Callable[[pa.RecordBatch, np.ndarray, int], tuple[int, int]],
    dictionary: tuple[str, ...] = (),
) -> tuple[np.ndarray, int, int]:
    """One key buffer of an input: its parts read, mapped and packed at once, a part per
    thread (``settings.usable_cores``), each into its own stretch of the buffer (``fill(batch,
    keys, filled) -> (filled, dropped)`` packs a batch), then moved together in part order
    (the fold's parts are in PMID order, so the rows still ascend). Returns the buffer, the
    keys in it and the rows dropped. The first part that fails raises, in part order."""
    from kg_platform.graph import csr  # numba loads only when a graph is built

    parts, rows = part_rows(lake, key, columns)
    starts = np.concatenate([np.zeros(1, np.int64), np.cumsum(rows, dtype=np.int64)])
    keys = np.empty(int(starts[-1]), dtype=np.int64)  # pages past the kept rows stay untouched

    def one(p: int) -> tuple[int, int]:
        filled, dropped = int(starts[p]), 0
        for batch in part_batches(lake, parts[p], columns, batch_rows, dictionary):
            filled, lost = fill(batch, keys, filled)
            dropped += lost
        return filled, dropped

    with ThreadPoolExecutor(workers()) as pool:
        done = list(pool.map(one, range(len(parts))))
    filled = dropped = 0
    for p, (end, lost) in enumerate(done):
        size = end - int(starts[p])
        if filled != starts[p]:
            csr.move_down(keys, int(starts[p]), filled, size)
        filled += size
        dropped += lost
    return keys, filled, dropped


def _build_citations(
    lake: Lake, articles: _Articles, out: ArrayWriter, batch_rows: int, clock: Clock
) -> dict[str, int]:
    from kg_platform.graph import csr  # numba loads only when a graph is built

    clock.restart()  # this may be a worker thread: its own CPU clock
    key = layout.CORPUS_INPUTS["citations"]
    where = lake.path(key)
    n = articles.pmids.size

    def fill(batch: pa.RecordBatch, keys: np.ndarray, filled: int) -> tuple[int, int]:
        citing = ints(batch, "citing_pmid", where)
        cited = ints(batch, "cited_pmid", where)
        # map both columns, drop dangling rows and pack the keys in one pass
        filled, dropped, outside = csr.map_pairs(articles.lut, citing, cited, keys, filled)
        if outside >= 0:
            _require_in_corpus(_to_index(articles.lut, citing), citing, where, "citing_pmid")
        return filled, dropped

    keys, filled, dangling = _keys_by_part(
        lake, key, ["citing_pmid", "cited_pmid"], batch_rows, fill
    )
    rows = keys.size
    clock.lap("citations: read, map, pack")
    cite = layout.EDGE_KINDS["cite"]
    built = _make_csr(keys[:filled], n, n, cite, out, clock, "citations")
    del keys
    return {
        "citation_rows": rows,
        "citation_edges": built.edges,
        "dangling_citations": dangling,
        "duplicate_citations": filled - built.edges,
    }


# -- MeSH ---------------------------------------------------------------------------------


class _DescriptorLookup:
    """Provisional descriptor ids: the known UIs (sorted) first, the unknown ones appended
    as the batches bring them. A batch's dictionary is mapped by one ``index_in`` against
    the UIs as one Arrow array, made again only when UIs are appended: rebuilding the
    lookup from 30,000 Python strings per batch cost 4x the mapping itself."""

    def __init__(self, known: np.ndarray) -> None:
        self.uis: list[str] = known.tolist()
        self._array = pa.array(self.uis, type=pa.string())

    def ids(self, values: pa.Array) -> np.ndarray:
        """Provisional id of each UI in ``values`` (int32), -1 where it is not a UI yet."""
        found = pc.index_in(values, value_set=self._array).fill_null(-1)
        return int_values(found.cast(pa.int32()))

    def mapped(self, values: pa.Array, codes: np.ndarray, where: str) -> np.ndarray:
        """Provisional ids of a batch's dictionary ``values``; the UIs its rows use that the
        lookup lacks are appended to it first (sorted, each checked to be a MeSH UI)."""
        mapped = self.ids(values)
        if mapped.min(initial=0) < 0:
            used = np.bincount(codes, minlength=len(values)) > 0
            new = (mapped < 0) & used
            if new.any():
                fresh = sorted(set(values.filter(pa.array(new)).to_pylist()))
                bad = [ui for ui in fresh if not _DESCRIPTOR_UI.match(ui)]
                if bad:
                    raise GraphInputError(f"{where}: descriptor_ui not a MeSH UI: {bad[:5]}")
                self.uis.extend(fresh)
                self._array = pa.array(self.uis, type=pa.string())
                mapped = self.ids(values)
        return mapped


def _renumbered(keys: np.ndarray, renumber: np.ndarray) -> None:
    """``csr.renumber_flagged`` in place, a stretch of the keys per thread."""
    from kg_platform.graph import csr  # numba loads only when a graph is built

    cuts = np.linspace(0, keys.size, workers() + 1).astype(np.int64).tolist()
    with ThreadPoolExecutor(workers()) as pool:
        jobs = [
            pool.submit(csr.renumber_flagged, keys[a:b], renumber)
            for a, b in zip(cuts[:-1], cuts[1:], strict=True)
        ]
        for job in jobs:
            job.result()


def _build_mesh(
    lake: Lake, articles: _Articles, out: ArrayWriter, batch_rows: int, clock: Clock
) -> dict[str, int]:
    from kg_platform.graph import csr  # numba loads only when a graph is built

    clock.restart()  # this may be a worker thread: its own CPU clock
    key = layout.CORPUS_INPUTS["mesh_edges"]
    where = lake.path(key)
    n = articles.pmids.size
    known = read_descriptor_uis(lake)
    # provisional descriptor ids: known UIs (sorted) first, unknown ones appended as seen
    lookup = _DescriptorLookup(known)
    columns = ["pmid", "descriptor_ui", "descriptor_major", "qualifier_major"]
    # the UIs new to the lookup are appended by one part at a time
    lookup_lock = threading.Lock()

    # article << 32 | descriptor << 1 | major (the fold orders the rows by PMID)
    def fill(batch: pa.RecordBatch, keys: np.ndarray, filled: int) -> tuple[int, int]:
        pmids = ints(batch, "pmid", where)
        uis = column_of(batch, "descriptor_ui")
        if uis.null_count:
            raise GraphInputError(f"{where}: column descriptor_ui has {uis.null_count} null(s)")
        if not pa.types.is_dictionary(uis.type):
            uis = pc.dictionary_encode(uis)
        codes = int_values(uis.indices)
        values = uis.dictionary.cast(pa.string())
        with lookup_lock:
            mapped = lookup.mapped(values, codes, where)
        descriptor_major = true_mask(batch, "descriptor_major", where).view(np.uint8)
        qualifier_major = true_mask(batch, "qualifier_major", where).view(np.uint8)
        # map the PMIDs and pack the keys in one pass
        filled, outside = csr.map_flagged(
            articles.lut, pmids, codes.astype(np.int32, copy=False),
            np.array(mapped, dtype=np.int32), descriptor_major, qualifier_major, keys, filled,
        )  # fmt: skip
        if outside >= 0:
            _require_in_corpus(_to_index(articles.lut, pmids), pmids, where, "pmid")
        return filled, 0

    keys, filled, _ = _keys_by_part(
        lake, key, columns, batch_rows, fill, dictionary=("descriptor_ui",)
    )
    rows = keys.size

    n_unknown = len(lookup.uis) - known.size
    all_uis = np.array(lookup.uis, dtype=object)
    if n_unknown:
        # re-number so descriptor ids follow the sorted UIs, known and unknown together
        order = np.argsort(all_uis, kind="stable")
        renumber = np.empty(order.size, dtype=np.int32)
        renumber[order] = np.arange(order.size, dtype=np.int32)
        _renumbered(keys[:filled], renumber)
        all_uis = all_uis[order]
    n_desc = all_uis.size
    clock.lap("mesh: read, map, pack")

    # (article, descriptor) runs end with their major row if there is one: keep the last
    art2mesh = layout.EDGE_KINDS["art2mesh"]
    built = _make_csr(keys[:filled], n, n_desc, art2mesh, out, clock, "mesh")
    del keys
    article_count = np.diff(built.rev_indptr).astype(np.int32)
    major_count = built.rev_flag_counts.astype(np.int32)

    width = max((len(u) for u in all_uis), default=1)
    out.put("mesh_uis", all_uis.astype(f"S{width}"))
    out.put("mesh_article_count", article_count)
    out.put("mesh_major_count", major_count)
    categories, min_depth = descriptor_attributes(lake, all_uis)
    out.put("mesh_categories", categories)
    out.put("mesh_min_depth", min_depth)
    clock.lap("mesh: descriptors")
    return {
        "n_descriptors": int(n_desc),
        "n_unknown_descriptors": int(n_unknown),
        "mesh_rows": rows,
        "mesh_pairs": built.edges,
        "major_pairs": int(major_count.sum()),
    }


# -- the whole build ----------------------------------------------------------------------


def build_graph(
    lake: Lake,
    build_id: str | None = None,
    batch_rows: int = BATCH_ROWS,
    parallel: bool = True,
    provenance: dict[str, object] | None = None,
) -> GraphBuild:
    """Build every array under graph/<build-id>/ and write manifest.json last.

    With ``parallel`` the MeSH arrays are built on a second thread while the citation arrays
    are built on this one: they share only the PMID lookup, and Arrow, Polars and numpy's
    sorts and passes release the GIL, so two cores do twice the work; peak memory is then
    both kinds' key buffers at once instead of the larger one. The arrays are the same.

    Does not publish: the caller checks the build and then calls ``layout.publish``, so a
    build that fails its checks never replaces the graph readers open.
    """
    started = time.perf_counter()
    clock = Clock()
    inputs = input_fingerprints(lake)
    build_id = build_id or compute_build_id(inputs)
    with (
        ArrayWriter(lake, build_id) as out,
        ThreadPoolExecutor(1) as mesh_worker,
        ThreadPoolExecutor(workers()) as pool,
    ):
        articles = _read_articles(lake, pool)
        flags = _article_flags(lake, articles, batch_rows)
        out.put("pmids", articles.pmids.astype(np.int32))
        out.put("year", articles.year)
        out.put("flags", flags)
        _put_titles(lake, articles, out, batch_rows, pool)
        clock.lap("articles")
        mesh_clock = Clock()
        mesh_job = (
            mesh_worker.submit(_build_mesh, lake, articles, out, batch_rows, mesh_clock)
            if parallel
            else None
        )
        citation = _build_citations(lake, articles, out, batch_rows, clock)
        if mesh_job is None:
            mesh_clock = Clock()
            mesh = _build_mesh(lake, articles, out, batch_rows, mesh_clock)
            clock.restart()  # the MeSH phases are timed on mesh_clock
        else:
            mesh = mesh_job.result()
            clock.lap("waiting for mesh")
        arrays = out.finish()
        clock.lap("waiting for the writer")

    return finish_build(
        lake,
        build_id,
        inputs,
        provenance,
        int(articles.pmids.size),
        flags,
        arrays,
        citation,
        mesh,
        started,
        (clock, mesh_clock),
    )


def finish_build(
    lake: Lake,
    build_id: str,
    inputs: dict[str, dict[str, str | int]],
    provenance: dict[str, object] | None,
    n_articles: int,
    flags: np.ndarray,
    arrays: dict[str, ArrayInfo],
    citation: dict[str, int],
    mesh: dict[str, int],
    started: float,
    clocks: tuple[Clock, Clock],
) -> GraphBuild:
    """The build's figures from its arrays and phase counts, its manifest written: the last
    step of a full build and of a patched one (``patch.patch_graph``)."""
    rows = citation["citation_rows"]
    stats = GraphStats(
        n_articles=n_articles,
        citation_retention=(rows - citation["dangling_citations"]) / rows if rows else 0.0,
        quotable=int(np.count_nonzero(flags & layout.QUOTABLE)),
        retracted=int(np.count_nonzero(flags & layout.RETRACTED)),
        concern=int(np.count_nonzero(flags & layout.CONCERN)),
        array_bytes=sum(a.nbytes for a in arrays.values()),
        seconds=round(time.perf_counter() - started, 3),
        **citation,
        **mesh,
    )
    clock, mesh_clock = clocks
    build = GraphBuild(
        build_id,
        inputs,
        arrays,
        stats,
        phase_seconds=_rounded({**clock.seconds, **mesh_clock.seconds}),
        phase_cpu_seconds=_rounded({**clock.cpu_seconds, **mesh_clock.cpu_seconds}),
    )
    write_manifest(lake, build, provenance)
    return build


def write_manifest(lake: Lake, build: GraphBuild, provenance: dict[str, object] | None) -> None:
    """The build's manifest.json, written last: a build without one is not complete."""
    manifest = {
        "build_id": build.build_id,
        "format": layout.GRAPH_FORMAT,
        "inputs": build.inputs,
        "stats": asdict(build.stats),
        "arrays": {name: asdict(info) for name, info in build.arrays.items()},
        # which corpus and MeSH partitions (and data versions) the build read
        **({"provenance": provenance} if provenance else {}),
    }
    key = layout.manifest_key(build.build_id)
    lake.write_bytes(key, json.dumps(manifest, indent=1).encode())
