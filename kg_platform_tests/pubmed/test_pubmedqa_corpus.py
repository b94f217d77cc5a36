"""The PubMedQA corpus source on real DEV400 questions, resolved against the MeSH 2024
descriptors TSV (heading names and the preferred concept's entry terms), and folded beside
the reference mirror into a graph.

Expected values were read off the JSON by hand: 10223070 (1999) has 11 MESHES names and
five abstract sections starting OBJECTIVE; 11838307 (2002) has 15, of which 'Cervical
Intraepithelial Neoplasia' is an entry term of D002578 (Uterine Cervical Dysplasia);
26879871 (2016) has 17, of which three are the retired population-group headings that MeSH
2024 no longer names (African/European Continental Ancestry Group, Ethnic Groups)."""

from __future__ import annotations

import polars as pl
import pytest

from kg_platform.mesh.tsv import read_descriptor_tsv
from kg_platform.pubmed.pubmedqa_corpus import (
    MeshNameResolver,
    pubmedqa_corpus,
    read_pubmedqa_records,
    split_halves,
    terms_from_descriptor_tsv,
)
from kg_platform.schemas import CORPUS_MODELS, Articles, MeshEdges
from kg_platform_tests.conftest import require_reference

PMIDS = (10223070, 11838307, 26879871)


@pytest.fixture(scope="module")
def resolver() -> MeshNameResolver:
    tsv = require_reference("mesh", "tsv", "mesh2024_descriptors.tsv.gz")
    return MeshNameResolver(terms_from_descriptor_tsv(tsv))


@pytest.fixture(scope="module")
def records() -> dict[str, dict]:
    return read_pubmedqa_records(require_reference("pubmedqa", "pqal_dev400.json"))


def test_three_dev400_questions(resolver, records) -> None:
    corpus = pubmedqa_corpus(records, resolver, "pqal_dev400", PMIDS)
    rows = {t: corpus.tables[t].num_rows for t in corpus.tables}
    assert rows == {
        "articles": 3,
        "mesh_edges": 40,
        "citations": 0,
        "corrections": 0,
        "chemicals": 0,
        "pubtypes": 0,
        "deletions": 0,
    }
    assert (corpus.headings, corpus.resolved, corpus.unresolved, corpus.ambiguous) == (
        43,
        40,
        3,
        0,
    )
    assert corpus.resolved_by == {"entry": 1, "name": 39}
    assert corpus.unresolved_names == (
        "African Continental Ancestry Group",
        "Ethnic Groups",
        "European Continental Ancestry Group",
    )
    articles = pl.from_arrow(corpus.tables["articles"])
    Articles.validate(articles)
    edges = pl.from_arrow(corpus.tables["mesh_edges"])
    MeshEdges.validate(edges)
    assert articles["pmid"].to_list() == list(PMIDS)
    assert articles["year"].to_list() == [1999, 2002, 2016]
    assert articles["title"].null_count() == 3
    assert articles["file"].unique().to_list() == ["pqal_dev400"]
    first = articles["abstract"][0]
    assert first.startswith("OBJECTIVE: To critically assess the evidence that appendiceal")
    assert first.count("\n") == 4  # five sections
    assert "LONG_ANSWER" not in first
    per_pmid = dict(edges.group_by("pmid").len().sort("pmid").iter_rows())
    assert per_pmid == {10223070: 11, 11838307: 15, 26879871: 14}
    uis = edges.filter(pl.col("pmid") == 10223070)["descriptor_ui"].to_list()
    assert uis == sorted(
        [
            "D001064",  # Appendicitis
            "D015984",  # Causality
            "D019317",  # Evidence-Based Medicine
            "D005260",  # Female
            "D006801",  # Humans
            "D007247",  # Infertility, Female
            "D007416",  # Intestinal Perforation
            "D011247",  # Pregnancy
            "D011271",  # Pregnancy, Ectopic
            "D012107",  # Research Design
            "D012307",  # Risk Factors
        ]
    )
    assert resolver.resolve("Cervical Intraepithelial Neoplasia").ui == "D002578"
    assert not edges["descriptor_major"].any()  # DEV400 marks no major topic
    assert edges["qualifier_ui"].null_count() == edges.height


def test_whole_dev400_and_halves(resolver, records) -> None:
    corpus = pubmedqa_corpus(records, resolver, "pqal_dev400")
    assert corpus.tables["articles"].num_rows == 400
    assert (corpus.headings, corpus.resolved, corpus.unresolved) == (5785, 5766, 19)
    a, b = split_halves(records)
    assert (len(a), len(b), a[-1] < b[0]) == (200, 200, True)
    half = pubmedqa_corpus(records, resolver, "pqal_dev400_a", a)
    assert pl.from_arrow(half.tables["articles"])["pmid"].to_list() == a


def test_star_and_qualifier_conventions() -> None:
    terms = pl.DataFrame(
        {
            "ui": ["D000001", "D000002", "D000003", "D000003"],
            "term": ["Myocardial Infarction", "Heart Attack", "Cold", "Common Cold"],
            "kind": ["name", "name", "name", "entry"],
        }
    )
    r = MeshNameResolver(terms)
    assert (r.resolve("Myocardial Infarction*").ui, r.resolve("Myocardial Infarction*").major) == (
        "D000001",
        True,
    )
    assert r.resolve("Myocardial Infarction/drug therapy").ui == "D000001"
    assert r.resolve("Myocardial Infarction/drug therapy").major is False
    assert r.resolve("*Myocardial Infarction/drug therapy").major is True
    assert r.resolve("myocardial  infarction").how == "name_normalised"
    assert r.resolve("Common Cold").how == "entry"
    assert r.resolve("Nothing Like It").how == "unresolved"


def test_folds_beside_the_mirror_into_a_graph(tmp_path, resolver, records) -> None:
    from kg_platform.graph.build import build_graph
    from kg_platform.graph.store import KGStore
    from kg_platform.pubmed.fold import fold_checks, fold_release, table_key
    from kg_platform.pubmed.parse import parse_file
    from kg_platform.storage.lake import Lake

    mirror = require_reference("pubmed", "mirror")
    tsv = require_reference("mesh", "tsv", "mesh2024_descriptors.tsv.gz")
    lake = Lake(str(tmp_path / "lake"))
    corpus = pubmedqa_corpus(records, resolver, "pqal_dev400", PMIDS)
    files = ["pqal_dev400", "pubmed26n1334", "pubmed26n1335"]
    parsed = {
        "pqal_dev400": corpus.tables,
        "pubmed26n1334": parse_file(mirror / "baseline" / "pubmed26n1334.xml.gz"),
        "pubmed26n1335": parse_file(mirror / "updatefiles" / "pubmed26n1335.xml.gz"),
    }
    for file, tables in parsed.items():
        assert set(CORPUS_MODELS) < set(tables)
        for table, data in tables.items():
            lake.write_parquet(table_key(table, file), data)
    fold = fold_release(lake, files)
    assert fold.rows["articles"] == 63
    assert all(c.passed for c in fold_checks(lake, files, fold))
    mesh = read_descriptor_tsv(str(tsv))
    lake.write_parquet("mesh/descriptors.parquet", mesh["descriptors"].to_arrow())
    lake.write_parquet("mesh/tree.parquet", mesh["tree"].to_arrow())
    build = build_graph(lake)
    assert (build.stats.n_articles, build.stats.mesh_pairs) == (63, 300 + 40)
    store = KGStore.open(lake, build.build_id)
    article = store.idx(10223070)
    ectopic = store.desc_idx("D011271")
    assert article in store.articles_of(ectopic).tolist()
