"""Build the graph's arrays from the folded corpus and the MeSH tables.

Node index = row of ``corpus/articles`` ordered by PMID. Each edge kind is packed into one
int64 key per row (row index in the high bits, column index and flag below), sorted once,
de-duplicated, and every aligned array (indptr, indices, major) is cut from that one sorted
array; the counting pass (``np.bincount``) gives the indptr. The reverse direction is the
same keys re-packed the other way round and sorted again. Parquet is read in record batches
and mapped to node indices through a dense PMID lookup table, so no Python loop touches a row.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kg_platform.graph import layout
from kg_platform.storage.lake import Lake

BATCH_ROWS = 4_000_000
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

    @property
    def prefix(self) -> str:
        return layout.build_prefix(self.build_id)


# -- build id -----------------------------------------------------------------------------


def input_fingerprints(lake: Lake) -> dict[str, dict[str, str | int]]:
    """Size and modification stamp of every input, keyed by table name."""
    prints: dict[str, dict[str, str | int]] = {}
    for name, key in {**layout.CORPUS_INPUTS, **layout.MESH_INPUTS}.items():
        if not lake.exists(key):
            producer = "corpus" if key.startswith("corpus/") else "mesh_tables"
            raise GraphInputError(f"{lake.path(key)}: missing; materialise `{producer}` first")
        info = lake.fs.info(lake.path(key))
        stamp = info.get("mtime") or info.get("LastModified") or info.get("ETag") or ""
        prints[name] = {"key": key, "size": int(info["size"]), "stamp": str(stamp)}
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
            pf = pq.ParquetFile(f, read_dictionary=list(dictionary) or None)
        except (pa.ArrowException, OSError) as exc:
            raise GraphInputError(f"{lake.path(key)}: not readable as Parquet ({exc})") from exc
        missing = sorted(set(columns) - set(pf.schema_arrow.names))
        if missing:
            raise GraphInputError(
                f"{lake.path(key)}: missing column(s) {missing} (has {pf.schema_arrow.names})"
            )
        yield pf


def _batches(
    lake: Lake, key: str, columns: list[str], batch_rows: int, dictionary: tuple[str, ...] = ()
) -> Iterator[pa.RecordBatch]:
    with _parquet(lake, key, columns, dictionary) as pf:
        yield from pf.iter_batches(batch_size=batch_rows, columns=columns)


def _ints(batch: pa.RecordBatch | pa.Table, name: str, where: str) -> np.ndarray:
    col = batch.column(name)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if col.null_count:
        raise GraphInputError(f"{where}: column {name} has {col.null_count} null(s)")
    return col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _bools(batch: pa.RecordBatch | pa.Table, name: str, null_as: bool = False) -> np.ndarray:
    col = batch.column(name)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if col.null_count:
        col = pc.fill_null(col, null_as)
    return col.to_numpy(zero_copy_only=False).astype(bool, copy=False)


def _to_index(lut: np.ndarray, pmids: np.ndarray) -> np.ndarray:
    """Node index of each PMID, -1 where it is not a corpus article."""
    # clip mode maps PMIDs beyond the table to its last slot and negatives to slot 0 (PMID 0):
    # both hold -1, and no temporary index array is made
    return lut.take(pmids, mode="clip")


def _require_in_corpus(idx: np.ndarray, pmids: np.ndarray, where: str, column: str) -> None:
    outside = idx < 0
    if outside.any():
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


def _read_articles(lake: Lake) -> _Articles:
    key = layout.CORPUS_INPUTS["articles"]
    where = lake.path(key)
    with _parquet(lake, key, ["pmid", "year", "has_abstract"]) as pf:
        table = pf.read(columns=["pmid", "year", "has_abstract"])
    if table.num_rows == 0:
        raise GraphInputError(f"{where}: no articles")
    pmids = _ints(table, "pmid", where)
    year = pc.fill_null(table.column("year"), 0).combine_chunks().to_numpy(zero_copy_only=False)
    quotable = _bools(table, "has_abstract")
    if pmids.min() <= 0 or pmids.max() > _MAX_PMID:
        raise GraphInputError(f"{where}: pmid outside 1..{_MAX_PMID} (int32 node ids)")
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
    return _Articles(pmids, np.clip(year, -1, 32767).astype(np.int16), quotable, lut)


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
            hit = pc.fill_null(pc.equal(batch.column(column), value), False)
            pmids = _ints(batch.filter(hit), "pmid", lake.path(key))
            idx = _to_index(articles.lut, pmids)
            _require_in_corpus(idx, pmids, lake.path(key), "pmid")
            flags[idx] |= bit  # repeated indices all set the same bit: order does not matter
    return flags


# -- CSR from one sorted key array ----------------------------------------------------------


@dataclass(frozen=True)
class _Csr:
    indptr: np.ndarray
    indices: np.ndarray
    flag: np.ndarray | None
    rows: np.ndarray  # row of each entry (int64), for re-packing the reverse direction


_CHUNK = 1 << 23  # elements per slice of the vectorised passes below: bounds temporaries


def _chunked(n: int) -> Iterator[slice]:
    for start in range(0, n, _CHUNK):
        yield slice(start, min(start + _CHUNK, n))


def _csr(keys: np.ndarray, n_rows: int, row_shift: int, col_shift: int, flagged: bool) -> _Csr:
    """Cut indptr / indices / flag out of strictly ascending packed keys."""
    n = keys.size
    mask = (1 << (row_shift - col_shift)) - 1
    indices = np.empty(n, dtype=np.int32)
    flag = np.empty(n, dtype=bool) if flagged else None
    ascending = True
    for part in _chunked(n):
        chunk = keys[part]
        ascending &= bool(np.all(chunk[1:] > chunk[:-1]))
        if part.start:
            ascending &= bool(keys[part.start] > keys[part.start - 1])
        indices[part] = (chunk >> col_shift) & mask
        if flag is not None:
            np.bitwise_and(chunk, 1, out=flag[part], casting="unsafe")
    assert ascending, "keys must be strictly ascending"
    # the keys are spent once indices and flag are cut: reuse their buffer for the rows
    rows = np.right_shift(keys, row_shift, out=keys)
    counts = np.bincount(rows, minlength=n_rows)
    assert counts.size == n_rows, "a row index is out of range"
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    assert indptr[-1] == indices.size and (flag is None or flag.size == indices.size)
    return _Csr(indptr, indices, flag, rows)


def _keep_last_of_runs(keys: np.ndarray, ignore_low_bits: int) -> np.ndarray:
    """Drop all but the last of each run of keys equal above ``ignore_low_bits`` (sorted)."""
    if keys.size == 0:
        return keys
    last = np.empty(keys.size, dtype=bool)
    last[-1] = True
    # two keys differ above the low bits iff their XOR is at least 1 << ignore_low_bits
    for part in _chunked(keys.size - 1):
        nxt = keys[part.start + 1 : part.stop + 1]
        np.greater_equal(nxt ^ keys[part], 1 << ignore_low_bits, out=last[part])
    return keys if last.all() else keys[last]


# -- writing ------------------------------------------------------------------------------


class _ArrayWriter:
    """Writes each array as soon as it is final, so it can be freed, and records its info."""

    def __init__(self, lake: Lake, build_id: str) -> None:
        self.lake, self.build_id = lake, build_id
        self.arrays: dict[str, ArrayInfo] = {}

    def put(self, name: str, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array)
        self.lake.write_npy(layout.array_key(self.build_id, name), array)
        self.arrays[name] = ArrayInfo(
            dtype=array.dtype.str,
            length=int(array.shape[0]),
            sha256=array_sha256(array),
            nbytes=int(array.nbytes),
        )


def array_sha256(array: np.ndarray) -> str:
    """sha256 of the array's data bytes in C order (not of the .npy header)."""
    digest = hashlib.sha256()
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    step = 1 << 26
    for start in range(0, flat.size, step):  # chunks bound the memory an mmap pulls in at once
        digest.update(flat[start : start + step])
    return digest.hexdigest()


