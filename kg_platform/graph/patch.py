"""An update's graph build patched from the build published before it and the fold's change.

A daily update touches ~30,000 PMIDs of millions; the full build (``build.build_graph``)
reads, maps and sorts every corpus row again. When the last fold was incremental from
exactly the corpus the published build read (``fold_base``: the rule the update's recount
uses too), the new arrays are the previous ones with the change applied:

- node order: the previous PMIDs less the touched ones, merged with the touched PMIDs the
  new corpus holds (``corpus/fold/added_articles``); every other node keeps its year, flags
  and title, at its new index (a removed PMID shifts the ones after it);
- each edge direction: row by row, the previous row (none for a touched article) with its
  columns re-numbered (dropped where the node went, or where a touched article's old edges
  were), merged with the new entries of that row (one compiled pass, ``csr.patch_rows``).
  The new entries are the touched articles' rows now (``added_citations``,
  ``added_mesh_edges``) and the rows of untouched articles citing an article that came,
  which were dangling before: the one O(rows) read left, of the two PMID columns of
  ``citations`` (no sort, no key buffer);
- the figures (edges, dangling and duplicate citations, pairs, majors) as the previous
  build's plus the change, the row counts checked against the corpus files' metadata.

The result is the full build's, array for array (kg_platform_tests/graph/test_patch.py); the
graph's two checks judge it as they judge a full build (the recount from the corpus through
DuckDB, a different road). Whatever the patch cannot do exactly (a previous array that no
longer hashes as its manifest says, a descriptor new to the graph, row counts that do not
add up) makes the full build run instead, and the asset's metadata says why.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kg_platform.graph import layout
from kg_platform.graph.arrays import (
    FLAG_MARKS,
    ArrayWriter,
    Clock,
    GraphInputError,
    input_files,
    ints,
    marked_pmids,
    num_rows,
    part_batches,
    read_descriptor_uis,
    title_pieces,
    true_mask,
    years,
)
from kg_platform.graph.build import (
    BATCH_ROWS,
    GraphBuild,
    build_graph,
    compute_build_id,
    finish_build,
    input_fingerprints,
)
from kg_platform.graph.change import changed_array, fold_base, fold_table, touched_pmids
from kg_platform.graph.store import KGStore, in_sorted, sorted_unique
from kg_platform.pubmed.fold.manifest import (
    ADDED_TABLES,
    FOLD_TOUCHED,
    REPLACED_TABLES,
    added_key,
    replaced_key,
)
from kg_platform.settings import usable_cores as workers
from kg_platform.storage.lake import Lake


class NotPatchable(Exception):
    """The patch cannot give the full build's arrays exactly; the message says why."""


# the fold files a patch reads
PATCH_FILES = (
    FOLD_TOUCHED,
    *(replaced_key(t) for t in REPLACED_TABLES),
    *(added_key(t) for t in ADDED_TABLES),
)


def build_update(
    lake: Lake, published: str | None, provenance: dict[str, object] | None = None
) -> tuple[GraphBuild, str]:
    """The graph build of the lake's corpus: patched from the published build ``published``
    when the last fold's change applies to it, else built in full. And how it was made
    ("patched from ..." or "full: <why the patch did not apply>")."""
    inputs = input_fingerprints(lake)
    build_id = compute_build_id(inputs)
    previous, why = fold_base(lake, published, build_id, inputs, PATCH_FILES)
    if previous is not None:
        try:
            build = patch_graph(lake, previous, inputs, build_id, provenance)
        except NotPatchable as exc:
            why = str(exc)
        else:
            return build, f"patched from graph build {previous.build_id}"
    return build_graph(lake, build_id=build_id, provenance=provenance), f"full: {why}"


