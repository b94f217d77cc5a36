"""graph_recount of an update's build: the previous published build plus what the last
incremental fold changed (corpus/fold/: the touched PMIDs and the rows they replaced), against
the recount of every row, on the real mirror pair and on a synthetic release with revisions,
Version 2 records, retractions and DeleteCitations; and what makes it count every row."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from kg_platform.graph import layout
from kg_platform.graph.build import GraphInputError, build_graph
from kg_platform.graph.checks import TOTALS, CheckOutcome, recount, update_delta
from kg_platform.graph.store import KGStore
from kg_platform.pubmed.fold import (
    FOLD_MANIFEST,
    FOLD_TOUCHED,
    FULL_FOLD_ENV,
    fold_release,
    replaced_key,
)
from kg_platform.storage.catalog import Catalog
from kg_platform.storage.lake import Lake
from kg_platform_tests.graph.corpus import mirror_pair_lake, write_mesh_2024
from kg_platform_tests.support import fold as fold_support
from kg_platform_tests.support.fold import load_tables

synthetic = fold_support.synthetic  # the fixture


def recount_both(lake: Lake) -> tuple[KGStore, CheckOutcome, CheckOutcome, str]:
    """Build the graph of the lake's corpus, recount it from every row and, when the delta
    applies, from the published build plus the update; publish it. The store, the full
    recount, the delta one (the full one again when no delta applies) and why."""
    published = layout.current_build_id(lake) if lake.exists(layout.CURRENT_POINTER) else None
    build = build_graph(lake)
    store = KGStore.open(lake, build.build_id)
    delta, reason = update_delta(lake, published, store)
    catalog = Catalog(lake)
    con = catalog.connect()
    try:
        catalog.refresh_views(con)
        full = recount(store, con, named_uis=("D006801",))
        by_delta = recount(store, con, named_uis=("D006801",), delta=delta)
    finally:
        con.close()
    assert full.passed, full.details
    layout.publish(lake, build.build_id)
    return store, full, by_delta, reason


def assert_same_totals(full: CheckOutcome, by_delta: CheckOutcome) -> dict[str, int]:
    assert by_delta.passed, by_delta.details
    assert by_delta.metadata["mode"] == "update"
    totals = {k: by_delta.metadata[f"duckdb_{k}"] for k in TOTALS}
    assert totals == {k: full.metadata[f"duckdb_{k}"] for k in TOTALS}
    return totals


def test_the_mirror_update_is_recounted_from_the_baseline_build(tmp_path: Path) -> None:
    """The baseline file's build, then the update file folded in: the delta's totals are
    the ones worked out from the XML by hand (test_real_pubmed: 60 articles, 1 citation
    edge and 1,348 dangling rows, 300 pairs over 200 descriptors, 104 major)."""
    lake, names = mirror_pair_lake(tmp_path)
    fold_release(lake, names[:1])
    first, _, same, reason = recount_both(lake)
    assert (reason, same.metadata["mode"]) == ("no graph build was published before", "full")

    fold_release(lake, names)
    store, full, by_delta, reason = recount_both(lake)
    assert reason == f"graph build {first.build_id} and the 36 PMIDs the fold touched"
    assert assert_same_totals(full, by_delta) == {
        "articles": 60,
        "quotable": 56,
        "citation_edges": 1,
        "dangling_citations": 1348,
        "mesh_pairs": 300,
        "major_pairs": 104,
        "annotated_descriptors": 200,
        "retracted": 0,
        "concern": 0,
    }
    # the 30 records of the update are its touched articles (its 6 DeleteCitations name
    # PMIDs in neither file); every descriptor either build annotates is compared
    assert by_delta.metadata["touched_articles"] == 30
    assert by_delta.metadata["descriptors_recounted"] == 200
    assert by_delta.metadata["articles_recounted"] == 60
    assert by_delta.details == (
        f"totals and 200 descriptors as graph build {first.build_id} plus the update, "
        f"and 60 articles (30 touched) agree with DuckDB"
    )
    assert store.n_articles == 60


def synthetic_lake(synthetic: tuple[list[Path], Path], tmp_path: Path) -> tuple[Lake, list[str]]:
    lake = Lake(str(tmp_path / "lake"))
    write_mesh_2024(lake)
    return lake, load_tables(lake, synthetic[0])


def test_each_synthetic_update_is_recounted_from_the_build_before_it(
    synthetic: tuple[list[Path], Path], tmp_path: Path
) -> None:
    """Each update file folded in and the graph rebuilt: the delta recount passes with the
    totals of the recount of every row, and PMIDs did come and go."""
    lake, names = synthetic_lake(synthetic, tmp_path)
    fold_release(lake, names[:3])
    previous, _, _, _ = recount_both(lake)
    came = went = 0
    for n in range(4, len(names) + 1):
        result = fold_release(lake, names[:n])
        assert result.mode == "incremental"
        store, full, by_delta, reason = recount_both(lake)
        assert reason == (
            f"graph build {previous.build_id} and the {result.touched_pmids} PMIDs the fold touched"
        )
        totals = assert_same_totals(full, by_delta)
        assert totals["articles"] == result.rows["articles"] == store.n_articles
        assert totals["dangling_citations"] == result.dangling_citations
        old, new = set(previous.array("pmids").tolist()), set(store.array("pmids").tolist())
        came, went = came + len(new - old), went + len(old - new)
        assert 0 < by_delta.metadata["touched_articles"] <= result.touched_pmids
        previous = store
    assert came > 0 and went > 0


def test_a_pmid_the_fold_did_not_name_fails_the_recount(
    synthetic: tuple[list[Path], Path], tmp_path: Path
) -> None:
    """The fold's touched list without one PMID the update added: the recount names it (and
    the totals it then misses)."""
    lake, names = synthetic_lake(synthetic, tmp_path)
    fold_release(lake, names[:3])
    first, _, _, _ = recount_both(lake)
    fold_release(lake, names[:4])
    touched = lake.read_parquet(FOLD_TOUCHED).column("pmid").to_numpy()
    old = set(first.array("pmids").tolist())
    hidden = min(int(p) for p in touched if int(p) not in old)
    lake.write_parquet(FOLD_TOUCHED, pa.table({"pmid": touched[touched != hidden]}))
    _, full, by_delta, _ = recount_both(lake)
    assert full.passed and not by_delta.passed
    assert by_delta.details.startswith(
        f"1 PMID(s) came or went that the fold did not touch: [{hidden}]"
    )


def test_replaced_rows_that_are_not_the_previous_corpus_fail_the_recount(
    synthetic: tuple[list[Path], Path], tmp_path: Path
) -> None:
    """The replaced MeSH rows without one (pmid, descriptor) pair: that descriptor's count
    differs by one and the check names it."""
    lake, names = synthetic_lake(synthetic, tmp_path)
    fold_release(lake, names[:3])
    recount_both(lake)
    fold_release(lake, names[:4])
    rows = pl.from_arrow(lake.read_parquet(replaced_key("mesh_edges")))
    assert rows.height > 0
    pmid, ui = rows.row(0)[rows.columns.index("pmid")], rows["descriptor_ui"][0]
    kept = rows.filter((pl.col("pmid") != pmid) | (pl.col("descriptor_ui") != ui))
    lake.write_parquet(replaced_key("mesh_edges"), kept.to_arrow())
    _, full, by_delta, _ = recount_both(lake)
    assert full.passed and not by_delta.passed
    assert f"descriptor {ui}: arrays (" in by_delta.details
    assert by_delta.metadata["mismatches"] >= 2  # the descriptor and mesh_pairs


def test_what_makes_the_recount_count_every_row(
    synthetic: tuple[list[Path], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full fold, two folds since the published build, and an unreadable touched list."""
    lake, names = synthetic_lake(synthetic, tmp_path)
    fold_release(lake, names[:3])
    first, _, _, _ = recount_both(lake)
    # two incremental folds with no graph build between: the last one did not start from
    # the corpus the published build read
    fold_release(lake, names[:4])
    fold_release(lake, names[:5])
    _, _, by_delta, reason = recount_both(lake)
    assert reason == (
        f"graph build {first.build_id} read another corpus "
        "articles table than the one the last fold replaced"
    )
    assert by_delta.metadata["mode"] == "full"
    monkeypatch.setenv(FULL_FOLD_ENV, "1")
    fold_release(lake, names)
    _, _, by_delta, reason = recount_both(lake)
    assert reason == "the corpus was not folded incrementally (mode 'full')"
    monkeypatch.delenv(FULL_FOLD_ENV)
    # a touched list that is not Parquet: an error naming the file
    fold_release(lake, names[:3])  # a shorter list: a full fold again
    recount_both(lake)
    fold_release(lake, names[:4])
    published = layout.current_build_id(lake)
    build = build_graph(lake)
    store = KGStore.open(lake, build.build_id)
    lake.write_bytes(FOLD_TOUCHED, b"not parquet")
    with pytest.raises(GraphInputError, match=r"fold/touched\.parquet: not readable as the fold"):
        update_delta(lake, published, store)
    # the published build's pmids changed in place at their size: not a base to count from
    pmids_file = lake.path(layout.array_key(published, "pmids"))
    with open(pmids_file, "r+b") as f:
        f.seek(-4, 2)
        f.write(b"\xff\xff\xff\x7f")
    assert update_delta(lake, published, store) == (
        None,
        f"graph build {published}: pmids differs from its manifest",
    )
    manifest = json.loads(lake.read_bytes(FOLD_MANIFEST))
    assert manifest["mode"] == "incremental" and set(manifest["base_inputs"]) >= {"articles"}
