"""Corpus profile: how much of the citation graph a corpus keeps, and what its decades hold.

Sizes the corpus before anyone trusts the graph: a recent slice of PubMed cites mostly
articles outside it (the reference found a recent quarter keeps only 28.1% of its citation
edges), so in-corpus retention is reported overall and for the most recent slices.
"""

from __future__ import annotations

import base64
import io
import json
import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import duckdb

from kg_platform.storage.reports import PROFILE_INPUTS, PROFILE_ROWS

if TYPE_CHECKING:  # the evaluation reports import this module for its figures only
    import pyarrow as pa

    from kg_platform.storage.lake import Lake

SLICES = (("most recent 1/8", 0.125), ("most recent 1/4", 0.25), ("most recent 1/2", 0.5))


@dataclass(frozen=True)
class RetentionSlice:
    label: str
    fraction: float
    articles: int
    earliest_year: int | None
    reference_rows: int
    in_corpus_rows: int
    retention: float


@dataclass(frozen=True)
class DecadeRow:
    decade: str  # "1990s", or "unknown" for articles without a year
    articles: int
    share_with_mesh: float
    share_with_abstract: float
    mean_references: float


@dataclass(frozen=True)
class CorpusProfile:
    articles: int
    reference_rows: int
    in_corpus_rows: int
    retention: float
    slices: tuple[RetentionSlice, ...]
    decades: tuple[DecadeRow, ...]

    def to_json(self) -> dict:
        return asdict(self)


def profile_corpus(con: duckdb.DuckDBPyConnection) -> CorpusProfile:
    """Profile the corpus behind DuckDB views ``articles``, ``citations``, ``mesh_edges``.

    Retention counts reference rows (one per ReferenceList entry with a PMID) whose cited
    PMID is a corpus article; slices take the most recent records by year (PMID breaks ties,
    articles without a year count as oldest)."""
    article_rows(con)
    profile = summarise(con)
    con.execute(f"DROP TABLE {ROWS}")
    return profile


# the profile's rows, one per corpus article: what every figure is summed from
ROWS = "profile_articles"
ROW_COLUMNS = "pmid, year, has_abstract, n_refs, n_in, has_mesh"