# -- citations ----------------------------------------------------------------------------


def _build_citations(
    lake: Lake, articles: _Articles, out: _ArrayWriter, batch_rows: int
) -> dict[str, int]:
    key = layout.CORPUS_INPUTS["citations"]
    where = lake.path(key)
    n = articles.pmids.size
    with _parquet(lake, key, ["citing_pmid", "cited_pmid"]) as pf:
        rows = pf.metadata.num_rows
    keys = np.empty(rows, dtype=np.int64)
    filled = dangling = 0
    for batch in _batches(lake, key, ["citing_pmid", "cited_pmid"], batch_rows):
        citing = _ints(batch, "citing_pmid", where)
        src = _to_index(articles.lut, citing)
        _require_in_corpus(src, citing, where, "citing_pmid")
        dst = _to_index(articles.lut, _ints(batch, "cited_pmid", where))
        inside = dst >= 0
        kept = int(inside.sum())
        dangling += dst.size - kept
        packed = keys[filled : filled + kept]
        np.left_shift(src[inside], 32, out=packed, dtype=np.int64)
        packed |= dst[inside]
        filled += kept
    keys = keys[:filled]
    keys.sort()
    keys = _keep_last_of_runs(keys, 0)
    edges = int(keys.size)

    fwd = _csr(keys, n, row_shift=32, col_shift=0, flagged=False)
    del keys
    out.put("cite_indptr", fwd.indptr)
    out.put("cite_indices", fwd.indices)
    # reverse: cited in the high half, citing below; sorting makes each cited_by list ascending
    rkey = np.left_shift(fwd.indices, 32, dtype=np.int64)
    rkey |= fwd.rows
    del fwd
    rkey.sort()
    rev = _csr(rkey, n, row_shift=32, col_shift=0, flagged=False)
    del rkey
    out.put("cited_by_indptr", rev.indptr)
    out.put("cited_by_indices", rev.indices)
    return {
        "citation_rows": rows,
        "citation_edges": edges,
        "dangling_citations": dangling,
        "duplicate_citations": filled - edges,
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


def _build_mesh(lake: Lake, articles: _Articles, out: _ArrayWriter, batch_rows: int) -> dict:
    key = layout.CORPUS_INPUTS["mesh_edges"]
    where = lake.path(key)
    n = articles.pmids.size
    known = _read_descriptor_uis(lake)
    # provisional descriptor ids: known UIs (sorted) first, unknown ones appended as seen
    lookup_uis: list[str] = known.tolist()
    columns = ["pmid", "descriptor_ui", "descriptor_major", "qualifier_major"]
    with _parquet(lake, key, columns) as pf:
        rows = pf.metadata.num_rows
    keys = np.empty(rows, dtype=np.int64)
    filled = 0
    for batch in _batches(lake, key, columns, batch_rows, dictionary=("descriptor_ui",)):
        pmids = _ints(batch, "pmid", where)
        art = _to_index(articles.lut, pmids)
        _require_in_corpus(art, pmids, where, "pmid")
        uis = batch.column("descriptor_ui")
        if uis.null_count:
            raise GraphInputError(f"{where}: column descriptor_ui has {uis.null_count} null(s)")
        if not pa.types.is_dictionary(uis.type):
            uis = pc.dictionary_encode(uis)
        codes = uis.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        values = pl.Series("ui", uis.dictionary.cast(pa.string()))
        mapped = values.replace_strict(
            lookup_uis, np.arange(len(lookup_uis)), default=-1, return_dtype=pl.Int64
        ).to_numpy()
        used = np.bincount(codes, minlength=values.len()) > 0
        new = (mapped < 0) & used
        if new.any():
            fresh = sorted(set(values.filter(pl.Series(new)).to_list()))
            bad = [ui for ui in fresh if not _DESCRIPTOR_UI.match(ui)]
            if bad:
                raise GraphInputError(f"{where}: descriptor_ui not a MeSH UI: {bad[:5]}")
            lookup_uis.extend(fresh)
            mapped = values.replace_strict(
                lookup_uis, np.arange(len(lookup_uis)), default=-1, return_dtype=pl.Int64
            ).to_numpy()
        major = _bools(batch, "descriptor_major") | _bools(batch, "qualifier_major")
        packed = keys[filled : filled + batch.num_rows]
        np.left_shift(mapped[codes], 33, out=packed)
        packed |= art.astype(np.int64) << 1
        packed |= major
        filled += batch.num_rows

    n_unknown = len(lookup_uis) - known.size
    all_uis = np.array(lookup_uis, dtype=object)
    if n_unknown:
        # re-number so descriptor ids follow the sorted UIs, known and unknown together
        order = np.argsort(all_uis, kind="stable")
        renumber = np.empty(order.size, dtype=np.int64)
        renumber[order] = np.arange(order.size)
        keys = (renumber[keys >> 33] << 33) | (keys & ((1 << 33) - 1))
        all_uis = all_uis[order]
    n_desc = all_uis.size

    keys.sort()
    # (descriptor, article) runs end with their major row if there is one: keep the last
    keys = _keep_last_of_runs(keys, 1)
    fwd = _csr(keys, n_desc, row_shift=33, col_shift=1, flagged=True)
    del keys
    out.put("mesh2art_indptr", fwd.indptr)
    out.put("mesh2art_indices", fwd.indices)
    out.put("mesh2art_major", fwd.flag)
    article_count = np.diff(fwd.indptr).astype(np.int32)
    major_count = np.bincount(fwd.rows[fwd.flag], minlength=n_desc).astype(np.int32)
    rkey = np.left_shift(fwd.indices, 32, dtype=np.int64)
    rkey |= np.left_shift(fwd.rows, 1, out=fwd.rows)
    rkey |= fwd.flag
    pairs, majors = int(fwd.indices.size), int(fwd.flag.sum())
    del fwd
    rkey.sort()
    rev = _csr(rkey, n, row_shift=32, col_shift=1, flagged=True)
    del rkey
    out.put("art2mesh_indptr", rev.indptr)
    out.put("art2mesh_indices", rev.indices)
    out.put("art2mesh_major", rev.flag)
    del rev

    width = max((len(u) for u in all_uis), default=1)
    out.put("mesh_uis", all_uis.astype(f"S{width}"))
    out.put("mesh_article_count", article_count)
    out.put("mesh_major_count", major_count)
    categories, min_depth = _descriptor_attributes(lake, all_uis)
    out.put("mesh_categories", categories)
    out.put("mesh_min_depth", min_depth)
    return {
        "n_descriptors": int(n_desc),
        "n_unknown_descriptors": int(n_unknown),
        "mesh_rows": rows,
        "mesh_pairs": pairs,
        "major_pairs": majors,
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
    lake: Lake, build_id: str | None = None, batch_rows: int = BATCH_ROWS
) -> GraphBuild:
    """Build every array under graph/<build-id>/ and write manifest.json last.

    Does not publish: the caller checks the build and then calls ``layout.publish``, so a
    build that fails its checks never replaces the graph readers open.
    """
    started = time.perf_counter()
    inputs = input_fingerprints(lake)
    build_id = build_id or compute_build_id(inputs)
    out = _ArrayWriter(lake, build_id)

    articles = _read_articles(lake)
    flags = _article_flags(lake, articles, batch_rows)
    out.put("pmids", articles.pmids.astype(np.int32))
    out.put("year", articles.year)
    out.put("flags", flags)
    citation = _build_citations(lake, articles, out, batch_rows)
    mesh = _build_mesh(lake, articles, out, batch_rows)

    rows = citation["citation_rows"]
    stats = GraphStats(
        n_articles=int(articles.pmids.size),
        citation_retention=(rows - citation["dangling_citations"]) / rows if rows else 0.0,
        quotable=int(np.count_nonzero(flags & layout.QUOTABLE)),
        retracted=int(np.count_nonzero(flags & layout.RETRACTED)),
        concern=int(np.count_nonzero(flags & layout.CONCERN)),
        array_bytes=sum(a.nbytes for a in out.arrays.values()),
        seconds=round(time.perf_counter() - started, 3),
        **citation,
        **mesh,
    )
    build = GraphBuild(build_id, inputs, dict(out.arrays), stats)
    manifest = {
        "build_id": build_id,
        "format": layout.GRAPH_FORMAT,
        "inputs": inputs,
        "stats": asdict(stats),
        "arrays": {name: asdict(info) for name, info in build.arrays.items()},
    }
    lake.write_bytes(layout.manifest_key(build_id), json.dumps(manifest, indent=1).encode())
    return build
