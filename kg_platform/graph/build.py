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
- Parquet is read in record batches; the next batch is decoded on a worker thread while this
  one is mapped to node indices through a dense PMID lookup table and packed into keys in
  one compiled pass (dangling citations dropped in the same pass). Integer and boolean
  columns are read straight from Arrow's buffers (booleans as bitmaps).
- One buffer per edge kind serves packing, sorting, de-duplication and the reverse (the COO
  is never held twice), so peak memory is that buffer plus the output arrays.
- Citations and MeSH are built on two threads at once (``parallel``).
- Each finished array is written and hashed in the same pass on a writer thread while the
  build goes on.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kg_platform.graph import layout
from kg_platform.storage.corpus import corpus_fingerprint, corpus_parts
from kg_platform.storage.digest import array_sha256  # noqa: F401 (the graph checks use it)
from kg_platform.storage.lake import Lake

BATCH_ROWS = 1_000_000  # rows decoded at a time: bounds the temporaries per batch
_MAX_PMID = 2**31 - 2  # pmids are stored as int32
_DESCRIPTOR_UI = re.compile(r"^D\d{6,9}$")


class GraphInputError(ValueError):
    """A corpus or MeSH input the graph cannot be built from; the message names the input."""


@dataclass(frozen=True)
class ArrayInfo:
    dtype: str
    length: int
    sha256: str
    nbytes: int
    size: int = 0  # the .npy file's bytes (header and data): what KGStore.open checks


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


class _Clock:
    """Wall and this thread's CPU seconds per named phase, summed over laps (the CPU time
    tells the work apart from waiting for a core on a busy machine)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu_seconds: dict[str, float] = {}
        self.restart()

    def restart(self) -> None:
        """Start the next lap now, on the calling thread."""
        self._wall, self._cpu = time.perf_counter(), time.thread_time()

    def lap(self, phase: str) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + wall - self._wall
        self.cpu_seconds[phase] = self.cpu_seconds.get(phase, 0.0) + cpu - self._cpu
        self._wall, self._cpu = wall, cpu


def _rounded(seconds: dict[str, float]) -> dict[str, float]:
    return {phase: round(s, 3) for phase, s in seconds.items()}


# -- build id -----------------------------------------------------------------------------


def input_fingerprints(lake: Lake) -> dict[str, dict[str, str | int]]:
    """Size and modification stamp of every input, keyed by table name."""
    prints: dict[str, dict[str, str | int]] = {}
    for name, key in layout.CORPUS_INPUTS.items():
        _keys(lake, key)  # a table without parts is missing
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


# -- reading ------------------------------------------------------------------------------


@contextmanager
def _parquet(
    lake: Lake, key: str, columns: list[str], dictionary: tuple[str, ...] = ()
) -> Iterator[pq.ParquetFile]:
    with lake.open(key) as f:
        try:
            # pre_buffer off: it would hold several row groups of compressed columns at once
            pf = pq.ParquetFile(f, read_dictionary=list(dictionary) or None, pre_buffer=False)
        except (pa.ArrowException, OSError) as exc:
            raise GraphInputError(f"{lake.path(key)}: not readable as Parquet ({exc})") from exc
        missing = sorted(set(columns) - set(pf.schema_arrow.names))
        if missing:
            raise GraphInputError(
                f"{lake.path(key)}: missing column(s) {missing} (has {pf.schema_arrow.names})"
            )
        yield pf


def _keys(lake: Lake, key: str) -> list[str]:
    """The files of an input: a corpus table's parts in PMID order, else the key itself."""
    if key not in _CORPUS_TABLE_OF:
        return [key]
    parts = corpus_parts(lake, _CORPUS_TABLE_OF[key])
    if not parts:
        raise GraphInputError(f"{lake.path(key)}: no corpus parts; materialise `corpus` first")
    return parts


_CORPUS_TABLE_OF = {key: name for name, key in layout.CORPUS_INPUTS.items()}


def _read(lake: Lake, key: str, columns: list[str]) -> pa.Table:
    """``columns`` of an input whole (a corpus table's parts one after another)."""
    tables = []
    for part in _keys(lake, key):
        with _parquet(lake, part, columns) as pf:
            tables.append(pf.read(columns=columns))
    return pa.concat_tables(tables, promote_options="permissive")


