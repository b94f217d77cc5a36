"""The grounding index in load-ready form: one file that opens in milliseconds.

``Grounder`` over the surface table needs a dict of ~950k keys; building it from Parquet
made 730k tuples on every ``kg ask`` (seconds, ~500 MB). Here the same lookup is a set of
arrays in one file, memory-mapped on open, touched only where a question looks:

- ``hash``: the sorted 64-bit BLAKE2b hashes of every surface key (unique, checked on write);
- ``key_offsets``/``key_bytes``: each key's UTF-8 text in hash order, compared on a hit, so
  a question word that shares a hash with a surface is never taken for it;
- ``ui``/``kind``/``as_written``: the surface's descriptor (a row of ``uis``), its kind and
  whether it only matches as written; ``term_offsets``/``term_bytes``: the MeSH term shown;
- ``uis`` (sorted, fixed width), ``named`` and ``name_offsets``/``name_bytes``: descriptor
  names for display; ``role``/``reason``: each descriptor's role under the default
  ``RoleConfig`` without graph counts (``IndexedRoles`` adds the graph's share at ask time).

The file is ``MAGIC``, the header length, a JSON header (format, counts, each section's
dtype, shape, offset and size, the SHA-256 of the data) and the sections, each aligned to
64 bytes. It is written and published as one object (one rename or one S3 put), so a reader
sees the old file or the new one, never half of either. Opening checks the magic, the
header and the file's size against it (a truncated file is an error naming the object);
``verify`` hashes every byte (the asset's check, not every open).
"""

from __future__ import annotations

import hashlib
import json
import os
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from kg_platform.grounding.grounder import SurfaceEntry
from kg_platform.storage.grounding import INDEX_KEY
from kg_platform.storage.mapped import map_file

if TYPE_CHECKING:
    import polars as pl

    from kg_platform.graph.store import KGStore
    from kg_platform.grounding.roles import RoleConfig
    from kg_platform.storage.lake import Lake

MAGIC = b"KGGRIDX\x01"
FORMAT = 1
HASH = "blake2b-64"
ALIGN = 64
KINDS = ("name", "entry", "deinverted", "scr_alias", "derived")
# (role, reason) pairs assign_roles gives without graph counts, in code order
ROLE_REASONS = (
    ("IGNORE", "check_tag"),
    ("IGNORE", "age_group"),
    ("IGNORE", "broad_subtree"),
    ("IGNORE", "top_of_tree"),
    ("BRIDGE", "specific"),
    ("FILTER", "non_topical_category"),
    ("FILTER", "category"),
    ("FILTER", "shallow"),
)
# reasons decided before the graph's share in assign_roles: the share never overrides them
_BEFORE_SHARE = frozenset({"check_tag", "age_group", "broad_subtree", "top_of_tree"})
NOT_IN_TABLES = -1


class GroundingIndexError(ValueError):
    """The index object is unusable (corrupt, truncated, another format), named by path."""


