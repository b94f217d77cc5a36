"""What the fold tests share: the real files' expected state read off their XML, their
per-file tables loaded into a lake, the corpus compared with that state, a generated update
file, and a synthetic release of 3,000 records (3 baseline and 3 update files)."""

from __future__ import annotations

import gzip
import xml.etree.ElementTree as ET
from pathlib import Path

import polars as pl
import pytest

from kg_platform.pubmed.fold import fold_checks, fold_release, table_key
from kg_platform.pubmed.parse import parse_file
from kg_platform.pubmed.synthetic import write_synthetic_release
from kg_platform.schemas import CORPUS_MODELS
from kg_platform.storage.corpus import read_corpus
from kg_platform.storage.lake import Lake


# -- the independent expectation -----------------------------------------------------------
def file_name(path: Path) -> str:
    return path.name.removesuffix(".xml.gz")


def read_xml(path: Path) -> ET.Element:
    with gzip.open(path) as fh:
        return ET.parse(fh).getroot()


def expected_state(paths: list[Path]) -> dict[int, tuple[int, str, ET.Element]]:
    """pmid -> (version, file, record) after applying the files in order."""
    best: dict[int, tuple[int, int, str, ET.Element]] = {}
    deleted_in: dict[int, int] = {}
    for order, path in enumerate(paths):
        root = read_xml(path)
        for record in root.iter("PubmedArticle"):
            pmid_el = record.find("MedlineCitation/PMID")
            assert pmid_el is not None and pmid_el.text
            pmid, version = int(pmid_el.text), int(pmid_el.get("Version", "1"))
            if pmid not in best or (order, version) >= best[pmid][:2]:
                best[pmid] = (order, version, file_name(path), record)
        for deletion in root.iter("DeleteCitation"):
            for pmid_el in deletion.findall("PMID"):
                deleted_in[int(pmid_el.text or "0")] = order
    return {
        pmid: (version, file, record)
        for pmid, (order, version, file, record) in best.items()
        if deleted_in.get(pmid, -1) <= order
    }


def heading_rows(record: ET.Element) -> int:
    """mesh_edges rows of a record: one per qualifier, or one for a bare heading."""
    return sum(
        max(1, len(h.findall("QualifierName")))
        for h in record.iterfind("MedlineCitation/MeshHeadingList/MeshHeading")
    )


def reference_pmids(record: ET.Element) -> list[int]:
    seen: list[int] = []
    for ref in record.iterfind("PubmedData/ReferenceList//ArticleId[@IdType='pubmed']"):
        text = (ref.text or "").strip()
        if text.isdigit() and int(text) > 0 and int(text) not in seen:
            seen.append(int(text))
    return seen


# -- helpers -------------------------------------------------------------------------------
def load_tables(lake: Lake, paths: list[Path]) -> list[str]:
    """Per-file tables made by the project's parser, as pubmed_tables writes them."""
    names = []
    for path in paths:
        name = file_name(path)
        for table, rows in parse_file(path).items():
            lake.write_parquet(table_key(table, name), rows)
        names.append(name)
    return names


def corpus_frame(lake: Lake, table: str) -> pl.DataFrame:
    return pl.from_arrow(read_corpus(lake, table))


def assert_folded_as_expected(lake: Lake, paths: list[Path]) -> dict[int, tuple]:
    names = load_tables(lake, paths)
    expected = expected_state(paths)
    result = fold_release(lake, names)
    articles = corpus_frame(lake, "articles")
    # exact surviving (pmid, version, file), sorted by pmid
    assert list(articles.select("pmid", "version", "file").iter_rows()) == sorted(
        (pmid, version, file) for pmid, (version, file, _) in expected.items()
    )
    # child rows belong to the winning record only
    mesh = corpus_frame(lake, "mesh_edges")
    assert mesh.height == sum(heading_rows(r) for _, _, r in expected.values())
    citations = corpus_frame(lake, "citations")
    expected_citations = [
        (pmid, cited) for pmid in sorted(expected) for cited in reference_pmids(expected[pmid][2])
    ]
    assert list(citations.select("citing_pmid", "cited_pmid").iter_rows()) == expected_citations
    assert result.dangling_citations == sum(c not in expected for _, c in expected_citations)
    assert result.rows["articles"] == len(expected)
    assert result.rows["mesh_edges"] == mesh.height
    assert result.files == names
    for table, model in CORPUS_MODELS.items():
        model.validate(corpus_frame(lake, table))
        pmid_col = "citing_pmid" if table == "citations" else "pmid"
        assert corpus_frame(lake, table)[pmid_col].is_sorted(), table
    checks = fold_checks(lake, names, result)
    assert [(c.name, c.passed) for c in checks] == [
        ("one_row_per_pmid", True),
        ("no_deleted_pmid", True),
        ("polars_recount", True),
        ("edge_sources_in_articles", True),
    ], checks
    return expected


def write_update(path: Path, records: list[ET.Element], deleted: list[int]) -> Path:
    root = ET.Element("PubmedArticleSet")
    root.extend(records)
    if deleted:
        deletion = ET.SubElement(root, "DeleteCitation")
        for pmid in deleted:
            ET.SubElement(deletion, "PMID", Version="1").text = str(pmid)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb") as fh:
        fh.write(b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root))
    return path


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Path]:
    tmp = tmp_path_factory.mktemp("synthetic")
    paths = write_synthetic_release(tmp / "release", 3000, n_baseline_files=3, n_update_files=3)
    return paths, tmp
