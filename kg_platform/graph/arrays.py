"""The graph's arrays in and out, shared by the full build (``build``) and the patched one
(``patch``): the corpus and MeSH inputs read as numpy columns (a corpus table's parts one
after another, in record batches decoded ahead on a worker thread, integer and boolean
columns straight from Arrow's buffers, titles as lengths, nulls and bytes), each finished
array written and hashed on a writer thread while the build goes on, and a clock of wall
and CPU seconds per phase."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kg_platform.graph import layout
from kg_platform.settings import usable_cores as workers
from kg_platform.storage.corpus import corpus_parts
from kg_platform.storage.lake import Lake


class GraphInputError(ValueError):
    """A corpus or MeSH input the graph cannot be built from; the message names the input."""


@dataclass(frozen=True)
class ArrayInfo:
    dtype: str
    length: int
    sha256: str
    nbytes: int
    size: int = 0  # the .npy file's bytes (header and data): what KGStore.open checks


class Clock:
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


@contextmanager
def open_parquet(
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


def input_files(lake: Lake, key: str) -> list[str]:
    """The files of an input: a corpus table's parts in PMID order, else the key itself."""
    if key not in _CORPUS_TABLE_OF:
        return [key]
    parts = corpus_parts(lake, _CORPUS_TABLE_OF[key])
    if not parts:
        raise GraphInputError(f"{lake.path(key)}: no corpus parts; materialise `corpus` first")
    return parts


_CORPUS_TABLE_OF = {key: name for name, key in layout.CORPUS_INPUTS.items()}


def read_input(
    lake: Lake, key: str, columns: list[str], pool: ThreadPoolExecutor | None = None
) -> pa.Table:
    """``columns`` of an input whole (a corpus table's parts one after another; read at
    once on ``pool``'s threads when given: Arrow's decoding releases the GIL)."""

    def one(part: str) -> pa.Table:
        with open_parquet(lake, part, columns) as pf:
            return pf.read(columns=columns, use_threads=pool is None)

    parts = input_files(lake, key)
    tables = list(pool.map(one, parts)) if pool is not None else [one(p) for p in parts]
    return pa.concat_tables(tables, promote_options="permissive")


def part_rows(lake: Lake, key: str, columns: list[str]) -> tuple[list[str], list[int]]:
    """The files of an input (``input_files``) and the rows of each, from their footers."""
    parts = input_files(lake, key)
    rows = []
    for part in parts:
        with open_parquet(lake, part, columns) as pf:
            rows.append(pf.metadata.num_rows)
    return parts, rows


def part_batches(
    lake: Lake, part: str, columns: list[str], batch_rows: int, dictionary: tuple[str, ...] = ()
) -> Iterator[pa.RecordBatch]:
    """Record batches of ``columns`` of one file, decoded on the calling thread (the parts
    of an input are read on threads of their own, ``build._keys_by_part``)."""
    with open_parquet(lake, part, columns, dictionary) as pf:
        yield from pf.iter_batches(batch_size=batch_rows, columns=columns, use_threads=False)


def num_rows(lake: Lake, key: str, columns: list[str]) -> int:
    total = 0
    for part in input_files(lake, key):
        with open_parquet(lake, part, columns) as pf:
            total += pf.metadata.num_rows
    return total


def batches(
    lake: Lake, key: str, columns: list[str], batch_rows: int, dictionary: tuple[str, ...] = ()
) -> Iterator[pa.RecordBatch]:
    """Record batches of ``columns`` (a corpus table's parts one after another). The next
    batch is decoded on a worker thread while the caller maps this one: Arrow's
    decompression releases the GIL, so the two overlap."""

    def every() -> Iterator[pa.RecordBatch]:
        for part in input_files(lake, key):
            with open_parquet(lake, part, columns, dictionary) as pf:
                yield from pf.iter_batches(batch_size=batch_rows, columns=columns)

    with ThreadPoolExecutor(1) as reader:
        batches = every()
        pending = reader.submit(next, batches, None)
        while (batch := pending.result()) is not None:
            pending = reader.submit(next, batches, None)
            yield batch


def column_of(batch: pa.RecordBatch | pa.Table, name: str) -> pa.Array:
    col = batch.column(name)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def ints(batch: pa.RecordBatch | pa.Table, name: str, where: str) -> np.ndarray:
    col = column_of(batch, name)
    if col.null_count:
        raise GraphInputError(f"{where}: column {name} has {col.null_count} null(s)")
    if not pa.types.is_integer(col.type):
        raise GraphInputError(f"{where}: column {name} is {col.type}, expected integers")
    return int_values(col).astype(np.int64, copy=False)