def _num_rows(lake: Lake, key: str, columns: list[str]) -> int:
    total = 0
    for part in _keys(lake, key):
        with _parquet(lake, part, columns) as pf:
            total += pf.metadata.num_rows
    return total


def _batches(
    lake: Lake, key: str, columns: list[str], batch_rows: int, dictionary: tuple[str, ...] = ()
) -> Iterator[pa.RecordBatch]:
    """Record batches of ``columns`` (a corpus table's parts one after another). The next
    batch is decoded on a worker thread while the caller maps this one: Arrow's
    decompression releases the GIL, so the two overlap."""

    def every() -> Iterator[pa.RecordBatch]:
        for part in _keys(lake, key):
            with _parquet(lake, part, columns, dictionary) as pf:
                yield from pf.iter_batches(batch_size=batch_rows, columns=columns)

    with ThreadPoolExecutor(1) as reader:
        batches = every()
        pending = reader.submit(next, batches, None)
        while (batch := pending.result()) is not None:
            pending = reader.submit(next, batches, None)
            yield batch


def _column(batch: pa.RecordBatch | pa.Table, name: str) -> pa.Array:
    col = batch.column(name)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _ints(batch: pa.RecordBatch | pa.Table, name: str, where: str) -> np.ndarray:
    col = _column(batch, name)
    if col.null_count:
        raise GraphInputError(f"{where}: column {name} has {col.null_count} null(s)")
    if not pa.types.is_integer(col.type):
        raise GraphInputError(f"{where}: column {name} is {col.type}, expected integers")
    return _values(col).astype(np.int64, copy=False)


def _values(col: pa.Array) -> np.ndarray:
    """The values of an integer Arrow array, zero copy, ignoring its validity bitmap
    (Arrow's own ``to_numpy`` imports pandas the first time: a second of start-up)."""
    if len(col) == 0:
        return np.empty(0, dtype=np.dtype(str(col.type)))
    end = col.offset + len(col)
    return np.frombuffer(col.buffers()[1], dtype=np.dtype(str(col.type)), count=end)[col.offset :]