# -- the nodes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Nodes:
    """Where each node of the new build comes from, and where each previous node goes."""

    pmids: np.ndarray  # int64, ascending: the new node list
    added: np.ndarray  # new index of each added article (the fold's added rows, in order)
    kept: np.ndarray  # new index of each untouched previous node, ascending
    kept_old: np.ndarray  # its previous index
    came: np.ndarray  # PMIDs new to the node list, ascending
    went: np.ndarray  # previous PMIDs no longer nodes, ascending
    moved: np.ndarray  # previous index -> new index of every PMID still a node, else -1
    untouched: np.ndarray  # previous index -> new index of untouched PMIDs, else -1
    row_src: np.ndarray  # new index -> previous index of an untouched node, else -1
    same_node: np.ndarray  # new index -> previous index of every PMID that was a node

    @property
    def n(self) -> int:
        return int(self.pmids.size)

    def index(self, pmids: np.ndarray, where: str, column: str) -> np.ndarray:
        """New index of each PMID, which must be a node."""
        at = np.searchsorted(self.pmids, pmids).clip(max=max(self.n - 1, 0))
        if pmids.size and (self.n == 0 or np.any(self.pmids[at] != pmids)):
            bad = pmids[self.pmids[at] != pmids][:5].tolist() if self.n else pmids[:5].tolist()
            raise NotPatchable(f"{where}: {column} not a node of the new build (e.g. {bad})")
        return at.astype(np.int64)


def _nodes(old_pmids: np.ndarray, touched: np.ndarray, added: np.ndarray) -> _Nodes:
    n_old = old_pmids.size
    keep = ~in_sorted(old_pmids, touched)
    kept_old = np.flatnonzero(keep)
    kept_pmids = old_pmids[keep]
    # each kept node moves up by the added PMIDs before it; each added one lands after the
    # kept ones below it
    kept = np.arange(kept_old.size) + np.searchsorted(added, kept_pmids)
    added_at = np.searchsorted(kept_pmids, added) + np.arange(added.size)
    pmids = np.empty(kept.size + added.size, dtype=np.int64)
    pmids[kept] = kept_pmids
    pmids[added_at] = added
    untouched = np.full(n_old, -1, dtype=np.int64)
    untouched[kept_old] = kept
    revised = in_sorted(added, old_pmids)
    revised_old = np.searchsorted(old_pmids, added[revised])
    moved = untouched.copy()
    moved[revised_old] = added_at[revised]
    row_src = np.full(pmids.size, -1, dtype=np.int64)
    row_src[kept] = kept_old
    same_node = row_src.copy()
    same_node[added_at[revised]] = revised_old
    return _Nodes(
        pmids=pmids,
        added=added_at,
        kept=kept,
        kept_old=kept_old,
        came=added[~revised],
        went=old_pmids[~keep][~in_sorted(old_pmids[~keep], added)],
        moved=moved,
        untouched=untouched,
        row_src=row_src,
        same_node=same_node,
    )


# -- one edge direction -----------------------------------------------------------------------


def _patched_direction(
    prev: KGStore,
    kind: layout.EdgeKind,
    row_src: np.ndarray,
    col_map: np.ndarray,
    extra: np.ndarray,
    n_cols: int,
) -> tuple[layout.Csr, np.ndarray]:
    """One direction of ``kind`` from the previous build's, its rows taken through
    ``row_src``, its columns through ``col_map``, merged with ``extra`` (sorted keys); its
    flagged entries per row (empty when the kind has no flag)."""
    from kg_platform.graph import csr  # numba loads only when a graph is built

    names = kind.arrays
    old_indptr, old_indices = prev.array(names[0]), prev.array(names[1])
    old_flag = prev.array(names[2]) if kind.flagged else np.zeros(0, dtype=bool)
    n_rows = row_src.size
    capacity = old_indices.size + extra.size
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    indices = np.empty(capacity, dtype=np.int32)
    flag = np.empty(capacity if kind.flagged else 0, dtype=bool)
    counts = np.zeros(n_rows if kind.flagged else 0, dtype=np.int64)
    starts, moves, block_run = csr.segments(col_map)
    kept = csr.patch_rows(
        old_indptr, old_indices, old_flag, row_src, starts, moves, block_run, extra,
        1 if kind.flagged else 0, indptr, indices, flag, counts,
    )  # fmt: skip
    if kept < 0:
        row = -kept - 1
        raise NotPatchable(
            f"{kind.name}: the previous build's row and the update disagree at row {row} "
            "(a column from both, or out of order)"
        )
    flags = flag[:kept] if kind.flagged else None
    return layout.Csr(kind, indptr, indices[:kept], n_rows, n_cols, flags), counts


