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

import duckdb

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
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE profile_articles AS
        WITH refs AS (
            SELECT citing_pmid AS pmid, count(*) AS n_refs,
                   count(*) FILTER (WHERE cited_pmid IN (SELECT pmid FROM articles)) AS n_in
            FROM citations GROUP BY citing_pmid
        ), mesh AS (SELECT DISTINCT pmid FROM mesh_edges)
        SELECT a.pmid, a.year, a.has_abstract,
               coalesce(r.n_refs, 0) AS n_refs, coalesce(r.n_in, 0) AS n_in,
               m.pmid IS NOT NULL AS has_mesh,
               row_number() OVER (ORDER BY a.year DESC NULLS LAST, a.pmid DESC) AS recency
        FROM articles a LEFT JOIN refs r USING (pmid) LEFT JOIN mesh m USING (pmid)
        """
    )
    total, refs, inside = con.execute(
        "SELECT count(*), coalesce(sum(n_refs), 0), coalesce(sum(n_in), 0) FROM profile_articles"
    ).fetchone()
    slices = []
    for label, fraction in SLICES:
        limit = math.ceil(total * fraction)
        n, earliest, s_refs, s_in = con.execute(
            """SELECT count(*), min(year), coalesce(sum(n_refs), 0), coalesce(sum(n_in), 0)
               FROM profile_articles WHERE recency <= ?""",
            [limit],
        ).fetchone()
        slices.append(
            RetentionSlice(
                label, fraction, int(n), earliest, int(s_refs), int(s_in), _ratio(s_in, s_refs)
            )
        )
    decades = [
        DecadeRow(
            f"{int(decade)}s" if decade is not None else "unknown",
            int(n),
            float(mesh),
            float(abstract),
            float(mean_refs),
        )
        for decade, n, mesh, abstract, mean_refs in con.execute(
            """SELECT (year // 10) * 10 AS decade, count(*),
                      avg(has_mesh::INT), avg(coalesce(has_abstract, false)::INT), avg(n_refs)
               FROM profile_articles GROUP BY decade ORDER BY decade NULLS LAST"""
        ).fetchall()
    ]
    con.execute("DROP TABLE profile_articles")
    return CorpusProfile(
        int(total), int(refs), int(inside), _ratio(inside, refs), tuple(slices), tuple(decades)
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
