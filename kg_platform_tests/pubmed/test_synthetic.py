"""The synthetic release: NLM layout and md5 files, and records whose parse shows the shape the
pipeline needs (headings from the vocabulary, citations only backwards with a heavy-tailed
in-degree, versions, revisions, deletions, retractions)."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import polars as pl
import pytest

from kg_platform.pubmed.parse import parse_file_stats
from kg_platform.pubmed.recount import recount_file
from kg_platform.pubmed.synthetic import (
    DEFAULT_MESH_VOCABULARY,
    QUALIFIERS,
    write_synthetic_release,
)
from kg_platform.schemas import PUBMED_TABLES
from kg_platform_tests.conftest import require_reference

N_RECORDS = 3000


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    out = tmp_path_factory.mktemp("synthetic")
    paths = write_synthetic_release(out, N_RECORDS, n_baseline_files=3, n_update_files=2, seed=7)
    return out, paths


@pytest.fixture(scope="module")
def parsed(release: tuple[Path, list[Path]]) -> dict[str, dict[str, pl.DataFrame]]:
    _, paths = release
    result = {}
    for path in paths:
        tables, _ = parse_file_stats(path)
        result[path.name] = {name: pl.from_arrow(t) for name, t in tables.items()}
    return result


def concat(parsed: dict, table: str, files: list[str] | None = None) -> pl.DataFrame:
    names = files or list(parsed)
    return pl.concat([parsed[n][table].with_columns(pl.lit(n).alias("source")) for n in names])


def test_nlm_layout_and_md5_files(release: tuple[Path, list[Path]]) -> None:
    out, paths = release
    assert [str(p.relative_to(out)) for p in paths] == [
        "baseline/pubmed26n0001.xml.gz",
        "baseline/pubmed26n0002.xml.gz",
        "baseline/pubmed26n0003.xml.gz",
        "updatefiles/pubmed26n0004.xml.gz",
        "updatefiles/pubmed26n0005.xml.gz",
    ]
    for path in paths:
        md5 = Path(f"{path}.md5").read_text()
        assert md5 == f"MD5({path.name})= {hashlib.md5(path.read_bytes()).hexdigest()}\n"
        assert gzip.decompress(path.read_bytes()).startswith(b'<?xml version="1.0"')
    assert sorted(p.name for p in out.rglob("*")) == sorted(
        [p.name for p in paths] + [f"{p.name}.md5" for p in paths] + ["baseline", "updatefiles"]
    )


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    def build(folder: str, seed: int) -> list[bytes]:
        paths = write_synthetic_release(
            tmp_path / folder, 300, n_baseline_files=1, n_update_files=1, seed=seed
        )
        return [p.read_bytes() for p in paths]

    assert build("a", 1) == build("b", 1)
    assert build("c", 2) != build("a", 1)


def test_parses_cleanly_and_recount_matches(release: tuple[Path, list[Path]], parsed: dict) -> None:
    _, paths = release
    for path in paths:
        tables = parsed[path.name]
        for name, model in PUBMED_TABLES.items():
            model.validate(tables[name])
        recount = recount_file(path)
        assert recount["articles"] == tables["articles"].height
        assert recount["pubmed_references"] == tables["citations"].height
        assert recount["deletions"] == tables["deletions"].height
        assert (
            recount["mesh_headings"]
            == tables["mesh_edges"].select("pmid", "version", "descriptor_ui").unique().height
        )
    baseline = [p.name for p in paths[:3]]
    new_in_baseline = concat(parsed, "articles", baseline).height
    # a tenth of the records first appear in the update files
    assert new_in_baseline == N_RECORDS - N_RECORDS // 10


def test_text_and_headings_have_realistic_shape(parsed: dict) -> None:
    articles = concat(parsed, "articles")
    assert articles["title"].null_count() == 0
    structured = articles.filter(pl.col("abstract").str.starts_with("BACKGROUND: "))
    plain = articles.filter(pl.col("has_abstract") & ~pl.col("abstract").str.contains("\n"))
    assert structured.height > 0.3 * articles.height
    assert plain.height > 0.2 * articles.height
    assert articles.filter(~pl.col("has_abstract")).height > 0

    mesh = concat(parsed, "mesh_edges")
    vocabulary = {ui for ui, _ in DEFAULT_MESH_VOCABULARY}
    assert set(mesh["descriptor_ui"].unique()) <= vocabulary
    assert set(mesh["qualifier_ui"].drop_nulls().unique()) <= {ui for ui, _ in QUALIFIERS}
    per_record = mesh.select("pmid", "version", "descriptor_ui", "source").unique()
    counts = per_record.group_by("pmid", "version", "source").len()["len"]
    assert counts.min() >= 3
    assert counts.max() <= 13  # 12, plus one heading a revision may add
    # every record has at least one major heading
    majors = mesh.filter(pl.col("descriptor_major")).select("pmid", "version", "source").unique()
    assert majors.height == articles.height
    # Zipf-like popularity: the most used heading is on far more records than the median one
    popularity = per_record.group_by("descriptor_ui").len()["len"]
    assert popularity.max() > 5 * popularity.median()
    assert concat(parsed, "chemicals").height > 0


def test_citations_point_backwards_with_heavy_tailed_in_degree(parsed: dict) -> None:
    citations = concat(parsed, "citations")
    assert citations.height > 5 * N_RECORDS
    assert (citations["cited_pmid"] < citations["citing_pmid"]).all()
    known = set(concat(parsed, "articles")["pmid"])
    assert set(citations["cited_pmid"]) <= known
    in_degree = citations.select("citing_pmid", "cited_pmid").unique().group_by("cited_pmid").len()
    degrees = in_degree["len"].sort(descending=True)
    top = degrees.head(len(known) // 100).sum()
    # preferential attachment: the top 1% of articles draw over a tenth of all citations,
    # where a uniform choice would give them about 1-2%
    assert top > 0.1 * degrees.sum()
    assert degrees[0] > 20 * degrees.mean()


def test_update_files_carry_versions_revisions_deletions_and_retractions(
    release: tuple[Path, list[Path]], parsed: dict
) -> None:
    _, paths = release
    baseline_names = [p.name for p in paths[:3]]
    update_names = [p.name for p in paths[3:]]
    baseline_pmids = set(concat(parsed, "articles", baseline_names)["pmid"])
    updates = concat(parsed, "articles", update_names)

    version_two = updates.filter(pl.col("version") == 2)
    assert version_two.height > 0
    assert set(version_two["pmid"]) <= baseline_pmids

    revised = updates.filter((pl.col("version") == 1) & pl.col("pmid").is_in(baseline_pmids))
    assert revised.height > version_two.height

    deleted = concat(parsed, "deletions", update_names)["pmid"]
    assert deleted.len() > 0
    assert set(deleted) <= baseline_pmids
    assert not set(deleted) & set(updates["pmid"])

    corrections = concat(parsed, "corrections", update_names)
    pubtypes = concat(parsed, "pubtypes", update_names)
    notices = corrections.filter(pl.col("ref_type") == "RetractionOf")
    assert notices.height > 0
    for notice, retracted, source in notices.select("pmid", "ref_pmid", "source").rows():
        assert retracted in baseline_pmids
        back = corrections.filter(
            (pl.col("pmid") == retracted)
            & (pl.col("ref_type") == "RetractionIn")
            & (pl.col("source") == source)
        )
        assert back["ref_pmid"].to_list() == [notice]
        names = set(pubtypes.filter(pl.col("pmid") == retracted)["name"])
        assert "Retracted Publication" in names
        assert set(pubtypes.filter(pl.col("pmid") == notice)["name"]) == {
            "Journal Article",
            "Retraction Notice",
        }


def test_given_vocabulary_is_used(tmp_path: Path) -> None:
    vocabulary = [("D000001", "Calcimycin"), ("D000002", "Temefos"), ("D000003", "Abattoirs")]
    (path,) = write_synthetic_release(
        tmp_path, 200, n_baseline_files=1, n_update_files=0, mesh_vocabulary=vocabulary
    )
    tables, _ = parse_file_stats(path)
    assert set(tables["mesh_edges"].column("descriptor_ui").to_pylist()) == {
        "D000001",
        "D000002",
        "D000003",
    }
    assert tables["articles"].num_rows == 200


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="baseline"):
        write_synthetic_release(tmp_path, 10, n_baseline_files=0, n_update_files=0)
    with pytest.raises(ValueError, match="cannot fill"):
        write_synthetic_release(tmp_path, 2, n_baseline_files=3, n_update_files=0)
    with pytest.raises(ValueError, match="not descriptor UIs"):
        write_synthetic_release(
            tmp_path, 10, n_baseline_files=1, n_update_files=0, mesh_vocabulary=[("Q000097", "x")]
        )


def test_default_vocabulary_is_real_mesh() -> None:
    descriptors = pl.read_csv(
        require_reference("mesh", "tsv", "mesh2024_descriptors.tsv.gz"),
        separator="\t",
        has_header=False,
        quote_char=None,
        infer_schema=False,
    ).select("column_0", "column_1")
    names = dict(descriptors.iter_rows())
    assert {ui: names.get(ui) for ui, _ in DEFAULT_MESH_VOCABULARY} == dict(DEFAULT_MESH_VOCABULARY)
    pairs = pl.read_csv(
        require_reference("mesh", "tsv", "mesh2026_subjects_with_qualifiers.csv.gz")
    )
    neoplasms = dict(
        pairs.filter(pl.col("id").str.contains("/D009369Q"))
        .select(pl.col("id").str.extract(r"(Q\d+)$"), pl.col("subject").str.extract(r"/(.+)$"))
        .iter_rows()
    )
    # every qualifier used is allowed on Neoplasms, and spelled as NLM spells it
    assert {ui: neoplasms.get(ui) for ui, _ in QUALIFIERS} == dict(QUALIFIERS)