def _patched_pair(
    prev: KGStore,
    names: tuple[str, str, str],
    forward_maps: tuple[np.ndarray, np.ndarray, int],
    backward_maps: tuple[np.ndarray, np.ndarray, int],
    extra: np.ndarray,
    flag_bits: int,
) -> tuple[layout.Csr, layout.Csr, np.ndarray]:
    """Both directions of an edge kind (``names``: forward kind, backward kind, what an edge
    is called), each from ``_patched_direction`` with its (row source, column map, column
    count), ``extra`` its keys turned for the backward one; raises ``NotPatchable`` when the
    two hold different counts. The backward direction's flagged entries per row come last."""
    from kg_platform.graph import csr  # numba loads only when a graph is built

    forward_kind, backward_kind, unit = names
    # the two directions at once: the compiled passes release the GIL
    with ThreadPoolExecutor(1) as other:
        rows, columns, n_cols = forward_maps
        forward_job = other.submit(
            _patched_direction, prev, layout.EDGE_KINDS[forward_kind], rows, columns, extra, n_cols
        )
        rows, columns, n_cols = backward_maps
        turned = csr.reversed_keys(extra, flag_bits)
        backward, flagged = _patched_direction(
            prev, layout.EDGE_KINDS[backward_kind], rows, columns, turned, n_cols
        )
        forward, _ = forward_job.result()
    if forward.indices.size != backward.indices.size:
        raise NotPatchable(
            f"{forward_kind} holds {forward.indices.size} {unit}, "
            f"{backward_kind} {backward.indices.size}"
        )
    return forward, backward, flagged


# -- the patch --------------------------------------------------------------------------------


def _rows_of(lake: Lake, table: str, before: int, replaced: int, added: pa.Table) -> int:
    """The rows of a corpus table, from its files' footers: the previous build's less the
    replaced plus the added, else NotPatchable."""
    rows = num_rows(lake, layout.CORPUS_INPUTS[table], [])
    expected = int(before) - replaced + added.num_rows
    if rows != expected:
        raise NotPatchable(
            f"{lake.path(layout.CORPUS_INPUTS[table])} holds {rows} rows, the previous "
            f"build's less the replaced plus the added {expected}"
        )
    return rows


def patch_graph(
    lake: Lake,
    prev: KGStore,
    inputs: dict[str, dict[str, str | int]],
    build_id: str,
    provenance: dict[str, object] | None = None,
    batch_rows: int = BATCH_ROWS,
) -> GraphBuild:
    """The build ``build_id`` of the lake's corpus from the previous build ``prev`` and the
    last fold's change (see the module's text); NotPatchable when it cannot be exact."""
    started = time.perf_counter()
    clock = Clock()
    mesh_clock = Clock()
    with (
        ThreadPoolExecutor(1) as hasher,
        ThreadPoolExecutor(1) as mesh_worker,
        ArrayWriter(lake, build_id) as out,
    ):
        # the previous arrays must be the ones its checks passed: hashed beside the patch
        verified = hasher.submit(changed_array, prev, layout.ALL_ARRAYS)
        touched = touched_pmids(lake)
        added = {t: fold_table(lake, added_key(t)) for t in ADDED_TABLES}
        replaced = fold_table(lake, replaced_key("citations"))
        where = lake.path(added_key("articles"))
        arts = added["articles"]
        added_pmids = ints(arts, "pmid", where) if arts.num_rows else np.zeros(0, np.int64)
        if added_pmids.size and np.any(added_pmids[1:] <= added_pmids[:-1]):
            raise NotPatchable(f"{where}: pmid is not strictly ascending")
        if not in_sorted(added_pmids, touched).all():
            raise NotPatchable(f"{where}: articles the fold did not touch")
        old_pmids = np.asarray(prev.array("pmids"), dtype=np.int64)
        nodes = _nodes(old_pmids, touched, added_pmids)
        if nodes.n == 0:
            raise NotPatchable("the update leaves no article")
        clock.lap("patch: nodes")

        flags = _put_articles(lake, prev, nodes, added, out)
        clock.lap("patch: articles")
        # the MeSH directions on a second thread, as the full build does (the passes release
        # the GIL)
        mesh_job = mesh_worker.submit(
            _patch_mesh, lake, prev, nodes, added["mesh_edges"], out, mesh_clock
        )
        citation = _patch_citations(lake, prev, nodes, touched, added, replaced, out, batch_rows)
        clock.lap("patch: citations")
        mesh = mesh_job.result()
        clock.lap("patch: waiting for mesh")
        arrays = out.finish()
        clock.lap("patch: waiting for the writer")
        bad = verified.result()
        if bad is not None:
            raise NotPatchable(f"graph build {prev.build_id}: {bad} differs from its manifest")
        clock.lap("patch: waiting for the previous build's hashes")

    return finish_build(
        lake,
        build_id,
        inputs,
        provenance,
        nodes.n,
        flags,
        arrays,
        citation,
        mesh,
        started,
        (clock, mesh_clock),
    )