def int_values(col: pa.Array) -> np.ndarray:
    """The values of an integer Arrow array, zero copy, ignoring its validity bitmap
    (Arrow's own ``to_numpy`` imports pandas the first time: a second of start-up)."""
    if len(col) == 0:
        return np.empty(0, dtype=np.dtype(str(col.type)))
    end = col.offset + len(col)
    return np.frombuffer(col.buffers()[1], dtype=np.dtype(str(col.type)), count=end)[col.offset :]


def true_mask(batch: pa.RecordBatch | pa.Table, name: str, where: str) -> np.ndarray:
    """Where a boolean column is true (null counts as false), unpacked from Arrow's bitmaps:
    ``fill_null`` on booleans costs ~50x more than this."""
    col = column_of(batch, name)
    if not pa.types.is_boolean(col.type):
        raise GraphInputError(f"{where}: column {name} is {col.type}, expected booleans")
    end = col.offset + len(col)
    validity, values = col.buffers()
    bits = np.frombuffer(values, dtype=np.uint8, count=(end + 7) // 8)
    if validity is not None and col.null_count:
        bits = bits & np.frombuffer(validity, dtype=np.uint8, count=bits.size)
    return np.unpackbits(bits, count=end, bitorder="little")[col.offset :].view(bool)


def years(batch: pa.RecordBatch | pa.Table, where: str) -> np.ndarray:
    """The year column as int16, 0 where unknown (null), clipped to int16."""
    year = pl.from_arrow(column_of(batch, "year"))
    if not year.dtype.is_integer():
        raise GraphInputError(f"{where}: column year is {year.dtype}, expected integers")
    return np.clip(year.fill_null(0).to_numpy(), -1, 32767).astype(np.int16)


# the rows that set an article's flag bit: (corpus table, column, value, bit)
FLAG_MARKS = (
    ("corrections", "ref_type", layout.RETRACTION_REF_TYPE, layout.RETRACTED),
    ("corrections", "ref_type", layout.CONCERN_REF_TYPE, layout.CONCERN),
    ("pubtypes", "name", layout.RETRACTED_PUBTYPE, layout.RETRACTED),
)


def marked_pmids(
    rows: pa.RecordBatch | pa.Table, column: str, value: str, where: str
) -> np.ndarray:
    """The PMIDs of the rows whose ``column`` is ``value`` (one of FLAG_MARKS)."""
    # compared in Polars: pyarrow's compare with a Python scalar imports pandas (~1 s)
    marked = pl.from_arrow(rows.select(["pmid", column])).filter(pl.col(column) == value)
    return ints(marked.to_arrow(), "pmid", where)


def title_pieces(
    col: pa.Array | pa.ChunkedArray, where: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Byte length (int64), null mask and UTF-8 bytes (one uint8 array) of a string column,
    nulls as empty, read from Arrow's buffers."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise GraphInputError(f"{where}: column title is {col.type}, expected text")
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


_WRITE_BLOCK = 1 << 22  # bytes hashed and written per step: still in cache for the write


class ArrayWriter:
    """Writes each array as soon as it is final, on worker threads (``threads``, default
    the cores the process may use: hashlib and the writes release the GIL) that hash it in
    the same pass, while the build goes on; an array must not change once it is put."""

    def __init__(self, lake: Lake, build_id: str, threads: int | None = None) -> None:
        self.lake, self.build_id = lake, build_id
        self.arrays: dict[str, ArrayInfo] = {}  # in the order written (``finish`` sorts)
        self._pool = ThreadPoolExecutor(threads or workers())
        self._pending: list[Future[None]] = []

    def __enter__(self) -> ArrayWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def put(self, name: str, array: np.ndarray) -> None:
        self._pending.append(self._pool.submit(self._write, name, np.ascontiguousarray(array)))

    def put_csr(self, csr: layout.Csr) -> None:
        """Put the arrays of one direction (a Csr's shape checked out when it was made)."""
        for name, array in csr.named().items():
            self.put(name, array)

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


def read_descriptor_uis(lake: Lake) -> np.ndarray:
    key = layout.MESH_INPUTS["descriptors"]
    with open_parquet(lake, key, ["ui"]) as pf:
        uis = pf.read(columns=["ui"]).column("ui").combine_chunks()
    if uis.null_count:
        raise GraphInputError(f"{lake.path(key)}: column ui has {uis.null_count} null(s)")
    known = np.array(uis.to_pylist(), dtype=object)
    unique = np.unique(known)
    if unique.size != known.size:
        raise GraphInputError(f"{lake.path(key)}: {known.size - unique.size} repeated ui(s)")
    return unique


def descriptor_attributes(lake: Lake, uis: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per descriptor id: tree-letter bitmask (bit k = 'A'+k) and minimum tree depth
    (segments of the shortest tree number, C04 = 1; -1 with no tree number)."""
    key = layout.MESH_INPUTS["tree"]
    with open_parquet(lake, key, ["ui", "tree_number"]) as pf:
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