def _true(batch: pa.RecordBatch | pa.Table, name: str, where: str) -> np.ndarray:
    """Where a boolean column is true (null counts as false), unpacked from Arrow's bitmaps:
    ``fill_null`` on booleans costs ~50x more than this."""
    col = _column(batch, name)
    if not pa.types.is_boolean(col.type):
        raise GraphInputError(f"{where}: column {name} is {col.type}, expected booleans")
    end = col.offset + len(col)
    validity, values = col.buffers()
    bits = np.frombuffer(values, dtype=np.uint8, count=(end + 7) // 8)
    if validity is not None and col.null_count:
        bits = bits & np.frombuffer(validity, dtype=np.uint8, count=bits.size)
    return np.unpackbits(bits, count=end, bitorder="little")[col.offset :].view(bool)


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


def _read_articles(lake: Lake) -> _Articles:
    key = layout.CORPUS_INPUTS["articles"]
    where = lake.path(key)
    table = _read(lake, key, ["pmid", "year", "has_abstract"])
    if table.num_rows == 0:
        raise GraphInputError(f"{where}: no articles")
    pmids = _ints(table, "pmid", where)
    year = pl.from_arrow(_column(table, "year"))
    if not year.dtype.is_integer():
        raise GraphInputError(f"{where}: column year is {year.dtype}, expected integers")
    year = year.fill_null(0).to_numpy()
    quotable = _true(table, "has_abstract", where)
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
    return _Articles(pmids, np.clip(year, -1, 32767).astype(np.int16), quotable, lut, order)


# -- titles -------------------------------------------------------------------------------


def _title_pieces(col: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Byte length (int64), null mask and UTF-8 bytes (one uint8 array) of a string column,
    nulls as empty, read from Arrow's buffers."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise ValueError(f"column title is {col.type}, expected text")
    null = np.zeros(len(col), dtype=bool)
    if col.null_count:
        null = np.asarray(pl.from_arrow(col).is_null().to_numpy(), dtype=bool)
        col = pc.fill_null(col, "")
    col = col.cast(pa.large_string())
    _, offsets_buffer, data_buffer = col.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64, count=col.offset + len(col) + 1)
    offsets = offsets[col.offset :]
    data = (
        np.frombuffer(data_buffer, dtype=np.uint8)[offsets[0] : offsets[-1]]
        if data_buffer is not None and len(col)
        else np.zeros(0, dtype=np.uint8)
    )
    return np.diff(offsets), null, data


def _put_titles(lake: Lake, articles: _Articles, out: _ArrayWriter, batch_rows: int) -> None:
    """The title store (``layout.TITLE_ARRAYS``): each article's title in node order, so an
    answer's evidence titles are slices of mapped arrays instead of a Parquet row group
    decoded per question. Offsets and nulls come from one read of the column; the bytes are
    streamed to the lake by a second read on the writer thread (the file is in PMID order
    when the fold wrote it), so the build never holds every title at once. A file in
    another order is read whole and reordered; one without titles gives every one null."""
    key = layout.CORPUS_INPUTS["articles"]
    where = lake.path(key)
    n = articles.pmids.size
    with _parquet(lake, _keys(lake, key)[0], []) as pf:
        has_title = "title" in pf.schema_arrow.names
    if not has_title:
        out.put("title_offsets", np.zeros(n + 1, dtype=np.int64))
        out.put("title_bytes", np.zeros(0, dtype=np.uint8))
        out.put("title_null", np.ones(n, dtype=bool))
        return
    try:
        if articles.order is not None:
            lengths, null, data = _title_pieces(_read(lake, key, ["title"]).column("title"))
            starts = (np.cumsum(lengths) - lengths)[articles.order]
            lengths, null = lengths[articles.order], null[articles.order]
            begin = np.cumsum(lengths) - lengths
            data = data[np.arange(int(lengths.sum())) + np.repeat(starts - begin, lengths)]
        else:
            parts = [
                _title_pieces(batch.column("title"))[:2]
                for batch in _batches(lake, key, ["title"], batch_rows)
            ]
            lengths = np.concatenate([p[0] for p in parts] or [np.zeros(0, np.int64)])
            null = np.concatenate([p[1] for p in parts] or [np.zeros(0, bool)])
    except ValueError as error:
        raise GraphInputError(f"{where}: {error}") from None
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    out.put("title_offsets", offsets)
    out.put("title_null", null)
    if articles.order is not None:
        out.put("title_bytes", data)
        return

    def streamed() -> Iterator[np.ndarray]:
        for batch in _batches(lake, key, ["title"], batch_rows):
            yield _title_pieces(batch.column("title"))[2]

    out.put_stream("title_bytes", np.dtype(np.uint8), int(offsets[-1]), streamed)


def _article_flags(lake: Lake, articles: _Articles, batch_rows: int) -> np.ndarray:
    flags = np.where(articles.quotable, layout.QUOTABLE, 0).astype(np.uint8)
    marks = (
        ("corrections", "ref_type", layout.RETRACTION_REF_TYPE, layout.RETRACTED),
        ("corrections", "ref_type", layout.CONCERN_REF_TYPE, layout.CONCERN),
        ("pubtypes", "name", layout.RETRACTED_PUBTYPE, layout.RETRACTED),
    )
    for table, column, value, bit in marks:
        key = layout.CORPUS_INPUTS[table]
        for batch in _batches(lake, key, ["pmid", column], batch_rows):
            # compared in Polars: pyarrow's compare with a Python scalar imports pandas (~1 s)
            marked = pl.from_arrow(batch).filter(pl.col(column) == value)
            pmids = _ints(marked.to_arrow(), "pmid", lake.path(key))
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


def _put_csr(out: _ArrayWriter, csr: layout.Csr) -> None:
    """Put the arrays of one direction once their shape checks out (O(1))."""
    for name, array in csr.check().named().items():
        out.put(name, array)


def _fused_csr(
    keys: np.ndarray,
    n_rows: int,
    n_cols: int,
    kind: layout.EdgeKind,
    out: _ArrayWriter,
    clock: _Clock,
    label: str,
) -> _Built:
    """Both directions of an edge kind from its packed keys (row high, column low; the
    buffer is reused): sort, then one compiled pass de-duplicates, cuts the forward arrays
    and re-packs the keys reversed in place; sort again, then one pass cuts the reverse.
    Every array is put as soon as it is final."""
    from kg_platform.graph import csr  # numba loads only when a graph is built

    flag_bits = 1 if kind.flagged else 0
    csr.sort_keys(keys)
    _key_range(keys, n_rows, kind)
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    indices = np.empty(keys.size, dtype=np.int32)  # pages past the kept ones stay untouched
    flag = np.empty(keys.size if kind.flagged else 0, dtype=bool)
    kept = csr.cut_and_reverse(keys, flag_bits, indptr, indices, flag)
    fwd_flag = flag[:kept] if kind.flagged else None
    _put_csr(out, layout.Csr(kind, indptr, indices[:kept], n_rows, n_cols, fwd_flag))
    del indices, flag, fwd_flag
    keys = keys[:kept]
    clock.lap(f"{label}: sort, dedup")  # and the forward cut, the reverse re-pack
    keys.sort()
    reverse = layout.EDGE_KINDS[kind.reverse]
    _key_range(keys, n_cols, reverse)
    clock.lap(f"{label}: reverse sort")
    rev_indptr = np.zeros(n_cols + 1, dtype=np.int64)
    rev = np.empty(kept, dtype=np.int32)
    rev_flag = np.empty(kept if kind.flagged else 0, dtype=bool)
    flag_counts = np.zeros(n_cols if kind.flagged else 0, dtype=np.int64)
    csr.cut(keys, flag_bits, rev_indptr, rev, rev_flag, flag_counts)
    rev_csr = layout.Csr(
        reverse, rev_indptr, rev, n_cols, n_rows, rev_flag if kind.flagged else None
    )
    _put_csr(out, rev_csr)
    clock.lap(f"{label}: cut")
    return _Built(kept, rev_indptr, flag_counts)


# how both directions of an edge kind are made (the tests and benchmarks/graph.py swap in
# the numpy passes the compiled ones replaced, kg_platform_tests/support/sorting_csr.py)
_make_csr = _fused_csr

# -- writing ------------------------------------------------------------------------------

_WRITE_BLOCK = 1 << 22  # bytes hashed and written per step: still in cache for the write


class _ArrayWriter:
    """Writes each array as soon as it is final, on one worker thread that hashes it in the
    same pass, while the build goes on; an array must not change once it is put."""

    def __init__(self, lake: Lake, build_id: str) -> None:
        self.lake, self.build_id = lake, build_id
        self.arrays: dict[str, ArrayInfo] = {}  # in the order put (one worker keeps it)
        self._pool = ThreadPoolExecutor(1)
        self._pending: list[Future[None]] = []

    def __enter__(self) -> _ArrayWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def put(self, name: str, array: np.ndarray) -> None:
        self._pending.append(self._pool.submit(self._write, name, np.ascontiguousarray(array)))

    def put_stream(
        self, name: str, dtype: np.dtype, length: int, chunks: Callable[[], Iterator[np.ndarray]]
    ) -> None:
        """Write a 1-D array of ``length`` items given as consecutive pieces, made on the
        writer thread by ``chunks()`` (never all in memory); a different total is an error."""
        self._pending.append(self._pool.submit(self._write_stream, name, dtype, length, chunks))

    def finish(self) -> dict[str, ArrayInfo]:
        """Wait for every write (raises the first write error); the arrays in layout order,
        whichever thread put them first."""
        for pending in self._pending:
            pending.result()
        rank = {name: k for k, name in enumerate(layout.ALL_ARRAYS)}
        return dict(sorted(self.arrays.items(), key=lambda item: rank.get(item[0], len(rank))))

    def _write(self, name: str, array: np.ndarray) -> None:
        digest = hashlib.sha256()
        data = array.reshape(-1).view(np.uint8)
        with self.lake.writer(layout.array_key(self.build_id, name)) as f:
            # the same bytes np.save writes: a version 1.0 header, then the data
            header = np.lib.format.header_data_from_array_1_0(array)
            np.lib.format.write_array_header_1_0(f, header)
            for start in range(0, data.size, _WRITE_BLOCK):
                block = data[start : start + _WRITE_BLOCK]
                digest.update(block)
                f.write(block)
            size = f.tell()
        self.arrays[name] = ArrayInfo(
            dtype=array.dtype.str,
            length=int(array.shape[0]),
            sha256=digest.hexdigest(),
            nbytes=int(array.nbytes),
            size=int(size),
        )

    def _write_stream(
        self, name: str, dtype: np.dtype, length: int, chunks: Callable[[], Iterator[np.ndarray]]
    ) -> None:
        digest = hashlib.sha256()
        written = 0
        with self.lake.writer(layout.array_key(self.build_id, name)) as f:
            header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False}
            np.lib.format.write_array_header_1_0(f, {**header, "shape": (length,)})
            for chunk in chunks():
                data = np.ascontiguousarray(chunk, dtype=dtype).view(np.uint8)
                digest.update(data)
                f.write(data)
                written += chunk.size
            size = f.tell()
        if written != length:
            raise ValueError(f"{name}: {written} items written, {length} expected")
        self.arrays[name] = ArrayInfo(
            dtype=dtype.str,
            length=length,
            sha256=digest.hexdigest(),
            nbytes=length * dtype.itemsize,
            size=int(size),
        )