# -- per article ------------------------------------------------------------------------------


def _added_flags(lake: Lake, nodes: _Nodes, added: dict[str, pa.Table]) -> np.ndarray:
    """The flags of the added articles (as ``build._article_flags`` makes them)."""
    arts = added["articles"]
    where = lake.path(added_key("articles"))
    quotable = true_mask(arts, "has_abstract", where) if arts.num_rows else np.zeros(0, bool)
    flags = np.where(quotable, layout.QUOTABLE, 0).astype(np.uint8)
    added_pmids = nodes.pmids[nodes.added]
    for table, column, value, bit in FLAG_MARKS:
        rows = added[table]
        if not rows.num_rows:
            continue
        pmids = marked_pmids(rows, column, value, lake.path(added_key(table)))
        at = np.searchsorted(added_pmids, pmids).clip(max=max(added_pmids.size - 1, 0))
        if pmids.size and np.any(added_pmids[at] != pmids):
            raise NotPatchable(f"{lake.path(added_key(table))}: rows of no added article")
        flags[at] |= bit
    return flags


def _put_articles(
    lake: Lake, prev: KGStore, nodes: _Nodes, added: dict[str, pa.Table], out: ArrayWriter
) -> np.ndarray:
    """pmids, year, flags and the title store: the untouched nodes' from the previous build,
    the added articles' from the fold's rows. Returns the flags."""
    arts = added["articles"]
    where = lake.path(added_key("articles"))
    n = nodes.n
    out.put("pmids", nodes.pmids.astype(np.int32))
    year = np.empty(n, dtype=np.int16)
    year[nodes.kept] = prev.array("year")[nodes.kept_old]
    year[nodes.added] = years(arts, where) if arts.num_rows else np.zeros(0, np.int16)
    out.put("year", year)
    flags = np.empty(n, dtype=np.uint8)
    flags[nodes.kept] = prev.array("flags")[nodes.kept_old]
    flags[nodes.added] = _added_flags(lake, nodes, added)
    out.put("flags", flags)

    old_offsets = prev.array("title_offsets")
    old_bytes = prev.array("title_bytes")
    if "title" in arts.column_names and arts.num_rows:
        lengths, null, data = title_pieces(arts.column("title"), where)
    elif arts.num_rows and not bool(np.all(prev.array("title_null"))):
        raise NotPatchable(f"{where}: no title column, but the previous build has titles")
    else:
        lengths = np.zeros(arts.num_rows, dtype=np.int64)
        null = np.ones(arts.num_rows, dtype=bool)
        data = np.zeros(0, dtype=np.uint8)
    new_lengths = np.empty(n, dtype=np.int64)
    new_lengths[nodes.kept] = np.diff(old_offsets)[nodes.kept_old]
    new_lengths[nodes.added] = lengths
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(new_lengths, out=offsets[1:])
    title_null = np.empty(n, dtype=bool)
    title_null[nodes.kept] = prev.array("title_null")[nodes.kept_old]
    title_null[nodes.added] = null
    out.put("title_offsets", offsets)
    out.put("title_null", title_null)
    added_starts = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=added_starts[1:])

    # the bytes in new node order: runs of consecutive previous nodes, each added title
    src = nodes.row_src
    breaks = np.flatnonzero((src[1:] != src[:-1] + 1) | (src[1:] < 0) | (src[:-1] < 0)) + 1
    starts = np.concatenate([[0], breaks]).astype(np.int64)
    stops = np.concatenate([breaks, [n]]).astype(np.int64)

    def pieces():
        k = 0  # the next added article
        for start, stop in zip(starts.tolist(), stops.tolist(), strict=True):
            first = int(src[start])
            if first >= 0:
                last = int(src[stop - 1])
                yield old_bytes[int(old_offsets[first]) : int(old_offsets[last + 1])]
            else:
                yield data[int(added_starts[k]) : int(added_starts[k + 1])]
                k += 1

    out.put_stream("title_bytes", np.dtype(np.uint8), int(offsets[-1]), pieces)
    return flags