def article_rows(con: duckdb.DuckDBPyConnection) -> None:
    """The temporary table ROWS from every row of the corpus: per article its year, whether
    it has an abstract and MeSH, its reference rows and those citing a corpus article."""
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {ROWS} AS
        WITH refs AS (
            SELECT citing_pmid AS pmid, count(*) AS n_refs,
                   count(*) FILTER (WHERE cited_pmid IN (SELECT pmid FROM articles)) AS n_in
            FROM citations GROUP BY citing_pmid
        ), mesh AS (SELECT DISTINCT pmid FROM mesh_edges)
        SELECT a.pmid, a.year, a.has_abstract,
               coalesce(r.n_refs, 0) AS n_refs, coalesce(r.n_in, 0) AS n_in,
               m.pmid IS NOT NULL AS has_mesh
        FROM articles a LEFT JOIN refs r USING (pmid) LEFT JOIN mesh m USING (pmid)
        """
    )


def article_rows_from_parts(con: duckdb.DuckDBPyConnection, lake: Lake) -> None:
    """The temporary table ROWS, the rows ``article_rows`` makes (in the parts' order), made from
    the corpus parts bucket by bucket on a thread per core: every table's part of a bucket
    holds the rows of that bucket's PMIDs (storage/corpus), so an article's reference rows,
    those citing a corpus article and its MeSH rows are counted by position in the bucket
    (numpy bincount) instead of hashed by PMID."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import pyarrow as pa

    from kg_platform.pubmed.fold.base import PmidSet
    from kg_platform.pubmed.fold.recount import int_column, on_cores, read_columns
    from kg_platform.settings import usable_cores
    from kg_platform.storage.corpus import (
        PMID_BUCKET,
        bucket_bounds,
        corpus_parts,
        part_bucket,
        part_key,
        required_parts,
    )

    parts = required_parts(lake, "articles")
    held = {t: set(corpus_parts(lake, t)) for t in ("citations", "mesh_edges")}
    articles = on_cores(
        lambda key: read_columns(lake, key, ["pmid", "year", "has_abstract"]), parts
    )
    corpus = PmidSet(
        np.concatenate([int_column(a, "pmid") for a in articles]) if articles else np.zeros(0)
    )

    def offsets(key: str, table: pa.Table, column: str, lo: int) -> np.ndarray:
        """Each row's PMID less the bucket's first (a ValueError naming the part for a PMID
        outside its bucket)."""
        at = int_column(table, column) - lo
        if len(at) and (int(at.min()) < 0 or int(at.max()) >= PMID_BUCKET):
            raise ValueError(f"{lake.path(key)}: a {column} outside the part's PMID bucket")
        return at

    def rows(item: tuple[str, pa.Table]) -> pa.Table:
        key, table = item
        bucket = part_bucket(key)
        lo = bucket_bounds(bucket)[0]
        at = offsets(key, table, "pmid", lo)
        refs = inside = mesh = np.zeros(PMID_BUCKET, dtype=np.int64)
        if (cites := part_key("citations", bucket)) in held["citations"]:
            citations = read_columns(lake, cites, ["citing_pmid", "cited_pmid"])
            citing = offsets(cites, citations, "citing_pmid", lo)
            refs = np.bincount(citing, minlength=PMID_BUCKET)
            cited = corpus.contains(int_column(citations, "cited_pmid"))
            inside = np.bincount(citing[cited], minlength=PMID_BUCKET)
        if (heads := part_key("mesh_edges", bucket)) in held["mesh_edges"]:
            mesh_edges = read_columns(lake, heads, ["pmid"])
            mesh = np.bincount(offsets(heads, mesh_edges, "pmid", lo), minlength=PMID_BUCKET)
        return pa.table(
            {
                "pmid": table.column("pmid"),
                "year": table.column("year"),
                "has_abstract": table.column("has_abstract"),
                "n_refs": pa.array(refs[at], pa.int64()),
                "n_in": pa.array(inside[at], pa.int64()),
                "has_mesh": pa.array(mesh[at] > 0),
            }
        )

    items = list(zip(parts, articles, strict=True))
    with ThreadPoolExecutor(max_workers=max(1, min(usable_cores(), len(items)))) as pool:
        # each part's rows into the table as it comes (in order), then let go: the rows are
        # held once, by DuckDB, not also whole as Arrow
        for n, made in enumerate(pool.map(rows, items)):
            con.register("profile_made", made)
            try:
                con.execute(
                    f"CREATE OR REPLACE TEMP TABLE {ROWS} AS SELECT * FROM profile_made"
                    if n == 0
                    else f"INSERT INTO {ROWS} SELECT * FROM profile_made"
                )
            finally:
                con.unregister("profile_made")


def article_rows_since(
    con: duckdb.DuckDBPyConnection, previous: pa.Table, touched: pa.Table
) -> dict[str, int]:
    """The temporary table ROWS from the rows of the profile before (``previous``, of the
    corpus the last fold started from) and what the fold changed (``touched``: every PMID
    with a record or a DeleteCitation in the new files), equal to ``article_rows``: the
    touched PMIDs' rows are made again from the corpus as it is; every other article's
    record is the one it had, so its rows stand, but for the reference rows citing an
    article that came (+1) or went (-1), found in one scan of the citations. Returns the
    touched, came and went counts."""
    con.register("profile_previous", previous)
    con.register("profile_touched", touched.select(["pmid"]))
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE profile_changed AS
        WITH t AS (SELECT pmid FROM profile_touched),
        refs AS (
            SELECT citing_pmid AS pmid, count(*) AS n_refs,
                   count(*) FILTER (WHERE cited_pmid IN (SELECT pmid FROM articles)) AS n_in
            FROM citations WHERE citing_pmid IN (SELECT pmid FROM t) GROUP BY citing_pmid
        ), mesh AS (SELECT DISTINCT pmid FROM mesh_edges WHERE pmid IN (SELECT pmid FROM t))
        SELECT a.pmid, a.year, a.has_abstract,
               coalesce(r.n_refs, 0) AS n_refs, coalesce(r.n_in, 0) AS n_in,
               m.pmid IS NOT NULL AS has_mesh
        FROM articles a LEFT JOIN refs r USING (pmid) LEFT JOIN mesh m USING (pmid)
        WHERE a.pmid IN (SELECT pmid FROM t);
        CREATE OR REPLACE TEMP TABLE profile_was AS
        SELECT pmid FROM profile_previous WHERE pmid IN (SELECT pmid FROM profile_touched);
        CREATE OR REPLACE TEMP TABLE profile_moved AS
        SELECT pmid, 1::BIGINT AS d FROM profile_changed
        WHERE pmid NOT IN (SELECT pmid FROM profile_was)
        UNION ALL
        SELECT pmid, -1::BIGINT AS d FROM profile_was
        WHERE pmid NOT IN (SELECT pmid FROM profile_changed);
        CREATE OR REPLACE TEMP TABLE profile_shift AS
        SELECT c.citing_pmid AS pmid, sum(m.d) AS shift
        FROM citations c JOIN profile_moved m ON c.cited_pmid = m.pmid
        WHERE c.citing_pmid NOT IN (SELECT pmid FROM profile_touched)
        GROUP BY c.citing_pmid;
        CREATE OR REPLACE TEMP TABLE {ROWS} AS
        SELECT p.pmid, p.year, p.has_abstract, p.n_refs,
               CAST(p.n_in + coalesce(s.shift, 0) AS BIGINT) AS n_in, p.has_mesh
        FROM profile_previous p LEFT JOIN profile_shift s USING (pmid)
        WHERE p.pmid NOT IN (SELECT pmid FROM profile_touched)
        UNION ALL SELECT {ROW_COLUMNS} FROM profile_changed;
        """
    )
    came, went = con.execute(
        "SELECT count(*) FILTER (WHERE d = 1), count(*) FILTER (WHERE d = -1) FROM profile_moved"
    ).fetchone()
    for table in ("profile_changed", "profile_was", "profile_moved", "profile_shift"):
        con.execute(f"DROP TABLE {table}")
    con.unregister("profile_previous")
    con.unregister("profile_touched")
    return {"touched": touched.num_rows, "came": int(came), "went": int(went)}


def summarise(con: duckdb.DuckDBPyConnection) -> CorpusProfile:
    """The profile's figures from the temporary table ROWS."""
    total, refs, inside = con.execute(
        f"SELECT count(*), coalesce(sum(n_refs), 0), coalesce(sum(n_in), 0) FROM {ROWS}"
    ).fetchone()
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE profile_recency AS
            SELECT year, n_refs, n_in,
                   row_number() OVER (ORDER BY year DESC NULLS LAST, pmid DESC) AS recency
            FROM {ROWS}"""
    )
    slices = []
    for label, fraction in SLICES:
        limit = math.ceil(total * fraction)
        n, earliest, s_refs, s_in = con.execute(
            """SELECT count(*), min(year), coalesce(sum(n_refs), 0), coalesce(sum(n_in), 0)
               FROM profile_recency WHERE recency <= ?""",
            [limit],
        ).fetchone()
        slices.append(
            RetentionSlice(
                label, fraction, int(n), earliest, int(s_refs), int(s_in), _ratio(s_in, s_refs)
            )
        )
    con.execute("DROP TABLE profile_recency")
    decades = [
        DecadeRow(
            f"{int(decade)}s" if decade is not None else "unknown",
            int(n),
            float(mesh),
            float(abstract),
            float(mean_refs),
        )
        for decade, n, mesh, abstract, mean_refs in con.execute(
            f"""SELECT (year // 10) * 10 AS decade, count(*),
                      avg(has_mesh::INT), avg(coalesce(has_abstract, false)::INT), avg(n_refs)
               FROM {ROWS} GROUP BY decade ORDER BY decade NULLS LAST"""
        ).fetchall()
    ]
    return CorpusProfile(
        int(total), int(refs), int(inside), _ratio(inside, refs), tuple(slices), tuple(decades)
    )


# -- an update's profile: the rows before and the fold's change ---------------------------
# beside the report: the profile's rows and the corpus tables they were made from (their
# corpus_fingerprint, what an incremental fold records of the corpus it replaced as base_inputs)
PROFILED_TABLES = ("articles", "citations", "mesh_edges")


def profile_inputs(lake: Lake) -> dict[str, dict]:
    """The fingerprints of the corpus tables a profile reads (taken before reading them):
    storage/corpus.corpus_fingerprint, what the fold records of the tables it replaced."""
    from kg_platform.storage.corpus import corpus_fingerprint

    return {t: corpus_fingerprint(lake, t) for t in PROFILED_TABLES}


@dataclass(frozen=True)
class ProfileDelta:
    previous: pa.Table  # the last profile's rows
    touched: pa.Table  # the PMIDs the last fold touched


def profile_delta(lake: Lake) -> tuple[ProfileDelta | None, str]:
    """What lets the profile be made from the last one and the last fold's change, or None;
    and why. Only when the fold was incremental from exactly the corpus tables the last
    profile read: otherwise the profile reads every row."""
    import pyarrow as pa

    from kg_platform.graph.change import incremental_fold_base
    from kg_platform.pubmed.fold import FOLD_TOUCHED

    for key in (PROFILE_ROWS, PROFILE_INPUTS):
        if not lake.exists(key):
            return None, f"{lake.path(key)}: missing (no profile kept its rows before)"
    base, why = incremental_fold_base(lake)
    if base is None:
        return None, why
    try:
        profiled = json.loads(lake.read_bytes(PROFILE_INPUTS))
    except ValueError as exc:
        raise ValueError(f"{lake.path(PROFILE_INPUTS)}: not JSON ({exc})") from exc
    for table in PROFILED_TABLES:
        if profiled.get(table) != base.get(table):
            return (
                None,
                f"the last profile read another corpus {table} table than the fold replaced",
            )
    if not lake.exists(FOLD_TOUCHED):
        return None, f"{lake.path(FOLD_TOUCHED)}: missing"
    try:
        previous = lake.read_parquet(PROFILE_ROWS)
        touched = lake.read_parquet(FOLD_TOUCHED, columns=["pmid"])
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"{lake.path(PROFILE_ROWS)} or the fold's touched PMIDs: {exc}") from exc
    if previous.column_names != ROW_COLUMNS.split(", "):
        return None, f"{lake.path(PROFILE_ROWS)}: columns {previous.column_names}"
    return ProfileDelta(previous, touched), (
        f"the last profile's {previous.num_rows} rows and the {touched.num_rows} PMIDs the "
        "fold touched"
    )


def _ratio(part: int, whole: int) -> float:
    return round(part / whole, 6) if whole else 0.0


def render_markdown(profile: CorpusProfile, png: bytes | None = None) -> str:
    """Markdown report; the plot is embedded inline as a ``data:image/png;base64`` URI (the
    Dagster UI cannot load relative image files). ``png`` is the plot written beside the
    report; rendered with ``render_png`` when not given."""
    if png is None:
        png = render_png(profile)
    lines = [
        "# Corpus profile",
        "",
        f"{profile.articles:,} articles; {profile.reference_rows:,} reference rows, of which "
        f"{profile.in_corpus_rows:,} cite a corpus article: **in-corpus retention "
        f"{profile.retention:.1%}**.",
        "",
        "## Citation retention by recency",
        "",
        "| slice | articles | from year | reference rows | in corpus | retention |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        f"| whole corpus | {profile.articles:,} | | {profile.reference_rows:,} | "
        f"{profile.in_corpus_rows:,} | {profile.retention:.1%} |",
    ]
    for s in profile.slices:
        lines.append(
            f"| {s.label} | {s.articles:,} | {s.earliest_year or ''} | {s.reference_rows:,} | "
            f"{s.in_corpus_rows:,} | {s.retention:.1%} |"
        )
    lines += [
        "",
        "## Per decade",
        "",
        "| decade | articles | with MeSH | with abstract | mean references |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for d in profile.decades:
        lines.append(
            f"| {d.decade} | {d.articles:,} | {d.share_with_mesh:.1%} | "
            f"{d.share_with_abstract:.1%} | {d.mean_references:.2f} |"
        )
    lines += ["", f"![articles per decade and retention by slice]({png_data_uri(png)})", ""]
    return "\n".join(lines)


def png_data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def new_figure(width: float, height: float):
    """A matplotlib figure at 100 dpi drawn off screen (the Agg backend: steps run headless)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100)


def figure_png(figure) -> bytes:
    """A matplotlib figure laid out tight, as PNG bytes without the Software stamp (the
    same plot gives the same bytes whatever matplotlib wrote it)."""
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def render_png(profile: CorpusProfile) -> bytes:
    """PNG plot; deterministic (no Software metadata) so re-rendering yields the same bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.bar([d.decade for d in profile.decades], [d.articles for d in profile.decades])
    left.set_title("articles per decade")
    left.tick_params(axis="x", rotation=45)
    labels = ["all"] + [s.label.replace("most recent ", "") for s in profile.slices]
    values = [profile.retention] + [s.retention for s in profile.slices]
    right.bar(labels, [100 * v for v in values], color="tab:orange")
    right.set_ylim(0, 100)
    right.set_ylabel("% of reference rows citing a corpus article")
    right.set_title("in-corpus citation retention")
    png = figure_png(fig)  # at the figure's dpi, pyplot's default 100
    plt.close(fig)
    return png


def render_json(profile: CorpusProfile) -> bytes:
    return json.dumps(profile.to_json(), indent=1).encode()