# -- citations ----------------------------------------------------------------------------


def _build_citations(
    lake: Lake, articles: _Articles, out: _ArrayWriter, batch_rows: int, clock: _Clock
) -> dict[str, int]:
    from kg_platform.graph import csr  # numba loads only when a graph is built

    clock.restart()  # this may be a worker thread: its own CPU clock
    key = layout.CORPUS_INPUTS["citations"]
    where = lake.path(key)
    n = articles.pmids.size
    rows = _num_rows(lake, key, ["citing_pmid", "cited_pmid"])
    keys = np.empty(rows, dtype=np.int64)  # pages past the kept rows are never touched
    filled = dangling = 0
    for batch in _batches(lake, key, ["citing_pmid", "cited_pmid"], batch_rows):
        citing = _ints(batch, "citing_pmid", where)
        cited = _ints(batch, "cited_pmid", where)
        # map both columns, drop dangling rows and pack the keys in one pass
        filled, dropped, outside = csr.map_pairs(articles.lut, citing, cited, keys, filled)
        if outside >= 0:
            _require_in_corpus(_to_index(articles.lut, citing), citing, where, "citing_pmid")
        dangling += dropped
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


def _read_descriptor_uis(lake: Lake) -> np.ndarray:
    key = layout.MESH_INPUTS["descriptors"]
    with _parquet(lake, key, ["ui"]) as pf:
        uis = pf.read(columns=["ui"]).column("ui").combine_chunks()
    if uis.null_count:
        raise GraphInputError(f"{lake.path(key)}: column ui has {uis.null_count} null(s)")
    known = np.array(uis.to_pylist(), dtype=object)
    unique = np.unique(known)
    if unique.size != known.size:
        raise GraphInputError(f"{lake.path(key)}: {known.size - unique.size} repeated ui(s)")
    return unique


