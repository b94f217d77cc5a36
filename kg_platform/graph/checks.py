"""The two checks on a graph build: its own invariants, and a recount from DuckDB.

The recount reads corpus/ through SQL and never the arrays' build code, so a bug in the
build (or a corrupted file) shows up as a disagreement rather than agreeing with itself.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib

import duckdb
import numpy as np

from kg_platform.checks import CheckOutcome
from kg_platform.graph import layout
from kg_platform.graph.build import array_sha256
from kg_platform.graph.store import KGStore

_KNOWN_FLAGS = layout.QUOTABLE | layout.RETRACTED | layout.CONCERN


def check_invariants(store: KGStore) -> CheckOutcome:
    """Manifest (dtype, length, sha256), CSR shape and order, and the two directions of each
    edge kind agreeing with each other."""
    problems: list[str] = []
    arrays = store.manifest["arrays"]
    for name in layout.ALL_ARRAYS:
        info = arrays.get(name)
        if info is None:
            problems.append(f"manifest lacks {name}")
            continue
        a = store.array(name)
        if a.dtype.str != info["dtype"] or a.shape[0] != info["length"]:
            problems.append(f"{name}: {a.dtype.str}[{a.shape[0]}] != manifest")
        elif array_sha256(a) != info["sha256"]:
            problems.append(f"{name}: sha256 differs from the manifest")
    if problems:
        return CheckOutcome("graph_invariants", False, "; ".join(problems[:10]))

    n, n_desc = store.n_articles, store.n_descriptors
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
    problems += _title_problems(store)
    for kind in layout.EDGE_KINDS:
        try:
            store.csr(kind).check(full=True)
        except ValueError as exc:
            problems.append(str(exc))
    if problems:  # the cross-checks below assume well-formed CSR arrays
        return CheckOutcome("graph_invariants", False, "; ".join(problems[:10]))
    problems += _direction_problems(store)
    counts = np.diff(store.array("mesh2art_indptr"))
    if not np.array_equal(counts, store.array("mesh_article_count")):
        problems.append("mesh_article_count differs from mesh2art_indptr")
    rows = np.repeat(np.arange(n_desc), counts)
    majors = np.bincount(rows[store.array("mesh2art_major")], minlength=n_desc)
    if not np.array_equal(majors, store.array("mesh_major_count")):
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


def _title_problems(store: KGStore) -> list[str]:
    """The title store's shape: n + 1 offsets ascending from 0 to the bytes' end, a null
    flag per article and no bytes for a null title, every title valid UTF-8."""
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
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        for start in range(0, data.size, 1 << 26):  # bounded memory on a 10M-article graph
            decoder.decode(memoryview(data[start : start + (1 << 26)]), final=False)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as error:
        return [f"title_bytes is not UTF-8 ({error})"]
    return []


def _direction_problems(store: KGStore) -> list[str]:
    """Each edge stored twice must be the same edge: compare degree and major counts."""
    problems = []
    n, n_desc = store.n_articles, store.n_descriptors
    for fwd, rev, n_rev in (("cite", "cited_by", n), ("mesh2art", "art2mesh", n_desc)):
        n_fwd_rows = store.array(f"{rev}_indptr").size - 1
        from_fwd = np.bincount(store.array(f"{fwd}_indices"), minlength=n_fwd_rows)
        if not np.array_equal(from_fwd, np.diff(store.array(f"{rev}_indptr"))):
            problems.append(f"{fwd} and {rev} disagree on degrees")
        from_rev = np.bincount(store.array(f"{rev}_indices"), minlength=n_rev)
        if not np.array_equal(from_rev, np.diff(store.array(f"{fwd}_indptr"))):
            problems.append(f"{rev} and {fwd} disagree on degrees")
    a2m = store.array("art2mesh_indices")
    majors_by_desc = np.bincount(a2m[store.array("art2mesh_major")], minlength=n_desc)
    if not np.array_equal(majors_by_desc, store.array("mesh_major_count")):
        problems.append("art2mesh_major and mesh2art_major disagree")
    return problems


# -- recount from DuckDB ------------------------------------------------------------------

_MAJOR = "(descriptor_major OR coalesce(qualifier_major, false))"


def _seed(build_id: str) -> int:
    return int(hashlib.sha256(build_id.encode()).hexdigest()[:8], 16)


def _totals(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    row = con.execute(
        f"""
        WITH cit AS (
            SELECT citing_pmid, cited_pmid FROM citations
            WHERE citing_pmid IN (SELECT pmid FROM articles)
              AND cited_pmid IN (SELECT pmid FROM articles)
        ), pairs AS (
            SELECT pmid, descriptor_ui, bool_or({_MAJOR}) AS major FROM mesh_edges
            WHERE pmid IN (SELECT pmid FROM articles) GROUP BY pmid, descriptor_ui
        )
        SELECT
            (SELECT count(*) FROM articles),
            (SELECT count(*) FROM articles WHERE has_abstract),
            (SELECT count(*) FROM (SELECT DISTINCT citing_pmid, cited_pmid FROM cit)),
            (SELECT count(*) FROM citations) - (SELECT count(*) FROM cit),
            (SELECT count(*) FROM pairs),
            (SELECT count(*) FROM pairs WHERE major),
            (SELECT count(DISTINCT descriptor_ui) FROM pairs),
            (SELECT count(*) FROM articles WHERE pmid IN (
                SELECT pmid FROM corrections WHERE ref_type = '{layout.RETRACTION_REF_TYPE}'
                UNION SELECT pmid FROM pubtypes WHERE name = '{layout.RETRACTED_PUBTYPE}')),
            (SELECT count(*) FROM articles WHERE pmid IN (
                SELECT pmid FROM corrections WHERE ref_type = '{layout.CONCERN_REF_TYPE}'))
        """
    ).fetchone()
    names = (
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
    return dict(zip(names, (int(v) for v in row), strict=True))


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


def recount(
    store: KGStore,
    con: duckdb.DuckDBPyConnection,
    sample: int = 100,
    named_pmids: tuple[int, ...] = (),
    named_uis: tuple[str, ...] = (),
) -> CheckOutcome:
    """Recount totals, ``sample`` random descriptors and articles and the named ones (plus
    the largest descriptor and the articles of highest out- and in-degree; named descriptors
    the build lacks are counted, not failed: a small corpus need not hold them) from views
    ``articles``, ``citations``, ``mesh_edges``, ``corrections``, ``pubtypes``."""
    rng = np.random.default_rng(_seed(store.build_id))
    mismatches: list[str] = []
    sql_totals, arr_totals = _totals(con), _store_totals(store)
    for name, expected in sql_totals.items():
        if arr_totals[name] != expected:
            mismatches.append(f"{name}: arrays {arr_totals[name]}, DuckDB {expected}")

    # descriptors: random annotated ones, the largest, and the named ones
    counts = store.array("mesh_article_count")
    annotated = np.flatnonzero(counts)
    chosen = set(rng.choice(annotated, min(sample, annotated.size), replace=False).tolist())
    if annotated.size:
        chosen.add(int(np.argmax(counts)))
    named_here = []
    for ui in named_uis:  # a handful of names, not rows
        with contextlib.suppress(KeyError):
            chosen.add(store.desc_idx(ui))
            named_here.append(ui)
    ds = sorted(chosen)
    uis = [store.mesh_ui(d) for d in ds]
    sql = dict.fromkeys(uis, (0, 0))
    for ui, n_art, n_major in con.execute(
        f"""SELECT descriptor_ui, count(DISTINCT pmid),
                   count(DISTINCT pmid) FILTER (WHERE {_MAJOR})
            FROM mesh_edges WHERE descriptor_ui IN (SELECT unnest(?))
              AND pmid IN (SELECT pmid FROM articles)
            GROUP BY descriptor_ui""",
        [uis],
    ).fetchall():
        sql[ui] = (int(n_art), int(n_major))
    for d, ui in zip(ds, uis, strict=True):
        got = (store.articles_of(d).size, store.articles_of(d, major_only=True).size)
        if got != sql[ui] or int(counts[d]) != got[0]:
            mismatches.append(f"descriptor {ui}: arrays {got}, DuckDB {sql[ui]}")

    # articles: random ones, highest out/in degree, and the named ones
    n = store.n_articles
    picked = set(rng.choice(n, min(sample, n), replace=False).tolist()) if n else set()
    if n:
        picked.add(int(np.argmax(np.diff(store.array("cite_indptr")))))
        picked.add(int(np.argmax(np.diff(store.array("cited_by_indptr")))))
    picked |= {store.idx(p) for p in named_pmids}
    idxs = sorted(picked)
    pmids = [store.pmid(i) for i in idxs]
    sql_deg: dict[int, tuple] = dict.fromkeys(pmids, ((), 0, ()))
    for pmid, cited, in_deg, uis_of in con.execute(
        """WITH s AS (SELECT unnest(?) AS pmid),
                c AS (SELECT DISTINCT citing_pmid, cited_pmid FROM citations
                      WHERE citing_pmid IN (SELECT pmid FROM articles)
                        AND cited_pmid IN (SELECT pmid FROM articles))
           SELECT s.pmid,
                  (SELECT list(cited_pmid ORDER BY cited_pmid) FROM c WHERE c.citing_pmid = s.pmid),
                  (SELECT count(*) FROM c WHERE c.cited_pmid = s.pmid),
                  (SELECT list(DISTINCT descriptor_ui ORDER BY descriptor_ui)
                   FROM mesh_edges m WHERE m.pmid = s.pmid)
           FROM s""",
        [pmids],
    ).fetchall():
        sql_deg[int(pmid)] = (tuple(cited or ()), int(in_deg), tuple(uis_of or ()))
    mismatches += _title_mismatches(store, con, pmids)
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

    meta: dict[str, int | float | str] = {
        "descriptors_recounted": len(ds),
        "articles_recounted": len(idxs),
        "named_descriptors_absent": len(named_uis) - len(named_here),
        "mismatches": len(mismatches),
        **{f"duckdb_{k}": v for k, v in sql_totals.items()},
    }
    if mismatches:
        return CheckOutcome("graph_recount", False, "; ".join(mismatches[:10]), meta)
    return CheckOutcome(
        "graph_recount",
        True,
        f"totals, {len(ds)} descriptors and {len(idxs)} articles agree with DuckDB",
        meta,
    )
