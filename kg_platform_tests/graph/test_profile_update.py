"""corpus_profile after an incremental fold: made from the last profile's per-article rows and
the PMIDs the fold touched (graph/profile.article_rows_since), materialised through the real
asset on a real instance, against the profile of every row of the same corpus, on a synthetic
release whose update files revise, re-version, retract and delete records; and what makes it
read every row."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow as pa
import pytest

from kg_platform.assets.graph import corpus_profile
from kg_platform.graph.profile import (
    PROFILE_ROWS,
    ROW_COLUMNS,
    ROWS,
    article_rows,
    article_rows_since,
    profile_corpus,
)
from kg_platform.pubmed.fold import FULL_FOLD_ENV, fold_release
from kg_platform.resources.lake import LakeResource
from kg_platform.storage.catalog import Catalog
from kg_platform.storage.lake import Lake
from kg_platform_tests.support.fold import (
    load_tables,
    synthetic,  # noqa: F401 (a fixture)
)

REPORT = "reports/corpus_profile/profile.json"


def corpus(con, articles: list[tuple], citations: list[tuple], mesh: list[int]) -> None:
    """The views the profile reads, as tables: articles (pmid, year, has_abstract)."""
    con.execute(
        "CREATE OR REPLACE TABLE articles (pmid BIGINT, year INTEGER, has_abstract BOOLEAN);"
        "CREATE OR REPLACE TABLE citations (citing_pmid BIGINT, cited_pmid BIGINT);"
        "CREATE OR REPLACE TABLE mesh_edges (pmid BIGINT)"
    )
    con.executemany("INSERT INTO articles VALUES (?, ?, ?)", articles)
    con.executemany("INSERT INTO citations VALUES (?, ?)", citations)
    con.executemany("INSERT INTO mesh_edges VALUES (?)", [(m,) for m in mesh])


def test_untouched_articles_citing_one_that_came_or_went() -> None:
    """Worked by hand: 5 is deleted (went), 6 is added (came), 4 is revised, 8 is a
    DeleteCitation of a PMID the corpus never held. Untouched 1 cites 6 (+1 in corpus),
    untouched 2 cites 5 (-1), untouched 3 cites both (no change)."""
    con = duckdb.connect()
    before = [(1, 2001, True), (2, 2002, True), (3, 2003, False), (4, 2004, True), (5, 2005, True)]
    corpus(con, before, [(1, 2), (1, 6), (1, 7), (2, 5), (3, 5), (3, 6), (4, 1)], [1, 2])
    article_rows(con)
    previous = con.execute(f"SELECT {ROW_COLUMNS} FROM {ROWS}").to_arrow_table()
    after = [*before[:3], (4, 2014, False), (6, 2016, True)]
    changed = [(1, 2), (1, 6), (1, 7), (2, 5), (3, 5), (3, 6), (4, 6), (4, 2), (6, 1)]
    corpus(con, after, changed, [1, 2, 6])
    touched = pa.table({"pmid": pa.array([4, 5, 6, 8], pa.int64())})
    assert article_rows_since(con, previous, touched) == {"touched": 4, "came": 1, "went": 1}
    got = con.execute(f"SELECT {ROW_COLUMNS} FROM {ROWS} ORDER BY pmid").fetchall()
    assert got == [
        (1, 2001, True, 3, 2, True),
        (2, 2002, True, 1, 0, True),
        (3, 2003, False, 2, 1, False),
        (4, 2014, False, 2, 2, False),
        (6, 2016, True, 1, 1, True),
    ]
    article_rows(con)
    assert con.execute(f"SELECT {ROW_COLUMNS} FROM {ROWS} ORDER BY pmid").fetchall() == got


def every_row(lake: Lake) -> tuple[dict, list[tuple]]:
    """The profile of every corpus row and its per-article rows, sorted by PMID."""
    catalog = Catalog(lake)
    con = catalog.connect()
    try:
        catalog.refresh_views(con)
        profile = json.loads(json.dumps(profile_corpus(con).to_json()))
        article_rows(con)
        rows = con.execute(f"SELECT {ROW_COLUMNS} FROM {ROWS} ORDER BY pmid").fetchall()
    finally:
        con.close()
    return profile, rows


def sorted_rows(table: pa.Table) -> list[tuple]:
    by_pmid = table.sort_by("pmid").to_pylist()
    return [tuple(row[c] for c in ROW_COLUMNS.split(", ")) for row in by_pmid]


@pytest.fixture
def release(synthetic, tmp_path: Path):  # noqa: F811 (the fixture imported above)
    """(the release's lake, its file names, a materialise-the-profile function)."""
    root = Lake(str(tmp_path / "lake"))
    names = load_tables(root, synthetic[0])
    release = names[0][:8]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("pubmed_releases", [release])

        def profiled() -> dict:
            result = dg.materialize(
                [corpus_profile],
                partition_key=release,
                instance=instance,
                resources={"lake": LakeResource(root=root.root)},
            )
            assert result.success
            meta = result.asset_materializations_for_node("corpus_profile")[0].metadata
            return {k: v.value for k, v in meta.items() if k.startswith("profiled")}

        # the folders the asset reads and writes (assets/partitions.scope_for)
        yield root.scoped(release=release, report=release), names, profiled


def test_each_update_profile_is_the_profile_of_every_row(release) -> None:
    lake, names, profiled = release
    fold_release(lake, names[:3])
    assert profiled() == {
        "profiled": f"full: {lake.path(PROFILE_ROWS)}: missing (no profile kept its rows before)"
    }
    rows_before = len(every_row(lake)[1])
    came = went = 0
    for n in range(4, len(names) + 1):
        result = fold_release(lake, names[:n])
        assert result.mode == "incremental"
        meta = profiled()
        assert meta["profiled"] == (
            f"update: the last profile's {rows_before} rows and the {result.touched_pmids} "
            "PMIDs the fold touched"
        )
        assert meta["profiled_touched"] == result.touched_pmids
        profile, rows = every_row(lake)
        assert json.loads(lake.read_bytes(REPORT)) == profile
        assert sorted_rows(lake.read_parquet(PROFILE_ROWS)) == rows
        assert len(rows) == result.rows["articles"] == profile["articles"]
        assert len(rows) - rows_before == meta["profiled_came"] - meta["profiled_went"]
        came, went = came + meta["profiled_came"], went + meta["profiled_went"]
        rows_before = len(rows)
    # articles came and went, so untouched articles' in-corpus references moved both ways
    assert came > 0 and went > 0


def test_what_makes_the_profile_read_every_row(release, monkeypatch) -> None:
    lake, names, profiled = release
    fold_release(lake, names[:3])
    profiled()
    monkeypatch.setenv(FULL_FOLD_ENV, "1")
    fold_release(lake, names[:4])
    assert profiled()["profiled"] == "full: the corpus was not folded incrementally (mode 'full')"
    monkeypatch.delenv(FULL_FOLD_ENV)
    # two folds since the last profile: the second started from a corpus it did not read
    assert fold_release(lake, names[:5]).mode == "incremental"
    assert fold_release(lake, names[:6]).mode == "incremental"
    meta = profiled()
    assert meta["profiled"] == (
        "full: the last profile read another corpus articles table than the fold replaced"
    )
    profile, rows = every_row(lake)
    assert json.loads(lake.read_bytes(REPORT)) == profile
    assert sorted_rows(lake.read_parquet(PROFILE_ROWS)) == rows