def _descriptor_ids(values: pl.Series, lookup_uis: list[str]) -> np.ndarray:
    """Provisional id of each UI in ``values`` (int32), -1 where it is not in the lookup."""
    return values.replace_strict(
        lookup_uis, np.arange(len(lookup_uis)), default=-1, return_dtype=pl.Int32
    ).to_numpy()


def _mapped_with_new_uis(
    values: pl.Series, codes: np.ndarray, lookup_uis: list[str], where: str
) -> np.ndarray:
    """Provisional ids of a batch's dictionary ``values``; the UIs its rows use that the
    lookup lacks are appended to it first (sorted, each checked to be a MeSH UI)."""
    mapped = _descriptor_ids(values, lookup_uis)
    if mapped.min(initial=0) < 0:
        used = np.bincount(codes, minlength=values.len()) > 0
        new = (mapped < 0) & used
        if new.any():
            fresh = sorted(set(values.filter(pl.Series(new)).to_list()))
            bad = [ui for ui in fresh if not _DESCRIPTOR_UI.match(ui)]
            if bad:
                raise GraphInputError(f"{where}: descriptor_ui not a MeSH UI: {bad[:5]}")
            lookup_uis.extend(fresh)
            mapped = _descriptor_ids(values, lookup_uis)
    return mapped


