"""The two checks on a graph build: its own invariants, and a recount from DuckDB.

The recount reads corpus/ through SQL and never the arrays' build code, so a bug in the
build (or a corrupted file) shows up as a disagreement rather than agreeing with itself.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from kg_platform.checks import CheckOutcome
from kg_platform.graph import layout
from kg_platform.graph.change import changed_array, fold_base, fold_table, touched_pmids
from kg_platform.graph.store import KGStore, in_sorted, sorted_unique
from kg_platform.pubmed.fold.manifest import FOLD_TOUCHED, REPLACED_TABLES, replaced_key
from kg_platform.settings import usable_cores as workers
from kg_platform.storage.digest import array_sha256
from kg_platform.storage.lake import Lake
from kg_platform.storage.mapped import release

_KNOWN_FLAGS = layout.QUOTABLE | layout.RETRACTED | layout.CONCERN


def check_invariants(store: KGStore, threads: int | None = None) -> CheckOutcome:
    """Manifest (dtype, length, sha256), CSR shape and order, and the two directions of each
    edge kind agreeing with each other. The arrays are hashed, and scanned, on ``threads``
    threads (default: the cores this process may use, ``settings.usable_cores``).

    Memory: the edge arrays (the build's bulk) are read a window at a time, and a window's
    mapped pages leave the process once it is read (``mapped.release``); an array of one
    entry per article or descriptor is read whole, then dropped; the store holds no pages
    when the check returns. So the check holds about a window per thread and a few arrays
    of one entry per article, not the build."""
    threads = threads or workers()
    try:
        with ThreadPoolExecutor(threads) as pool:
            return _invariants(store, pool, threads)
    finally:
        store.release()


def _invariants(store: KGStore, pool: ThreadPoolExecutor, threads: int) -> CheckOutcome:
    from kg_platform.graph import scans  # numba loads only when a graph is checked

    problems: list[str] = []
    arrays = store.manifest["arrays"]
    hashed: dict[str, Future[str]] = {}
    # the largest first, so the threads finish together
    for name in sorted(
        (n for n in layout.ALL_ARRAYS if n in arrays), key=lambda n: -int(arrays[n]["nbytes"])
    ):
        a = store.array(name)
        info = arrays[name]
        if a.dtype.str == info["dtype"] and a.shape[0] == info["length"]:
            hashed[name] = pool.submit(array_sha256, a, True)
    for name in layout.ALL_ARRAYS:
        info = arrays.get(name)
        if info is None:
            problems.append(f"manifest lacks {name}")
        elif name not in hashed:
            a = store.array(name)
            problems.append(f"{name}: {a.dtype.str}[{a.shape[0]}] != manifest")
        elif hashed[name].result() != info["sha256"]:
            problems.append(f"{name}: sha256 differs from the manifest")
    if problems:
        return CheckOutcome("graph_invariants", False, "; ".join(problems[:10]))

    n, n_desc = store.n_articles, store.n_descriptors
    # the scans, each on a thread (numpy's passes release the GIL); their problems in order
    nodes = pool.submit(_node_problems, store)
    title_problems = _title_shape_problems(store)
    titles = [] if title_problems else _utf8_jobs(store, pool, threads)
    kinds = [pool.submit(_csr_problems, store, kind) for kind in layout.EDGE_KINDS]
    problems += nodes.result() + title_problems
    problems += next((p for p in (j.result() for j in titles) if p), [])
    problems += [p for job in kinds for p in job.result()]
    if problems:  # the cross-checks below assume well-formed CSR arrays
        return CheckOutcome("graph_invariants", False, "; ".join(problems[:10]))
    majors_by_row, row_done = scans.row_flag_counts(
        pool, threads, store.array("mesh2art_indptr"), store.array("mesh2art_major")
    )
    problems += _direction_problems(store, pool, threads)
    counts = np.diff(store.array("mesh2art_indptr"))  # one entry per descriptor
    if not np.array_equal(counts, store.array("mesh_article_count")):
        problems.append("mesh_article_count differs from mesh2art_indptr")
    for job in row_done:
        job.result()
    if not np.array_equal(majors_by_row, store.array("mesh_major_count")):
        problems.append("mesh_major_count differs from mesh2art_major")
    meta = {
        "articles": n,
        "descriptors": n_desc,
        "citation_edges": int(store.array("cite_indices").size),
        "mesh_pairs": int(store.array("mesh2art_indices").size),
        "problems": len(problems),
    }
    if problems:
        return CheckOutcome("graph_invariants", False, "; ".join(problems[:10]), meta)
    return CheckOutcome("graph_invariants", True, "all invariants hold", meta)


def _node_problems(store: KGStore) -> list[str]:
    problems = []
    n = store.n_articles
    pmids = store.array("pmids")
    if pmids.size and (pmids[0] <= 0 or np.any(pmids[1:] <= pmids[:-1])):
        problems.append("pmids not positive and strictly ascending")
    uis = store.array("mesh_uis")
    if np.any(uis[1:] <= uis[:-1]):
        problems.append("mesh_uis not strictly ascending")
    for name in ("year", "flags"):
        if store.array(name).size != n:
            problems.append(f"{name} has {store.array(name).size} entries, pmids {n}")
    if np.any(store.array("flags") & ~np.uint8(_KNOWN_FLAGS)):
        problems.append("flags holds unknown bits")
    for name in ("pmids", "mesh_uis", "year", "flags"):
        release(store.array(name))
    return problems


def _csr_problems(store: KGStore, kind: str) -> list[str]:
    try:
        store.csr(kind).check(full=True)
    except ValueError as exc:
        return [str(exc)]
    return []


def _title_shape_problems(store: KGStore) -> list[str]:
    """The title store's shape: n + 1 offsets ascending from 0 to the bytes' end, a null
    flag per article and no bytes for a null title."""
    n = store.n_articles
    offsets, data = store.array("title_offsets"), store.array("title_bytes")
    null = store.array("title_null")
    if offsets.size != n + 1 or null.size != n:
        return [f"title_offsets has {offsets.size} entries, title_null {null.size}, pmids {n}"]
    lengths = np.diff(offsets)
    if offsets[0] != 0 or np.any(lengths < 0) or offsets[-1] != data.size:
        return ["title_offsets is not monotone from 0 to the end of title_bytes"]
    if np.any(lengths[null] != 0):
        return ["title_bytes holds text for a null title"]
    release(offsets)
    release(null)
    return []


def _utf8_jobs(store: KGStore, pool: ThreadPoolExecutor, threads: int) -> list[Future[list[str]]]:
    """Every title valid UTF-8 (the store's shape checked): Arrow's validation of the
    titles as one string array, a slice of titles per job (it releases the GIL); each job's
    problem, if any."""
    offsets, data = store.array("title_offsets"), store.array("title_bytes")
    n = offsets.size - 1
    if n <= 0 or data.size == 0:
        return []
    titles = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))
    # slices of about 64 MiB each, at least one per thread
    parts = max(threads, int(data.size >> 26) + 1)
    cuts = np.linspace(0, n, min(parts, n) + 1).astype(np.int64).tolist()

    def valid(lo: int, hi: int) -> list[str]:
        try:
            titles.slice(lo, hi - lo).validate(full=True)
        except pa.ArrowInvalid as error:
            return [f"title_bytes is not UTF-8 (titles {lo} to {hi - 1}: {error})"]
        finally:  # the slice's pages leave memory once it is read
            release(data, int(offsets[lo]), int(offsets[hi]))
            release(offsets, lo, hi + 1)
        return []

    return [pool.submit(valid, lo, hi) for lo, hi in zip(cuts[:-1], cuts[1:], strict=True)]


def _direction_problems(store: KGStore, pool: ThreadPoolExecutor, threads: int) -> list[str]:
    """Each edge stored twice must be the same edge: compare degree and major counts, each
    counted on ``threads`` threads (``scans``), one array after another, a window at a
    time."""
    from kg_platform.graph import scans

    n, n_desc = store.n_articles, store.n_descriptors
    problems = []
    for fwd, rev, n_rev in (("cite", "cited_by", n), ("mesh2art", "art2mesh", n_desc)):
        # each direction's indices counted per column: the other direction's degrees
        for counted, other, n_rows in (
            (fwd, rev, store.array(f"{rev}_indptr").size - 1),
            (rev, fwd, n_rev),
        ):
            got = scans.value_counts(pool, threads, store.array(f"{counted}_indices"), n_rows)
            degrees = store.array(f"{other}_indptr")
            if not np.array_equal(got, np.diff(degrees)):
                problems.append(f"{counted} and {other} disagree on degrees")
            release(degrees)
    majors_by_desc = scans.value_counts(
        pool, threads, store.array("art2mesh_indices"), n_desc, mask=store.array("art2mesh_major")
    )
    if not np.array_equal(majors_by_desc, store.array("mesh_major_count")):
        problems.append("art2mesh_major and mesh2art_major disagree")
    return problems


# -- recount from DuckDB ------------------------------------------------------------------

_MAJOR = "(descriptor_major OR coalesce(qualifier_major, false))"


def _seed(build_id: str) -> int:
    return int(hashlib.sha256(build_id.encode()).hexdigest()[:8], 16)


_ARTICLE_TOTALS = ("articles", "quotable", "retracted", "concern")


# what _totals counts over every row, in its SELECT's order
TOTALS = (
    "articles",
    "quotable",
    "citation_edges",
    "dangling_citations",
    "mesh_pairs",
    "major_pairs",
    "annotated_descriptors",
    "retracted",
    "concern",
)


def _article_totals(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """The per-article totals (one scan of articles and the small flag tables)."""
    row = con.execute(
        f"""
        SELECT
            (SELECT count(*) FROM articles),
            (SELECT count(*) FROM articles WHERE has_abstract),
            (SELECT count(*) FROM articles WHERE pmid IN (
                SELECT pmid FROM corrections WHERE ref_type = '{layout.RETRACTION_REF_TYPE}'
                UNION SELECT pmid FROM pubtypes WHERE name = '{layout.RETRACTED_PUBTYPE}')),
            (SELECT count(*) FROM articles WHERE pmid IN (
                SELECT pmid FROM corrections WHERE ref_type = '{layout.CONCERN_REF_TYPE}'))
        """
    ).fetchone()
    return dict(zip(_ARTICLE_TOTALS, (int(v) for v in row), strict=True))


_CITED_INSIDE = """SELECT citing_pmid, cited_pmid FROM citations
    WHERE citing_pmid IN (SELECT pmid FROM articles)
      AND cited_pmid IN (SELECT pmid FROM articles)"""

_MESH_PAIRS = f"""
        WITH pairs AS (
            SELECT pmid, descriptor_ui, bool_or({_MAJOR}) AS major FROM mesh_edges
            WHERE pmid IN (SELECT pmid FROM articles) GROUP BY pmid, descriptor_ui
        )
        SELECT
            (SELECT count(*) FROM pairs),
            (SELECT count(*) FROM pairs WHERE major),
            (SELECT count(DISTINCT descriptor_ui) FROM pairs)
        """

# the rows the streamed passes read, a PMID range ({where}) per query
_CITATION_ROWS = "SELECT citing_pmid, cited_pmid FROM citations WHERE {where}"
_MESH_ROWS = f"SELECT pmid, descriptor_ui, {_MAJOR} IS TRUE FROM mesh_edges WHERE {{where}}"


def _pmid_ranges(column: str, keep: np.ndarray, parts: int) -> list[str]:
    """WHERE clauses cutting ``column`` into up to ``parts`` ranges of about as many of the
    articles' PMIDs (``keep``, ascending) each, the nulls in the first: every row in one."""
    bounds = np.linspace(0, keep.size, parts + 1).astype(np.int64)[1:-1]
    cuts = sorted({int(keep[i]) for i in bounds if 0 < i < keep.size})
    if not cuts:
        return ["true"]
    clauses = [f"({column} < {cuts[0]} OR {column} IS NULL)"]
    clauses += [f"{column} >= {a} AND {column} < {b}" for a, b in zip(cuts, cuts[1:], strict=False)]
    return [*clauses, f"{column} >= {cuts[-1]}"]


@contextlib.contextmanager
def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> Iterator[pa.RecordBatchReader]:
    """The rows of ``sql`` as a reader of Arrow batches, on a cursor of its own (a thread
    each)."""
    cursor = con.cursor()
    try:
        reader = cursor.sql(sql).to_arrow_reader(1 << 20)
        try:
            yield reader
        finally:
            reader.close()
    finally:
        cursor.close()


def _count_citations(con: duckdb.DuckDBPyConnection, where: str, members):
    """The citation rows ``where`` counted in one streamed pass (``scans.PairCount``);
    None when their citing PMIDs are out of order."""
    from kg_platform.graph import scans

    count = scans.PairCount(members)
    with _rows(con, _CITATION_ROWS.format(where=where)) as reader:
        for batch in reader:
            if batch.num_rows and not count.add(batch):
                return None
    return count


def _count_mesh(con: duckdb.DuckDBPyConnection, where: str, members, uis: pa.Array):
    """The MeSH rows ``where`` of the articles, as (pmid, descriptor) pairs per
    descriptor (a code: its place in ``uis``; a null descriptor the last code) and the
    pairs with a major row (``scans.CodePairCount``), in one streamed pass; None when their
    PMIDs are out of order."""
    import pyarrow.compute as pc

    from kg_platform.graph import scans

    count = scans.CodePairCount(members, len(uis) + 1)
    batches: list[pa.RecordBatch] = []

    def add(batches: list[pa.RecordBatch]) -> bool:
        # about a million rows at once: index_in hashes its value set on every call
        rows = pa.Table.from_batches(batches)
        ui = rows.column(1)
        codes = pc.index_in(ui, value_set=uis)
        if codes.null_count != ui.null_count:  # a descriptor not among uis: DuckDB counts
            return False
        return count.add(
            rows.column(0), codes.fill_null(len(uis)).to_numpy(), rows.column(2).to_numpy()
        )

    held = 0
    with _rows(con, _MESH_ROWS.format(where=where)) as reader:
        for batch in reader:
            batches.append(batch)
            held += batch.num_rows
            if held >= 1 << 20:
                if not add(batches):
                    return None
                batches, held = [], 0
    if held and not add(batches):
        return None
    return count


# a sampled article as ``_article_mismatches`` compares it: the PMIDs it cites, ascending;
# its in-degree; its descriptors, ascending (a null last)
Neighbours = tuple[tuple[int, ...], int, tuple[str | None, ...]]


def _sampled_neighbours(
    pmids: np.ndarray, cites: np.ndarray, heads: np.ndarray, uis: list[str | None]
) -> dict[int, Neighbours]:
    """The sampled articles' neighbours from the streamed passes' rows: ``cites`` the
    citation rows inside with a sampled PMID on either side, ``heads`` the MeSH rows
    (pmid, code) of a sampled PMID; as ``_article_mismatches``' query counts them."""
    pairs = sorted_unique((cites[:, 0] << 32) | cites[:, 1]) if cites.size else cites[:, 0]
    citing, cited = pairs >> 32, pairs & 0xFFFFFFFF
    near: dict[int, Neighbours] = {}
    for p in pmids.tolist():
        named = [uis[c] for c in sorted_unique(heads[heads[:, 0] == p, 1]).tolist()]
        near[p] = (
            tuple(cited[citing == p].tolist()),
            int(np.count_nonzero(cited == p)),
            (*sorted(ui for ui in named if ui is not None), *([None] if None in named else [])),
        )
    return near


def _edge_totals(
    con: duckdb.DuckDBPyConnection, threads: int, sampled: np.ndarray | None = None
) -> tuple[dict[str, int], dict[str, tuple[int, int]] | None, dict[int, Neighbours] | None]:
    """The edge totals over the articles (``TOTALS`` less the per-article ones); each
    descriptor's articles and major articles; and the neighbours of the ``sampled`` PMIDs
    (ascending articles: ``_article_mismatches``) (each None where DuckDB counts).

    The corpus's parts are PMID ranges, each in PMID order, so the citations' distinct
    pairs (and the dangling rows) and the MeSH (pmid, descriptor) pairs are counted in
    streamed, compiled passes over the rows, a run of one PMID at a time (``scans``), each
    table cut into a PMID range per thread (``threads``), each range on its own cursor;
    the passes keep the sampled PMIDs' rows on the way. Rows out of that order are counted
    by DuckDB's aggregates instead."""
    from kg_platform.graph import scans  # numba loads only when a graph is checked

    articles = con.execute("SELECT pmid FROM articles WHERE pmid IS NOT NULL").fetchnumpy()
    keep = sorted_unique(np.asarray(articles["pmid"], dtype=np.int64))
    del articles
    if sampled is not None and not in_sorted(sampled, keep).all():
        sampled = None  # a sampled PMID no article: the query looks it up
    # PMIDs below 2^31: a pair packs into one int64 (_sampled_neighbours)
    small = not keep.size or (keep[0] >= 0 and keep[-1] < 1 << 31)
    members = scans.Members.of(keep, sampled) if small else None
    citations = mesh = None
    if members is not None:
        with ThreadPoolExecutor(threads) as pool:
            cited = [
                pool.submit(_count_citations, con, where, members)
                for where in _pmid_ranges("citing_pmid", keep, threads)
            ]
            uis = con.sql(
                "SELECT DISTINCT descriptor_ui FROM mesh_edges WHERE descriptor_ui IS NOT NULL"
            ).to_arrow_table()
            uis = uis.column(0).combine_chunks()
            headed = [
                pool.submit(_count_mesh, con, where, members, uis)
                for where in _pmid_ranges("pmid", keep, threads)
            ]
            parts = [job.result() for job in cited]
            counts = [job.result() for job in headed]
        if all(part is not None for part in parts):
            citations = parts
        if all(count is not None for count in counts):
            mesh = counts
    if citations is None:
        rows, inside, pairs = con.execute(
            f"""SELECT (SELECT count(*) FROM citations), count(*),
                       count(DISTINCT (citing_pmid, cited_pmid)) FROM ({_CITED_INSIDE})"""
        ).fetchall()[0]
    else:
        rows, inside, pairs = (
            sum(column) for column in zip(*(p.result() for p in citations), strict=True)
        )
    totals = {"citation_edges": int(pairs), "dangling_citations": int(rows) - int(inside)}
    if mesh is None:
        row = con.execute(_MESH_PAIRS).fetchall()[0]
        totals.update(zip(("mesh_pairs", "major_pairs", "annotated_descriptors"), row, strict=True))
        return {k: int(v) for k, v in totals.items()}, None, None
    pairs_by = np.sum([count.pairs for count in mesh], axis=0)
    majors_by = np.sum([count.flagged for count in mesh], axis=0)
    totals["mesh_pairs"] = int(pairs_by.sum())
    totals["major_pairs"] = int(majors_by.sum())
    totals["annotated_descriptors"] = int(np.count_nonzero(pairs_by[:-1]))  # not the nulls
    named = [*uis.to_pylist(), None]
    per_descriptor = {
        named[c]: (int(pairs_by[c]), int(majors_by[c])) for c in np.flatnonzero(pairs_by[:-1])
    }
    near = None
    if citations is not None and sampled is not None:
        near = _sampled_neighbours(
            sampled,
            np.concatenate([p.sampled_rows() for p in citations]),
            np.concatenate([count.sampled_rows() for count in mesh]),
            named,
        )
    return totals, per_descriptor, near


def _totals(
    con: duckdb.DuckDBPyConnection, threads: int, sampled: np.ndarray | None = None
) -> tuple[dict[str, int], dict[str, tuple[int, int]] | None, dict[int, Neighbours] | None]:
    """Every total over every row, in ``TOTALS``' order: the per-article ones, and the
    edges' over the articles; each descriptor's counts and the ``sampled`` articles'
    neighbours, or None (``_edge_totals``)."""
    totals = _article_totals(con)
    edges, per_descriptor, near = _edge_totals(con, threads, sampled)
    totals.update(edges)
    return {name: totals[name] for name in TOTALS}, per_descriptor, near


def _store_totals(store: KGStore) -> dict[str, int]:
    flags = store.array("flags")
    return {
        "articles": store.n_articles,
        "quotable": int(np.count_nonzero(flags & layout.QUOTABLE)),
        "citation_edges": int(store.array("cite_indices").size),
        "dangling_citations": int(store.stats["dangling_citations"]),
        "mesh_pairs": int(store.array("mesh2art_indices").size),
        "major_pairs": int(np.count_nonzero(store.array("mesh2art_major"))),
        "annotated_descriptors": int(np.count_nonzero(np.diff(store.array("mesh2art_indptr")))),
        "retracted": int(np.count_nonzero(flags & layout.RETRACTED)),
        "concern": int(np.count_nonzero(flags & layout.CONCERN)),
    }


def _title_mismatches(
    store: KGStore, con: duckdb.DuckDBPyConnection, pmids: list[int]
) -> list[str]:
    """The title store against ``articles.title`` through SQL for the sampled PMIDs (a
    corpus without the column: every title null)."""
    columns = {row[0] for row in con.execute("DESCRIBE articles").fetchall()}
    sql = dict.fromkeys(pmids)
    if "title" in columns:
        query = "SELECT pmid, title FROM articles WHERE pmid IN (SELECT unnest(?))"
        sql.update({int(p): t for p, t in con.execute(query, [pmids]).fetchall()})
    got = store.titles(pmids)
    return [
        f"PMID {p} title: arrays {got.get(p)!r}, DuckDB {sql[p]!r}"
        for p in pmids
        if got.get(p) != sql[p]
    ]


# -- the recount of an update: the previous build plus what the fold changed ----------------


@dataclass(frozen=True)
class UpdateDelta:
    """What an incremental fold changed since the corpus of a published graph build: that
    build (its recount passed before it was published), the PMIDs the new files touched,
    and the rows of those PMIDs the previous corpus held (corpus/fold/)."""

    previous: KGStore
    touched: np.ndarray  # ascending PMIDs (int64)
    citations: pa.Table  # the replaced rows: citing_pmid, cited_pmid, ...
    mesh_edges: pa.Table  # the replaced rows: pmid, descriptor_ui, descriptor_major, ...


# the previous build's arrays an update's recount reads (cite_indices: its length only)
_DELTA_ARRAYS = ("pmids", "mesh_uis", "mesh_article_count", "mesh_major_count")


def update_delta(
    lake: Lake, previous_build_id: str | None, store: KGStore
) -> tuple[UpdateDelta | None, str]:
    """The delta that lets ``store`` be recounted from ``previous_build_id`` (the build
    published before it) and the last fold's change, or None; and why. Only when the fold
    was incremental from exactly the corpus tables that build read (their fingerprints) and
    the MeSH tables are the ones it read: otherwise the recount counts everything."""
    needed = (FOLD_TOUCHED, *(replaced_key(t) for t in REPLACED_TABLES))
    previous, why = fold_base(
        lake, previous_build_id, store.build_id, store.manifest["inputs"], needed
    )
    if previous is None:
        return None, why
    # the arrays the delta starts from must be the ones the previous recount passed
    changed = changed_array(previous, _DELTA_ARRAYS)
    if changed is not None:
        return None, f"graph build {previous_build_id}: {changed} differs from its manifest"
    touched = touched_pmids(lake)
    delta = UpdateDelta(
        previous,
        touched,
        fold_table(lake, replaced_key("citations"), ["citing_pmid", "cited_pmid"]),
        fold_table(
            lake,
            replaced_key("mesh_edges"),
            ["pmid", "descriptor_ui", "descriptor_major", "qualifier_major"],
        ),
    )
    return delta, f"graph build {previous_build_id} and the {touched.size} PMIDs the fold touched"


def _packed_pairs(citing: np.ndarray, cited: np.ndarray) -> int:
    """Distinct (citing, cited) pairs."""
    keys = (citing.astype(np.int64) << 32) | cited.astype(np.int64)
    return int(sorted_unique(keys).size)


def _citation_delta(
    con: duckdb.DuckDBPyConnection,
    delta: UpdateDelta,
    old_pmids: np.ndarray,
    corpus_pmids: np.ndarray,
    added: np.ndarray,
) -> tuple[dict[str, int], np.ndarray]:
    """citation_edges and dangling_citations of the new corpus: the previous build's, less
    the replaced rows' (against the previous articles), plus the touched PMIDs' rows now,
    plus the rows of untouched PMIDs citing an article that came (no longer dangling) or
    went (now dangling). The corpus rows are found through SQL, in one scan that keeps only
    the rows of a touched PMID or citing a changed one; the counting is on those rows. And
    the untouched articles with such a row (the graph's patch rewires their lists)."""
    prev = delta.previous
    citing = delta.citations.column("citing_pmid").to_numpy()
    cited = delta.citations.column("cited_pmid").to_numpy()
    inside = in_sorted(cited.astype(np.int64), old_pmids)
    old_pairs = _packed_pairs(citing[inside], cited[inside])
    old_dangling = int(np.count_nonzero(~inside))
    near = con.execute(
        """SELECT citing_pmid, cited_pmid FROM citations
           WHERE citing_pmid IN (SELECT pmid FROM kg_touched)
              OR cited_pmid IN (SELECT pmid FROM kg_changed)"""
    ).fetchnumpy()
    citing = np.asarray(near["citing_pmid"], dtype=np.int64)
    cited = np.asarray(near["cited_pmid"], dtype=np.int64)
    touched = in_sorted(citing, delta.touched)
    inside = in_sorted(cited, corpus_pmids)
    citing_inside = in_sorted(citing, corpus_pmids)
    came = ~touched & in_sorted(cited, added)
    went = ~touched & ~came  # the other rows citing a changed article cite one that went
    now = touched & citing_inside & inside
    totals = {
        "citation_edges": int(prev.array("cite_indices").size)
        - old_pairs
        + _packed_pairs(citing[now], cited[now])
        + _packed_pairs(citing[came & citing_inside], cited[came & citing_inside])
        - _packed_pairs(citing[went & citing_inside], cited[went & citing_inside]),
        "dangling_citations": int(prev.stats["dangling_citations"])
        - old_dangling
        + int(np.count_nonzero(touched & ~inside))
        - int(np.count_nonzero(came))
        + int(np.count_nonzero(went)),
    }
    return totals, sorted_unique(citing[came | went])


_PER_DESCRIPTOR = f"""
    SELECT descriptor_ui, count(*), count(*) FILTER (WHERE major) FROM (
        SELECT pmid, descriptor_ui, bool_or({_MAJOR}) AS major FROM {{rows}}
        WHERE {{where}} GROUP BY pmid, descriptor_ui
    ) GROUP BY descriptor_ui"""


def _mesh_delta(
    store: KGStore, con: duckdb.DuckDBPyConnection, delta: UpdateDelta
) -> tuple[dict[str, int], list[str], int]:
    """Every descriptor's article and major counts in the arrays against the previous
    build's, less the replaced rows' (pmid, descriptor) pairs, plus the touched PMIDs' pairs
    in the corpus now (through SQL); the MeSH totals that follow; and the descriptors
    compared."""
    prev = delta.previous
    expected: dict[str, list[int]] = {}
    prev_counts = prev.array("mesh_article_count")
    prev_majors = prev.array("mesh_major_count")
    for d in np.flatnonzero(prev_counts):
        expected[prev.mesh_ui(int(d))] = [int(prev_counts[d]), int(prev_majors[d])]
    old = _PER_DESCRIPTOR.format(rows="kg_replaced_mesh", where="true")
    now = _PER_DESCRIPTOR.format(rows="mesh_edges", where="pmid IN (SELECT pmid FROM kg_present)")
    for sign, sql in ((-1, old), (1, now)):
        for ui, n, major in con.execute(sql).fetchall():
            counts = expected.setdefault(ui, [0, 0])
            counts[0] += sign * int(n)
            counts[1] += sign * int(major)
    counts, majors = store.array("mesh_article_count"), store.array("mesh_major_count")
    got = {store.mesh_ui(d): (int(counts[d]), int(majors[d])) for d in np.flatnonzero(counts)}
    problems = [
        f"descriptor {ui}: arrays {got.get(ui, (0, 0))}, previous build + update "
        f"{tuple(expected.get(ui, (0, 0)))}"
        for ui in sorted(set(got) | set(expected))
        if got.get(ui, (0, 0)) != tuple(expected.get(ui, (0, 0)))
    ]
    totals = {
        "mesh_pairs": sum(n for n, _ in expected.values()),
        "major_pairs": sum(m for _, m in expected.values()),
        "annotated_descriptors": sum(1 for n, _ in expected.values() if n),
    }
    return totals, problems, len(set(got) | set(expected))


def _delta_totals(
    store: KGStore, con: duckdb.DuckDBPyConnection, delta: UpdateDelta
) -> tuple[dict[str, int], list[str], int, np.ndarray, np.ndarray]:
    """The totals of an update's build: the per-article ones counted in full (cheap), the
    node list compared with the corpus's PMIDs, the edge ones from the delta; the
    problems found on the way, the descriptors compared, the touched PMIDs in the corpus
    now, and the untouched ones citing a PMID that came or went."""
    problems: list[str] = []
    totals = _article_totals(con)
    corpus_pmids = np.sort(con.execute("SELECT pmid FROM articles").fetchnumpy()["pmid"])
    new_pmids = np.asarray(store.array("pmids"), dtype=np.int64)
    if not np.array_equal(corpus_pmids, new_pmids):
        problems.append(
            f"pmids: arrays hold {new_pmids.size}, the corpus {corpus_pmids.size} "
            f"({np.setxor1d(corpus_pmids, new_pmids)[:5].tolist()} differ)"
        )
    old_pmids = np.asarray(delta.previous.array("pmids"), dtype=np.int64)
    added = corpus_pmids[~in_sorted(corpus_pmids, old_pmids)]
    removed = old_pmids[~in_sorted(old_pmids, corpus_pmids)]
    untouched = np.concatenate([added, removed])
    untouched = untouched[~in_sorted(untouched, delta.touched)]
    if untouched.size:
        problems.append(
            f"{untouched.size} PMID(s) came or went that the fold did not touch: "
            f"{np.sort(untouched)[:5].tolist()}"
        )
    present = delta.touched[in_sorted(delta.touched, corpus_pmids)]
    registered = {
        "kg_touched": pa.table({"pmid": delta.touched}),
        "kg_present": pa.table({"pmid": present}),
        "kg_changed": pa.table({"pmid": np.concatenate([added, removed])}),
        "kg_replaced_mesh": delta.mesh_edges,
    }
    for name, table in registered.items():
        con.register(name, table)
    try:
        citation_totals, rewired = _citation_delta(con, delta, old_pmids, corpus_pmids, added)
        totals.update(citation_totals)
        mesh_totals, mesh_problems, compared = _mesh_delta(store, con, delta)
    finally:
        for name in registered:
            con.unregister(name)
    totals.update(mesh_totals)
    return totals, problems + mesh_problems, compared, present, rewired


def _chosen_descriptors(
    store: KGStore, rng: np.random.Generator, sample: int, named_uis: tuple[str, ...], full: bool
) -> tuple[list[int], list[str]]:
    """The descriptors to recount: ``sample`` random annotated ones, the largest and the
    named ones the build holds (none without ``full``); and those named ones."""
    counts = store.array("mesh_article_count")
    annotated = np.flatnonzero(counts) if full else np.zeros(0, dtype=np.int64)
    chosen = set(rng.choice(annotated, min(sample, annotated.size), replace=False).tolist())
    if annotated.size:
        chosen.add(int(np.argmax(counts)))
    named_here = []
    for ui in named_uis:  # a handful of names, not rows
        with contextlib.suppress(KeyError):
            d = store.desc_idx(ui)
            named_here.append(ui)
            if full:
                chosen.add(d)
    return sorted(chosen), named_here


def _descriptor_mismatches(
    store: KGStore,
    con: duckdb.DuckDBPyConnection,
    ds: list[int],
    counted: dict[str, tuple[int, int]] | None = None,
) -> list[str]:
    """A line for each descriptor of ``ds`` whose articles or major articles in the arrays
    are not DuckDB's count of them (``counted``: every descriptor's, from the corpus rows
    streamed through DuckDB by ``_edge_totals``; else a query)."""
    counts = store.array("mesh_article_count")
    mismatches = []
    uis = [store.mesh_ui(d) for d in ds]
    sql = dict.fromkeys(uis, (0, 0))
    if counted is not None:
        sql.update((ui, counted[ui]) for ui in uis if ui in counted)
    for ui, n_art, n_major in (
        []
        if counted is not None
        else con.execute(
            f"""SELECT descriptor_ui, count(DISTINCT pmid),
                   count(DISTINCT pmid) FILTER (WHERE {_MAJOR})
            FROM mesh_edges WHERE descriptor_ui IN (SELECT unnest(?))
              AND pmid IN (SELECT pmid FROM articles)
            GROUP BY descriptor_ui""",
            [uis],
        ).fetchall()
    ):
        sql[ui] = (int(n_art), int(n_major))
    for d, ui in zip(ds, uis, strict=True):
        got = (store.articles_of(d).size, store.articles_of(d, major_only=True).size)
        if got != sql[ui] or int(counts[d]) != got[0]:
            mismatches.append(f"descriptor {ui}: arrays {got}, DuckDB {sql[ui]}")
    return mismatches


def _article_mismatches(
    store: KGStore,
    con: duckdb.DuckDBPyConnection,
    idxs: list[int],
    near: dict[int, Neighbours] | None = None,
) -> list[str]:
    """A line for each article of ``idxs`` whose cited articles, in-degree or headings in the
    arrays are not DuckDB's (``near``: from the corpus rows streamed through DuckDB by
    ``_edge_totals``; else a query), and for each title that differs
    (``_title_mismatches``)."""
    pmids = [store.pmid(i) for i in idxs]
    sql_deg: dict[int, tuple] = dict.fromkeys(pmids, ((), 0, ()))
    if near is not None:
        sql_deg.update(near)
    # each side filtered to the sampled PMIDs before it is made distinct: one scan of each
    # table, not a distinct set of every citation
    for pmid, cited, in_deg, uis_of in (
        []
        if near is not None
        else con.execute(
            """WITH s AS (SELECT unnest(?) AS pmid),
                near AS MATERIALIZED (
                    SELECT citing_pmid, cited_pmid FROM citations
                    WHERE citing_pmid IN (SELECT pmid FROM s) OR cited_pmid IN (SELECT pmid FROM s)),
                pairs AS MATERIALIZED (
                    SELECT DISTINCT citing_pmid, cited_pmid FROM near
                    WHERE citing_pmid IN (SELECT pmid FROM articles)
                      AND cited_pmid IN (SELECT pmid FROM articles)),
                outgoing AS (
                    SELECT citing_pmid AS pmid, list(cited_pmid ORDER BY cited_pmid) AS l
                    FROM pairs WHERE citing_pmid IN (SELECT pmid FROM s) GROUP BY 1),
                incoming AS (
                    SELECT cited_pmid AS pmid, count(*) AS n
                    FROM pairs WHERE cited_pmid IN (SELECT pmid FROM s) GROUP BY 1),
                headings AS (
                    SELECT pmid, list(DISTINCT descriptor_ui ORDER BY descriptor_ui) AS l
                    FROM mesh_edges WHERE pmid IN (SELECT pmid FROM s) GROUP BY 1)
           SELECT s.pmid, outgoing.l, coalesce(incoming.n, 0), headings.l
           FROM s LEFT JOIN outgoing USING (pmid) LEFT JOIN incoming USING (pmid)
                  LEFT JOIN headings USING (pmid)""",
            [pmids],
        ).fetchall()
    ):
        sql_deg[int(pmid)] = (tuple(cited or ()), int(in_deg), tuple(uis_of or ()))
    mismatches = _title_mismatches(store, con, pmids)
    pmid_of = store.array("pmids")
    for i, pmid in zip(idxs, pmids, strict=True):
        # exact neighbour lists for the outgoing side (short), the count for the incoming one
        got = (
            tuple(int(p) for p in pmid_of[store.cites(i)]),
            int(store.cited_by(i).size),
            tuple(store.mesh_ui(int(d)) for d in store.mesh_of(i)),
        )
        if got != sql_deg[pmid]:
            mismatches.append(
                f"PMID {pmid} (cites, in-degree, MeSH): arrays {got}, DuckDB {sql_deg[pmid]}"
            )
    return mismatches


def _picked_articles(
    store: KGStore,
    rng: np.random.Generator,
    sample: int,
    named_pmids: tuple[int, ...],
    changed: tuple[np.ndarray, ...],
) -> list[int]:
    """The articles to recount (ascending indices): ``sample`` random ones, those of
    highest out- and in-degree, the named ones, and up to ``sample`` of each of an update's
    ``changed`` PMID sets (its touched articles, its untouched ones citing an article that
    came or went)."""
    n = store.n_articles
    picked = set(rng.choice(n, min(sample, n), replace=False).tolist()) if n else set()
    if n:
        picked.add(int(np.argmax(np.diff(store.array("cite_indptr")))))
        picked.add(int(np.argmax(np.diff(store.array("cited_by_indptr")))))
    picked |= {store.idx(p) for p in named_pmids}
    for pmids in changed:
        pmids = pmids[in_sorted(pmids, np.asarray(store.array("pmids"), dtype=np.int64))]
        chosen_pmids = rng.choice(pmids, min(sample, pmids.size), replace=False)
        picked |= {store.idx(int(p)) for p in chosen_pmids}
    return sorted(picked)


def recount(
    store: KGStore,
    con: duckdb.DuckDBPyConnection,
    sample: int = 100,
    named_pmids: tuple[int, ...] = (),
    named_uis: tuple[str, ...] = (),
    delta: UpdateDelta | None = None,
) -> CheckOutcome:
    """Recount totals, ``sample`` random descriptors and articles and the named ones (plus
    the largest descriptor and the articles of highest out- and in-degree; named descriptors
    the build lacks are counted, not failed: a small corpus need not hold them) from views
    ``articles``, ``citations``, ``mesh_edges``, ``corrections``, ``pubtypes``.

    With ``delta`` (an update's build, :func:`update_delta`) the edge totals and every
    descriptor's counts are the previous build's plus the change, counted through SQL on
    the touched PMIDs' rows and the rows citing an article that came or went, not on every
    row; the node list is compared with the corpus's PMIDs whole; and up to ``sample``
    touched articles are recounted besides the random ones."""
    rng = np.random.default_rng(_seed(store.build_id))
    mismatches: list[str] = []
    arr_totals = _store_totals(store)
    if delta is None:  # the samples first: the streamed passes count their rows too
        ds, named_here = _chosen_descriptors(store, rng, sample, named_uis, full=True)
        idxs = _picked_articles(store, rng, sample, named_pmids, ())
        sampled = np.asarray(store.array("pmids")[idxs], dtype=np.int64)
        store.release()  # the arrays' side is counted: their pages leave before DuckDB's work
        sql_totals, per_descriptor, near = _totals(con, workers(), sampled)
        source = "DuckDB"
    else:
        store.release()
        sql_totals, problems, delta_compared, present, rewired = _delta_totals(store, con, delta)
        mismatches += problems
        source = "previous build + update"
        # every descriptor was compared above
        ds, named_here = _chosen_descriptors(store, rng, sample, named_uis, full=False)
        idxs = _picked_articles(store, rng, sample, named_pmids, (present, rewired))
        per_descriptor = near = None
    for name, expected in sql_totals.items():
        if arr_totals[name] != expected:
            label = "DuckDB" if name in _ARTICLE_TOTALS else source
            mismatches.append(f"{name}: arrays {arr_totals[name]}, {label} {expected}")
    mismatches += _descriptor_mismatches(store, con, ds, per_descriptor)
    mismatches += _article_mismatches(store, con, idxs, near)

    meta: dict[str, int | float | str] = {
        "mode": "full" if delta is None else "update",
        "descriptors_recounted": len(ds) if delta is None else delta_compared,
        "articles_recounted": len(idxs),
        "named_descriptors_absent": len(named_uis) - len(named_here),
        "mismatches": len(mismatches),
        **{f"duckdb_{k}": v for k, v in sql_totals.items()},
        **({"touched_articles": int(present.size)} if delta is not None else {}),
    }
    if mismatches:
        return CheckOutcome("graph_recount", False, "; ".join(mismatches[:10]), meta)
    return CheckOutcome(
        "graph_recount",
        True,
        (
            f"totals, {len(ds)} descriptors and {len(idxs)} articles agree with DuckDB"
            if delta is None
            else f"totals and {delta_compared} descriptors as graph build "
            f"{delta.previous.build_id} plus the update, and {len(idxs)} articles "
            f"({present.size} touched) agree with DuckDB"
        ),
        meta,
    )
