"""The graph built from two real NLM files (the last 2026 baseline file and the first update
file), folded here by a small independent Polars fold (latest file wins, then the highest
version; a DeleteCitation in a later file removes), with MeSH from the 2024 descriptor TSV.

Expected counts were worked out from the XML by hand (zcat + regular expressions): 30 + 30
records, no PMID in both files, the update's DeleteCitation names 6 PMIDs in neither file,
so 60 articles; 286 + 1,063 = 1,349 reference rows of which one cites a corpus article
(41413049 cites itself); 86 + 214 = 300 headings = 300 (article, descriptor) pairs over 200
descriptors, all in MeSH 2024, 104 pairs major; 56 records have an Abstract (one more has
only an OtherAbstract, which is not the article's own abstract)."""

from __future__ import annotations

import polars as pl
import pytest

from kg_platform.graph.build import build_graph
from kg_platform.graph.checks import check_invariants, recount
from kg_platform.graph.store import KGStore
from kg_platform.storage.catalog import Catalog
from kg_platform.storage.corpus import write_corpus_table
from kg_platform.storage.lake import Lake
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.graph.corpus import write_mesh_2024

parse = pytest.importorskip("kg_platform.pubmed.parse")
FILES = ("baseline/pubmed26n1334.xml.gz", "updatefiles/pubmed26n1335.xml.gz")
CHILDREN = ("mesh_edges", "citations", "corrections", "chemicals", "pubtypes")


def _fold(parsed: list[dict]) -> dict[str, pl.DataFrame]:
    """Latest file, then highest version, wins per PMID; later deletions remove."""
    arts = pl.concat(
        [
            pl.from_arrow(t["articles"]).with_columns(pl.lit(k).alias("_order"))
            for k, t in enumerate(parsed)
        ]
    )
    deleted = pl.concat(
        [
            pl.from_arrow(t["deletions"]).with_columns(pl.lit(k).alias("_del"))
            for k, t in enumerate(parsed)
        ]
    )
    winners = arts.sort(["pmid", "_order", "version"]).group_by("pmid").last()
    winners = winners.join(deleted, on="pmid", how="left").filter(
        pl.col("_del").is_null() | (pl.col("_del") < pl.col("_order"))
    )
    keep = winners.select("pmid", "version", "_order")
    out = {"articles": winners.drop("_order", "_del").sort("pmid")}
    for table in CHILDREN:
        frames = [
            pl.from_arrow(t[table]).with_columns(pl.lit(k).alias("_order"))
            for k, t in enumerate(parsed)
        ]
        pmid = "citing_pmid" if table == "citations" else "pmid"
        rows = pl.concat(frames).join(
            keep.rename({"pmid": pmid}), on=[pmid, "version", "_order"], how="semi"
        )
        out[table] = rows.drop("_order")
    return out


def test_graph_of_two_real_files(tmp_path) -> None:
    mirror = require_reference("pubmed", "mirror")
    lake = Lake(str(tmp_path / "lake"))
    for table, frame in _fold([parse.parse_file(mirror / f) for f in FILES]).items():
        write_corpus_table(lake, table, frame.to_arrow())
    write_mesh_2024(lake)

    build = build_graph(lake)
    s = build.stats
    assert s.n_articles == 60
    assert (s.citation_rows, s.citation_edges, s.dangling_citations) == (1349, 1, 1348)
    assert (s.mesh_rows >= 300, s.mesh_pairs, s.major_pairs) == (True, 300, 104)
    assert s.quotable == 56
    assert (s.retracted, s.concern) == (0, 0)
    assert s.n_descriptors == 30764 + s.n_unknown_descriptors
    assert s.n_unknown_descriptors == 0

    store = KGStore.open(lake, build.build_id)
    self_citing = store.idx(41413049)
    assert store.cites(self_citing).tolist() == [self_citing]
    assert store.cited_by(self_citing).tolist() == [self_citing]
    assert int((store.mesh_article_count > 0).sum()) == 200
    catalog = Catalog(lake)
    con = catalog.connect()
    catalog.refresh_views(con)
    assert check_invariants(store).passed
    outcome = recount(store, con, named_pmids=(41413049,))
    assert outcome.passed, outcome.details
    assert outcome.metadata["articles_recounted"] == 60