def _build_mesh(
    lake: Lake, articles: _Articles, out: _ArrayWriter, batch_rows: int, clock: _Clock
) -> dict[str, int]:
    from kg_platform.graph import csr  # numba loads only when a graph is built

    clock.restart()  # this may be a worker thread: its own CPU clock
    key = layout.CORPUS_INPUTS["mesh_edges"]
    where = lake.path(key)
    n = articles.pmids.size
    known = _read_descriptor_uis(lake)
    # provisional descriptor ids: known UIs (sorted) first, unknown ones appended as seen
    lookup_uis: list[str] = known.tolist()
    columns = ["pmid", "descriptor_ui", "descriptor_major", "qualifier_major"]
    rows = _num_rows(lake, key, columns)
    # article << 32 | descriptor << 1 | major (the fold orders the rows by PMID)
    keys = np.empty(rows, dtype=np.int64)
    filled = 0
    for batch in _batches(lake, key, columns, batch_rows, dictionary=("descriptor_ui",)):
        pmids = _ints(batch, "pmid", where)
        uis = _column(batch, "descriptor_ui")
        if uis.null_count:
            raise GraphInputError(f"{where}: column descriptor_ui has {uis.null_count} null(s)")
        if not pa.types.is_dictionary(uis.type):
            uis = pc.dictionary_encode(uis)
        codes = _values(uis.indices)
        values = pl.Series("ui", uis.dictionary.cast(pa.string()))
        mapped = _mapped_with_new_uis(values, codes, lookup_uis, where)
        descriptor_major = _true(batch, "descriptor_major", where).view(np.uint8)
        qualifier_major = _true(batch, "qualifier_major", where).view(np.uint8)
        # map the PMIDs and pack the keys in one pass
        filled, outside = csr.map_flagged(
            articles.lut, pmids, codes.astype(np.int32, copy=False),
            np.array(mapped, dtype=np.int32), descriptor_major, qualifier_major, keys, filled,
        )  # fmt: skip
        if outside >= 0:
            _require_in_corpus(_to_index(articles.lut, pmids), pmids, where, "pmid")

    n_unknown = len(lookup_uis) - known.size
    all_uis = np.array(lookup_uis, dtype=object)
    if n_unknown:
        # re-number so descriptor ids follow the sorted UIs, known and unknown together
        order = np.argsort(all_uis, kind="stable")
        renumber = np.empty(order.size, dtype=np.int32)
        renumber[order] = np.arange(order.size, dtype=np.int32)
        csr.renumber_flagged(keys[:filled], renumber)
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
    categories, min_depth = _descriptor_attributes(lake, all_uis)
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


def _descriptor_attributes(lake: Lake, uis: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per descriptor id: tree-letter bitmask (bit k = 'A'+k) and minimum tree depth
    (segments of the shortest tree number, C04 = 1; -1 with no tree number)."""
    key = layout.MESH_INPUTS["tree"]
    with _parquet(lake, key, ["ui", "tree_number"]) as pf:
        tree = pl.from_arrow(pf.read(columns=["ui", "tree_number"])).drop_nulls()
    ids = pl.DataFrame({"ui": uis.tolist(), "d": np.arange(uis.size)})
    letters = {chr(65 + k): 1 << k for k in range(26)}
    per_ui = (
        tree.with_columns(
            pl.col("tree_number")
            .str.head(1)
            .replace_strict(letters, default=0, return_dtype=pl.Int64)
            .alias("bit"),
            (pl.col("tree_number").str.count_matches(r"\.") + 1).alias("depth"),
        )
        .group_by("ui")
        .agg(pl.col("bit").unique().sum().alias("categories"), pl.col("depth").min())
    )
    joined = ids.join(per_ui, on="ui", how="left").sort("d")
    categories = joined["categories"].fill_null(0).to_numpy().astype(np.uint32)
    depth = joined["depth"].fill_null(-1).to_numpy().astype(np.int16)
    return categories, depth


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
    clock = _Clock()
    inputs = input_fingerprints(lake)
    build_id = build_id or compute_build_id(inputs)
    with _ArrayWriter(lake, build_id) as out, ThreadPoolExecutor(1) as mesh_worker:
        articles = _read_articles(lake)
        flags = _article_flags(lake, articles, batch_rows)
        out.put("pmids", articles.pmids.astype(np.int32))
        out.put("year", articles.year)
        out.put("flags", flags)
        _put_titles(lake, articles, out, batch_rows)
        clock.lap("articles")
        mesh_clock = _Clock()
        mesh_job = (
            mesh_worker.submit(_build_mesh, lake, articles, out, batch_rows, mesh_clock)
            if parallel
            else None
        )
        citation = _build_citations(lake, articles, out, batch_rows, clock)
        if mesh_job is None:
            mesh_clock = _Clock()
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
    clocks: tuple[_Clock, _Clock],
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