def surface_hash(key: str) -> int:
    """The 64-bit hash the index sorts surfaces by (stable across processes, unlike hash())."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


class _Strings:
    """Strings as UTF-8 bytes with offsets: ``text(i)`` decodes one. Single reads go
    through memoryviews (a Python int per index, no numpy scalar)."""

    def __init__(self, offsets: np.ndarray, data: np.ndarray) -> None:
        self.offsets, self.data = offsets, data
        self._offsets, self._data = memoryview(offsets), memoryview(data)

    def raw(self, i: int) -> bytes:
        return bytes(self._data[self._offsets[i] : self._offsets[i + 1]])

    def text(self, i: int) -> str:
        return self.raw(i).decode()

    def all(self) -> list[str]:
        blob = self.data.tobytes().decode()
        if blob.isascii():
            offsets = self.offsets.tolist()
            return [blob[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
        raw = self.data.tobytes()
        bounds = self.offsets.tolist()
        return [raw[a:b].decode() for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def surface_hashes(keys: pl.Series) -> np.ndarray:
    """``surface_hash`` of every key of a column, in its order: one BLAKE2b per key over the
    column's UTF-8 bytes, the digests joined and read as little-endian uint64 (no Python int
    per key)."""
    import polars as pl

    blake2b = hashlib.blake2b
    encoded = keys.cast(pl.Binary).to_list()
    digests = b"".join([blake2b(k, digest_size=8).digest() for k in encoded])
    return np.frombuffer(digests, dtype="<u8").astype(np.uint64)


def _pack(strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    encoded = [s.encode() for s in strings]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return offsets, np.frombuffer(b"".join(encoded), dtype=np.uint8)


def _pack_column(column: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """``_pack`` of a string column (its UTF-8 bytes and offsets, as Arrow holds them)."""
    import polars as pl
    import pyarrow as pa

    array = column.cast(pl.Binary).to_arrow().cast(pa.large_binary())
    array = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
    _, offsets, data = array.buffers()
    starts = np.frombuffer(offsets, dtype=np.int64, count=len(array) + 1, offset=array.offset * 8)
    first, last = int(starts[0]), int(starts[-1])
    packed = (
        np.frombuffer(data, dtype=np.uint8, count=last - first, offset=first)
        if data is not None and last > first
        else np.zeros(0, dtype=np.uint8)
    )
    return starts - first, packed.copy()


def _strings_column(strings: _Strings) -> pl.Series:
    """The index's strings as a binary column (its own bytes, not decoded one by one)."""
    import polars as pl
    import pyarrow as pa

    n = len(strings.offsets) - 1
    array = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(strings.offsets), pa.py_buffer(strings.data)]
    )
    array.validate(full=True)  # offsets within the bytes, else an error, never a bad read
    return pl.Series(array)


def index_sections(
    surfaces: pl.DataFrame,
    descriptors: pl.DataFrame,
    tree: pl.DataFrame,
    hashes: np.ndarray | None = None,
) -> tuple[dict[str, np.ndarray], dict]:
    """The index's arrays and header fields from the surface table (``build_surface_table``),
    mesh/descriptors and mesh/tree; ``hashes``: ``surface_hashes`` of its keys, when the
    caller has them. Raises ValueError on a hash clash (two keys, one hash). Whole columns
    at a time: ~800k surfaces, and the asset runs it on every build."""
    import polars as pl

    from kg_platform.grounding.roles import assign_roles

    key_column = surfaces["key"]
    if hashes is None:
        hashes = surface_hashes(key_column)
    order = np.argsort(hashes, kind="stable")
    hashes = hashes[order]
    clash = np.flatnonzero(hashes[1:] == hashes[:-1])
    if clash.size:
        a, b = key_column[int(order[clash[0]])], key_column[int(order[clash[0] + 1])]
        raise ValueError(f"grounding index: surfaces {a!r} and {b!r} share a {HASH} hash")
    names = dict(zip(descriptors["ui"].to_list(), descriptors["name"].to_list(), strict=True))
    uis = sorted(set(surfaces["ui"].unique().to_list()) | set(names))
    width = max((len(u) for u in uis), default=1)
    surface_ui = (
        surfaces["ui"].replace_strict(uis, range(len(uis)), return_dtype=pl.Int32).to_numpy()[order]
    )
    unknown = set(surfaces["kind"].unique().to_list()) - set(KINDS)
    if unknown:
        raise ValueError(f"grounding index: unknown surface kinds {sorted(unknown)}")
    kinds = (
        surfaces["kind"]
        .replace_strict(KINDS, range(len(KINDS)), return_dtype=pl.Int8)
        .to_numpy()[order]
    )
    as_written = (
        surfaces["as_written"].fill_null(False).to_numpy().astype(bool)
        if "as_written" in surfaces.columns
        else np.zeros(surfaces.height, dtype=bool)
    )[order]
    roles = assign_roles(descriptors, tree)
    code = {pair: i for i, pair in enumerate(ROLE_REASONS)}
    role_of = {
        u: code[(r, why)]
        for u, r, why in zip(
            roles["ui"].to_list(), roles["role"].to_list(), roles["reason"].to_list(), strict=True
        )
    }
    key_offsets, key_bytes = _pack_column(key_column.gather(order))
    term_offsets, term_bytes = _pack_column(surfaces["term"].gather(order))
    name_offsets, name_bytes = _pack([names.get(u, "") for u in uis])
    sections = {
        "hash": hashes,
        "key_offsets": key_offsets,
        "key_bytes": key_bytes,
        "ui": surface_ui,
        "kind": kinds,
        "as_written": as_written,
        "term_offsets": term_offsets,
        "term_bytes": term_bytes,
        "uis": np.array(uis, dtype=f"S{width}"),
        "named": np.array([u in names for u in uis], dtype=bool),
        "name_offsets": name_offsets,
        "name_bytes": name_bytes,
        "role": np.array([role_of.get(u, NOT_IN_TABLES) for u in uis], dtype=np.int8),
    }
    spaces = key_column.str.count_matches(" ", literal=True).max()
    longest = 1 if spaces is None else int(spaces) + 1  # type: ignore[arg-type]
    fields = {"surfaces": len(key_column), "descriptors": len(uis), "longest_key_words": longest}
    return sections, fields