# -- citations --------------------------------------------------------------------------------


def _changed_rows(
    lake: Lake, nodes: _Nodes, touched: np.ndarray, batch_rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """(citing, cited) of every corpus citation row of an untouched article citing a PMID
    that came or went: one read of the two PMID columns, filtered in one compiled pass."""
    from kg_platform.graph import csr  # numba loads only when a graph is built

    key = layout.CORPUS_INPUTS["citations"]
    changed_pmids = np.concatenate([nodes.came, nodes.went])
    changed = np.zeros(int(changed_pmids.max(initial=0)) + 2, dtype=np.uint8)
    changed[changed_pmids] = 1
    marked = np.zeros(int(touched.max(initial=0)) + 2, dtype=np.uint8)
    marked[touched] = 1
    marked[0] = marked[-1] = 0  # clipped PMIDs land in the end slots: never touched
    where = lake.path(key)

    def one(part: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
        citing_out, cited_out = [], []
        for batch in part_batches(lake, part, ["citing_pmid", "cited_pmid"], batch_rows):
            citing = ints(batch, "citing_pmid", where)
            cited = ints(batch, "cited_pmid", where)
            keep_citing = np.empty(citing.size, dtype=np.int64)
            keep_cited = np.empty(citing.size, dtype=np.int64)
            filled = csr.changed_citations(
                citing, cited, changed, marked, keep_citing, keep_cited, 0
            )
            citing_out.append(keep_citing[:filled])
            cited_out.append(keep_cited[:filled])
        return citing_out, cited_out

    # the parts at once, a part per thread (Arrow's decoding and the pass release the GIL),
    # their rows in part order
    with ThreadPoolExecutor(workers()) as pool:
        done = list(pool.map(one, input_files(lake, key)))
    empty = [np.zeros(0, dtype=np.int64)]
    return (
        np.concatenate(empty + [a for citing, _ in done for a in citing]),
        np.concatenate(empty + [a for _, cited in done for a in cited]),
    )


def _patch_citations(
    lake: Lake,
    prev: KGStore,
    nodes: _Nodes,
    touched: np.ndarray,
    added: dict[str, pa.Table],
    replaced: pa.Table,
    out: ArrayWriter,
    batch_rows: int,
) -> dict[str, int]:
    where = lake.path(added_key("citations"))
    rows_now = added["citations"]
    citing = ints(rows_now, "citing_pmid", where) if rows_now.num_rows else np.zeros(0, np.int64)
    cited = ints(rows_now, "cited_pmid", where) if rows_now.num_rows else np.zeros(0, np.int64)
    if not in_sorted(citing, nodes.pmids[nodes.added]).all():
        raise NotPatchable(f"{where}: rows of no added article")
    inside = in_sorted(cited, nodes.pmids)
    dangling_added = int(np.count_nonzero(~inside))
    keys = (nodes.index(citing[inside], where, "citing_pmid") << 32) | nodes.index(
        cited[inside], where, "cited_pmid"
    )
    # the untouched articles' rows citing a PMID that came (an edge now) or went (dangling now)
    near_citing, near_cited = _changed_rows(lake, nodes, touched, batch_rows)
    came = in_sorted(near_cited, nodes.came)
    came_keys = (nodes.index(near_citing[came], "citations", "citing_pmid") << 32) | nodes.index(
        near_cited[came], "citations", "cited_pmid"
    )
    extra = sorted_unique(np.concatenate([keys, came_keys]))

    old_replaced = replaced.column("cited_pmid").to_numpy().astype(np.int64)
    old_dangling = int(
        np.count_nonzero(~in_sorted(old_replaced, np.asarray(prev.array("pmids"), dtype=np.int64)))
    )
    forward, backward, _ = _patched_pair(
        prev,
        ("cite", "cited_by", "edges"),
        (nodes.row_src, nodes.moved, nodes.n),
        (nodes.same_node, nodes.untouched, nodes.n),
        extra,
        0,
    )
    out.put_csr(forward)
    out.put_csr(backward)

    previous = prev.stats
    rows = _rows_of(lake, "citations", previous["citation_rows"], replaced.num_rows, rows_now)
    dangling = (
        int(previous["dangling_citations"])
        - old_dangling
        + dangling_added
        - int(np.count_nonzero(came))
        + int(np.count_nonzero(~came))
    )
    edges = int(forward.indices.size)
    return {
        "citation_rows": rows,
        "citation_edges": edges,
        "dangling_citations": dangling,
        "duplicate_citations": rows - dangling - edges,
    }


# -- MeSH -------------------------------------------------------------------------------------


def _patch_mesh(
    lake: Lake,
    prev: KGStore,
    nodes: _Nodes,
    rows_now: pa.Table,
    out: ArrayWriter,
    clock: Clock,
) -> dict[str, int]:
    from kg_platform.graph import csr  # numba loads only when a graph is built

    clock.restart()  # a worker thread: its own CPU clock
    where = lake.path(added_key("mesh_edges"))
    uis = prev.array("mesh_uis")
    n_desc = int(uis.size)
    if rows_now.num_rows:
        pmids = ints(rows_now, "pmid", where)
        if not in_sorted(pmids, nodes.pmids[nodes.added]).all():
            raise NotPatchable(f"{where}: rows of no added article")
        column = rows_now.column("descriptor_ui").combine_chunks()
        if column.null_count:
            raise GraphInputError(f"{where}: column descriptor_ui has {column.null_count} null(s)")
        strings = column.cast(pa.string()).to_pylist()
        if max(map(len, strings)) > uis.dtype.itemsize:
            raise NotPatchable(f"{where}: a descriptor_ui longer than every one of the graph")
        wanted = np.array(strings, dtype=uis.dtype)
        desc = np.searchsorted(uis, wanted).clip(max=max(n_desc - 1, 0))
        unknown = uis[desc] != wanted if n_desc else np.ones(wanted.size, bool)
        if unknown.any():
            new = sorted({u.decode() for u in wanted[unknown].tolist()})
            raise NotPatchable(f"descriptor(s) new to the graph: {new[:5]}")
        major = (
            true_mask(rows_now, "descriptor_major", where)
            | true_mask(rows_now, "qualifier_major", where)
        ).astype(np.int64)
        keys = (nodes.index(pmids, where, "pmid") << 32) | (desc.astype(np.int64) << 1) | major
    else:
        keys = np.zeros(0, dtype=np.int64)
    extra = csr.distinct_last(keys, 1)
    forward, backward, majors = _patched_pair(
        prev,
        ("art2mesh", "mesh2art", "pairs"),
        (nodes.row_src, np.arange(n_desc), n_desc),
        (np.arange(n_desc), nodes.untouched, nodes.n),
        extra,
        1,
    )
    article_count = np.diff(backward.indptr).astype(np.int32)
    if prev.stats.get("n_unknown_descriptors"):
        known = read_descriptor_uis(lake).astype(uis.dtype)
        gone = (article_count == 0) & ~in_sorted(uis, known)
        if gone.any():
            raise NotPatchable(
                f"descriptor(s) no article holds any more: {[u.decode() for u in uis[gone][:5]]}"
            )
    # the arrays in the order the full build puts them
    out.put_csr(backward)
    out.put_csr(forward)
    out.put("mesh_uis", uis)
    out.put("mesh_article_count", article_count)
    out.put("mesh_major_count", majors.astype(np.int32))
    out.put("mesh_categories", prev.array("mesh_categories"))
    out.put("mesh_min_depth", prev.array("mesh_min_depth"))
    replaced_rows = _replaced_rows(lake, "mesh_edges")
    rows = _rows_of(lake, "mesh_edges", prev.stats["mesh_rows"], replaced_rows, rows_now)
    clock.lap("patch: mesh")
    return {
        "n_descriptors": n_desc,
        "n_unknown_descriptors": int(prev.stats.get("n_unknown_descriptors", 0)),
        "mesh_rows": rows,
        "mesh_pairs": int(forward.indices.size),
        "major_pairs": int(majors.sum()),
    }


def _replaced_rows(lake: Lake, table: str) -> int:
    key = replaced_key(table)
    if not lake.exists(key):
        raise NotPatchable(f"{lake.path(key)}: missing")
    with lake.open(key) as f:
        return int(pq.ParquetFile(f).metadata.num_rows)