def write_index(lake: Lake, key: str, sections: dict[str, np.ndarray], fields: dict) -> int:
    """Write the sections as one object at ``key`` (atomic); returns its size in bytes."""
    layout: dict[str, dict] = {}
    at = 0
    for name, array in sections.items():
        array = np.ascontiguousarray(array)
        sections[name] = array
        at = -(-at // ALIGN) * ALIGN
        layout[name] = {
            "dtype": array.dtype.str,
            "shape": list(array.shape),
            "offset": at,
            "nbytes": int(array.nbytes),
        }
        at += array.nbytes
    data_bytes = at
    digest = hashlib.sha256()
    for name, array in sections.items():
        digest.update(name.encode() + b"\0" + array.tobytes())
    header = {
        "format": FORMAT,
        "hash": HASH,
        "kinds": list(KINDS),
        "role_reasons": [list(p) for p in ROLE_REASONS],
        **fields,
        "sections": layout,
        "data_bytes": data_bytes,
        "sha256": digest.hexdigest(),
    }
    text = json.dumps(header, sort_keys=True).encode()
    start = -(-(len(MAGIC) + 8 + len(text)) // ALIGN) * ALIGN
    with lake.writer(key) as f:
        f.write(MAGIC + len(text).to_bytes(8, "little") + text)
        f.write(b"\0" * (start - len(MAGIC) - 8 - len(text)))
        written = 0
        for name, array in sections.items():
            offset = layout[name]["offset"]
            f.write(b"\0" * (offset - written))
            f.write(array.tobytes())
            written = offset + array.nbytes
    return start + data_bytes


def read_header(f, size: int, where: str) -> tuple[dict, int, int]:
    """(header, where the data starts, data bytes) of the index file ``f`` of ``size`` bytes,
    checked against its size (``where`` names it in errors)."""
    head = f.read(len(MAGIC) + 8)
    if len(head) < len(MAGIC) + 8 or head[: len(MAGIC)] != MAGIC:
        raise GroundingIndexError(f"{where}: not a grounding index (bad magic); rematerialise")
    length = int.from_bytes(head[len(MAGIC) :], "little")
    if length > size:
        raise GroundingIndexError(f"{where}: truncated ({size} bytes, header of {length})")
    try:
        header = json.loads(f.read(length))
        header["sections"].items()  # noqa: B018 (a mapping, or the error below)
        data_bytes = int(header["data_bytes"])
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise GroundingIndexError(f"{where}: unreadable header ({error}); rematerialise") from None
    if header.get("format") != FORMAT or header.get("hash") != HASH:
        raise GroundingIndexError(
            f"{where}: format {header.get('format')}/{header.get('hash')}, this code "
            f"reads {FORMAT}/{HASH}; rematerialise `grounding_index`"
        )
    start = -(-(len(MAGIC) + 8 + length) // ALIGN) * ALIGN
    if size != start + data_bytes:
        raise GroundingIndexError(
            f"{where}: {size} bytes, the header says {start + data_bytes} "
            "(truncated or appended to); rematerialise `grounding_index`"
        )
    return header, start, data_bytes


def index_file_problem(lake: Lake, key: str = INDEX_KEY) -> str | None:
    """Why the published index file does not match its own header (magic, header, size),
    read through the lake without copying the file; None when it matches. Cheap: the
    header's bytes and the object's size."""
    where = lake.path(key)
    try:
        size = lake.size(key)
        with lake.open(key) as f:
            read_header(f, size, where)
    except GroundingIndexError as exc:
        return str(exc)
    except FileNotFoundError:
        return f"{where}: missing"
    return None


class _FixedWidth(Sequence[bytes]):
    """A sorted fixed-width bytes array read one item at a time (NUL padding stripped), so
    ``bisect`` can search it."""

    def __init__(self, array: np.ndarray) -> None:
        self._width = array.dtype.itemsize
        self._view = memoryview(array.view(np.uint8).reshape(-1))
        self._n = int(array.size)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):  # type: ignore[override]
        if not 0 <= i < self._n:
            raise IndexError(i)
        at = i * self._width
        return bytes(self._view[at : at + self._width]).rstrip(b"\0")


class SurfaceIndex:
    """The load-ready grounding index: ``get(key)`` answers as the table grounder's dict
    does (``SurfaceEntry`` or None); ``names`` maps descriptor UI to name."""

    def __init__(self, where: str, header: dict, arrays: dict[str, np.ndarray]) -> None:
        self.where = where
        self.header = header
        self._hash = arrays["hash"]
        self._keys = _Strings(arrays["key_offsets"], arrays["key_bytes"])
        self._terms = _Strings(arrays["term_offsets"], arrays["term_bytes"])
        self._ui = arrays["ui"]
        self._kind = arrays["kind"]
        self._as_written = arrays["as_written"]
        self._uis = arrays["uis"]
        self._named = arrays["named"]
        self._names = _Strings(arrays["name_offsets"], arrays["name_bytes"])
        self._role = arrays["role"]
        self._arrays = arrays
        # per-question reads: memoryviews and bisect touch a few pages and make no numpy
        # scalars (np.searchsorted is ~10x slower per single key)
        self._hash_view = memoryview(self._hash)
        self._ui_view = memoryview(self._ui)
        self._kind_view = memoryview(self._kind)
        self._as_written_view = memoryview(self._as_written)
        self._ui_table = _FixedWidth(self._uis)
        self.kinds = tuple(header["kinds"])
        self.role_reasons = tuple(tuple(p) for p in header["role_reasons"])
        self.longest_key_words = int(header["longest_key_words"])
        self.names = DescriptorNames(self)

    @classmethod
    def open(cls, lake: Lake, key: str = INDEX_KEY) -> SurfaceIndex:
        if not lake.exists(key):
            raise FileNotFoundError(
                f"{lake.path(key)}: no grounding index; materialise `grounding_index`"
            )
        return cls.open_file(lake.local_path(key), lake.path(key))

    @classmethod
    def open_file(cls, path: str, where: str | None = None) -> SurfaceIndex:
        """Map the file at ``path`` (``where`` names it in errors: the lake path)."""
        where = where or path
        with open(path, "rb") as f:
            header, start, data_bytes = read_header(f, os.fstat(f.fileno()).st_size, where)
            sections = header["sections"]
            # memory-mapped; `kg serve` reads a small index into memory instead and records
            # the file while the index lives (storage.mapped)
            data, record = map_file(f, path)
            arrays = {}
            for name, s in sections.items():
                dtype = np.dtype(s["dtype"])
                count = int(np.prod(s["shape"], dtype=np.int64))
                if count * dtype.itemsize != s["nbytes"] or s["offset"] + s["nbytes"] > data_bytes:
                    raise GroundingIndexError(f"{where}: section {name} does not fit its header")
                arrays[name] = np.frombuffer(
                    data, dtype=dtype, count=count, offset=start + s["offset"]
                ).reshape(s["shape"])
            missing = {"hash", "key_offsets", "key_bytes", "ui", "kind", "uis", "role"} - set(
                arrays
            )
            if missing:
                raise GroundingIndexError(f"{where}: sections {sorted(missing)} missing")
            index = cls(where, header, arrays)
            record(index)
        return index

    def verify(self) -> None:
        """Hash every section against the header's SHA-256 (reads the whole file)."""
        digest = hashlib.sha256()
        sections = self.header["sections"]
        for name in sorted(sections, key=lambda n: sections[n]["offset"]):
            digest.update(name.encode() + b"\0" + self._arrays[name].tobytes())
        if digest.hexdigest() != self.header["sha256"]:
            raise GroundingIndexError(f"{self.where}: content does not match its SHA-256 (corrupt)")

    def __len__(self) -> int:
        return int(self._hash.size)

    def position(self, key: str) -> int:
        """The row of ``key``, or -1 when it is no surface."""
        raw = key.encode()
        h = int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little")
        hashes = self._hash_view
        i = bisect_left(hashes, h)
        if i < len(hashes) and hashes[i] == h and self._keys.raw(i) == raw:
            return i
        return -1

    def entry(self, i: int) -> SurfaceEntry:
        return SurfaceEntry(
            self._ui_table[self._ui_view[i]].decode(),
            self._terms.text(i),
            self.kinds[self._kind_view[i]],
            bool(self._as_written_view[i]),
        )

    def get(self, key: str, default: SurfaceEntry | None = None) -> SurfaceEntry | None:
        i = self.position(key)
        return default if i < 0 else self.entry(i)

    def items(self) -> Iterator[tuple[str, SurfaceEntry]]:
        """Every (key, entry), in hash order: the round-trip check reads them all."""
        uis = [u.decode() for u in self._uis.tolist()]
        terms = self._terms.all()
        kinds = [self.kinds[k] for k in self._kind.tolist()]
        for i, key in enumerate(self._keys.all()):
            yield key, SurfaceEntry(uis[self._ui[i]], terms[i], kinds[i], bool(self._as_written[i]))

    def ui_row(self, ui: str) -> int:
        """The row of ``ui`` in the descriptor table, or -1."""
        raw = ui.encode()
        table = self._ui_table
        i = bisect_left(table, raw)
        return i if i < len(table) and table[i] == raw else -1

    def base_role(self, ui: str) -> tuple[str, str] | None:
        """(role, reason) under the default RoleConfig without graph counts; None when the
        descriptor is not in mesh/descriptors."""
        i = self.ui_row(ui)
        code = int(self._role[i]) if i >= 0 else NOT_IN_TABLES
        if code == NOT_IN_TABLES:
            return None
        role, reason = self.role_reasons[code]
        return role, reason

    def names_dict(self) -> dict[str, str]:
        """``dict(self.names.items())``, read column-wise (the descriptor UIs are sorted and
        unique as written; an index where they are not is read one name at a time)."""
        uis = self._uis
        if not bool(np.all(uis[1:] > uis[:-1])):
            return dict(self.names.items())
        named = np.flatnonzero(self._named).tolist()
        texts = self._names.all()
        decoded = [u.decode() for u in uis.tolist()]
        return {decoded[i]: texts[i] for i in named}

    def descriptor_uis(self) -> list[str]:
        return [u.decode() for u in self._uis[self._role != NOT_IN_TABLES].tolist()]


class DescriptorNames(Mapping[str, str]):
    """Descriptor UI -> name over the index, read per lookup (the grounder's ``names``)."""

    def __init__(self, index: SurfaceIndex) -> None:
        self._index = index

    def __getitem__(self, ui: str) -> str:
        i = self._index.ui_row(ui)
        if i < 0 or not self._index._named[i]:
            raise KeyError(ui)
        return self._index._names.text(i)

    def __iter__(self) -> Iterator[str]:
        named = self._index._named
        return (u.decode() for u in self._index._uis[named].tolist())

    def __len__(self) -> int:
        return int(self._index._named.sum())


class IndexedRoles(Mapping[str, tuple[str, str]]):
    """Descriptor UI -> (role, reason), exactly as ``assign_roles(descriptors, tree,
    RoleConfig(), graph counts, n_articles)`` gives it, read per descriptor from the index
    and the graph store: the share of articles applies where ``assign_roles`` applies it."""

    def __init__(self, index: SurfaceIndex, store: KGStore, config: RoleConfig) -> None:
        self._index = index
        self._store = store
        self._config = config
        self._use_share = store.n_articles >= config.min_articles_for_share

    def __getitem__(self, ui: str) -> tuple[str, str]:
        found = self._index.base_role(ui)
        if found is None:
            raise KeyError(ui)
        if self._use_share and found[1] not in _BEFORE_SHARE:
            try:
                count = int(self._store.array("mesh_article_count")[self._store.desc_idx(ui)])
            except KeyError:
                count = 0
            if count / self._store.n_articles > self._config.max_article_share:
                return ("IGNORE", "too_common")
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._index.descriptor_uis())

    def __len__(self) -> int:
        return int((self._index._role != NOT_IN_TABLES).sum())


def round_trip_mismatches(
    index: SurfaceIndex, surfaces: pl.DataFrame, hashes: np.ndarray | None = None
) -> list[str]:
    """Every surface of the table found in the index as a question finds it (its hash,
    the first row of that hash, the key text at that row) with the same descriptor, term,
    kind and as-written flag, and every index row reached by one surface: the mismatches,
    described (empty: the index holds exactly the table). ``hashes``: ``surface_hashes`` of
    the table's keys, when the caller has them. Whole columns at once: the same lookup as
    ``position`` (``np.searchsorted`` is ``bisect_left``), the index's strings compared as
    bytes column against column, no Python object per surface."""
    import polars as pl

    key_column = surfaces["key"]
    n, stored = surfaces.height, index._hash
    problems = []
    if len(stored) != n:
        problems.append(f"{len(stored)} surfaces in the index, {n} in the table")
    if n == 0 or len(stored) == 0:
        problems += [f"{k!r}: index None" for k in key_column.head(20 - len(problems)).to_list()]
        return problems
    if hashes is None:
        hashes = surface_hashes(key_column)
    rows = np.minimum(np.searchsorted(stored, hashes, side="left"), len(stored) - 1)
    at = pl.Series(rows, dtype=pl.Int64)
    written = (
        surfaces["as_written"].fill_null(False).to_numpy().astype(bool)
        if "as_written" in surfaces.columns
        else np.zeros(n, dtype=bool)
    )
    uis = pl.Series([u.decode() for u in index._uis.tolist()], dtype=pl.Utf8)
    kinds = pl.Series(list(index.kinds), dtype=pl.Utf8)
    same_key = _strings_column(index._keys).gather(at) == key_column.cast(pl.Binary)
    same_term = _strings_column(index._terms).gather(at) == surfaces["term"].cast(pl.Binary)
    same_ui = uis.gather(pl.Series(index._ui[rows], dtype=pl.Int64)) == surfaces["ui"]
    same_kind = kinds.gather(pl.Series(index._kind[rows], dtype=pl.Int64)) == surfaces["kind"]
    found = (stored[rows] == hashes) & same_key.fill_null(False).to_numpy()
    same = (
        found
        & same_ui.fill_null(False).to_numpy()
        & same_term.fill_null(False).to_numpy()
        & same_kind.fill_null(False).to_numpy()
        & (index._as_written[rows] == written)
    )
    for i in np.flatnonzero(~same)[: 20 - len(problems)].tolist():
        row = int(rows[i])
        got = index.entry(row) if found[i] else None
        entry = SurfaceEntry(
            surfaces["ui"][i], surfaces["term"][i], surfaces["kind"][i], bool(written[i])
        )
        problems.append(f"{key_column[i]!r}: index {got}, table {entry}")
    if len(problems) >= 20:
        return problems
    reached = np.zeros(len(stored), dtype=bool)
    reached[rows[found]] = True  # a row found by a key: its fields were compared above
    for row in np.flatnonzero(~reached)[: 20 - len(problems)].tolist():
        problems.append(f"{index._keys.text(row)!r}: only in the index as {index.entry(row)}")
    return problems
