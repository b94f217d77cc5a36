"""parse_file and recount_file on every real PubMed file in the reference data.

Exact values below were read off the XML by hand (and by the byte-level recount, which shares
no code with the parser); the README's figures for pubmed26n1334/1335 and pubmed20n1203 are
among them.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from kg_platform.pubmed import recount
from kg_platform.pubmed.parse import TABLE_NAMES, file_key, parse_file, parse_file_stats
from kg_platform.pubmed.recount import recount_file
from kg_platform.pubmed.tables import distinct_headings
from kg_platform.schemas import PUBMED_TABLES
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.support.parse import EXPECTED_ROWS

# MeshHeading elements per file: the README gives 86 and 214 for the 2026 pair
EXPECTED_HEADINGS = {
    "mirror/baseline/pubmed26n1334.xml.gz": 86,
    "mirror/updatefiles/pubmed26n1335.xml.gz": 214,
    "samples/pubmed24/updatefiles/pubmed24n1220.xml.gz": 427,
    "legacy/medline16n0902.xml.gz": 1404,
}

_cache: dict[str, dict[str, pa.Table]] = {}


def tables_of(relative: str) -> dict[str, pa.Table]:
    if relative not in _cache:
        _cache[relative] = parse_file(require_reference("pubmed", relative))
    return _cache[relative]


def frame(relative: str, table: str) -> pl.DataFrame:
    return pl.from_arrow(tables_of(relative)[table])


def test_every_reference_file_is_listed() -> None:
    root = require_reference("pubmed")
    found = {
        str(p.relative_to(root)) for p in root.rglob("*") if p.name.endswith((".xml", ".xml.gz"))
    }
    assert found == set(EXPECTED_ROWS)


@pytest.mark.parametrize("relative", sorted(EXPECTED_ROWS))
def test_rows_per_table(relative: str) -> None:
    tables = tables_of(relative)
    assert list(tables) == list(TABLE_NAMES)
    assert tuple(tables[name].num_rows for name in TABLE_NAMES) == EXPECTED_ROWS[relative]


@pytest.mark.parametrize("relative", sorted(EXPECTED_ROWS))
def test_tables_pass_the_pandera_schemas_and_are_sorted(relative: str) -> None:
    for name, model in PUBMED_TABLES.items():
        df = frame(relative, name)
        model.validate(df)
        key = "citing_pmid" if name == "citations" else "pmid"
        order = [key, "version"] if "version" in df.columns else [key]
        assert df.select(order).equals(df.select(order).sort(order)), name
    articles = frame(relative, "articles")
    assert articles["file"].unique().to_list() == [file_key(relative)]
    # every child row belongs to an article of the same file and version
    keys = articles.select("pmid", "version")
    for name in ("mesh_edges", "corrections", "chemicals", "pubtypes"):
        assert frame(relative, name).join(keys, on=["pmid", "version"], how="anti").height == 0
    citing = frame(relative, "citations").rename({"citing_pmid": "pmid"})
    assert citing.join(keys, on=["pmid", "version"], how="anti").height == 0


@pytest.mark.parametrize("relative", sorted(EXPECTED_ROWS))
def test_recount_equals_rows_written(relative: str) -> None:
    path = require_reference("pubmed", relative)
    tables, stats = parse_file_stats(path)
    recount = recount_file(path)
    mesh = pl.from_arrow(tables["mesh_edges"])
    headings = mesh.select("pmid", "version", "descriptor_ui").unique().height
    assert distinct_headings(tables["mesh_edges"]) == headings  # the file run's count
    assert recount == {
        "articles": tables["articles"].num_rows,
        "mesh_headings": headings,
        "pubmed_references": tables["citations"].num_rows,
        "deletions": tables["deletions"].num_rows,
        "book_articles": stats.book_articles_skipped,
    }
    assert stats.articles == recount["articles"]
    assert stats.deletions == recount["deletions"]
    if relative in EXPECTED_HEADINGS:
        assert recount["mesh_headings"] == EXPECTED_HEADINGS[relative]


def test_readme_figures_for_the_2026_pair_and_pubmed20n1203() -> None:
    assert recount_file(require_reference("pubmed", "mirror/baseline/pubmed26n1334.xml.gz")) == {
        "articles": 30,
        "mesh_headings": 86,
        "pubmed_references": 286,
        "deletions": 0,
        "book_articles": 0,
    }
    update = recount_file(require_reference("pubmed", "mirror/updatefiles/pubmed26n1335.xml.gz"))
    assert (update["articles"], update["mesh_headings"], update["pubmed_references"]) == (
        30,
        214,
        1063,
    )
    assert update["deletions"] == 6
    assert frame("samples/pubmed20/pubmed20n1203.xml.gz", "deletions").height == 23


@pytest.mark.parametrize("block", [997, 4096, 65536])
def test_recount_is_the_same_whatever_its_block(monkeypatch, block: int) -> None:
    # records and DeleteCitation split across blocks, blocks of records only (counted
    # together) and blocks with a deletion (counted one unit at a time) count as one read
    for relative, expected in (
        ("mirror/baseline/pubmed26n1334.xml.gz", (30, 86, 286, 0)),
        ("mirror/updatefiles/pubmed26n1335.xml.gz", (30, 214, 1063, 6)),
        ("samples/pubmed20/pubmed20n1203.xml.gz", None),
    ):
        path = require_reference("pubmed", relative)
        whole = recount_file(path)
        monkeypatch.setattr(recount, "_BLOCK", block)
        assert recount_file(path) == whole
        monkeypatch.undo()
        if expected is not None:
            keys = ("articles", "mesh_headings", "pubmed_references", "deletions")
            assert tuple(whole[k] for k in keys) == expected


def test_headings_with_major_flags_and_qualifiers() -> None:
    # PMID 41603352 (eLife, "Mast cells promote pathology and susceptibility in tuberculosis")
    mesh = frame("mirror/baseline/pubmed26n1334.xml.gz", "mesh_edges").filter(
        pl.col("pmid") == 41603352
    )
    assert mesh.drop("pmid").rows() == [
        (1, "D000818", False, None, None),
        (1, "D008407", True, "Q000276", False),
        (1, "D008407", True, "Q000473", False),
        (1, "D051379", False, None, None),
        (1, "D009169", True, "Q000276", False),
        (1, "D006801", False, None, None),
        (1, "D014397", True, "Q000473", False),
        (1, "D014397", True, "Q000276", False),
        (1, "D014397", True, "Q000382", False),
        (1, "D008168", False, "Q000473", False),
        (1, "D008168", False, "Q000382", False),
        (1, "D004198", False, None, None),
        (1, "D004195", False, None, None),
        (1, "D005260", False, None, None),
        (1, "D055985", False, "Q000473", False),
        (1, "D055985", False, "Q000276", False),
        (1, "D008810", False, None, None),
        (1, "D006099", False, "Q000473", False),
    ]
    article = frame("mirror/baseline/pubmed26n1334.xml.gz", "articles").filter(
        pl.col("pmid") == 41603352
    )
    row = article.row(0, named=True)
    assert row["title"] == "Mast cells promote pathology and susceptibility in tuberculosis."
    assert row["journal"] == "eLife"
    assert (row["year"], row["language"], row["n_pubtypes"]) == (2026, "eng", 1)
    # inline <i> markup is flattened into the text, not dropped
    assert row["abstract"].startswith(
        "Tuberculosis (TB), caused by the bacterium Mycobacterium tuberculosis (Mtb), infects"
    )


def test_references_in_nlm_order() -> None:
    citations = frame("mirror/baseline/pubmed26n1334.xml.gz", "citations")
    assert citations.filter(pl.col("citing_pmid") == 41583336)["cited_pmid"].to_list() == [
        24416692,
        22814914,
        34224876,
        32208043,
        9217768,
        38224093,
        29416554,
    ]
    per_record = citations.group_by("citing_pmid").len().sort("citing_pmid")
    assert per_record.rows() == [
        (41583336, 7),
        (41583864, 100),
        (41584348, 70),
        (41584723, 35),
        (41585099, 37),
        (41585660, 37),
    ]


def test_nested_reference_list_is_read_and_a_repeated_reference_kept_once() -> None:
    # PMID 38060191 wraps its references in a second ReferenceList with a Title; it lists
    # 62 pubmed ids of which 28849609 twice
    citations = frame("samples/pubmed24/baseline/pubmed24n1219.xml.gz", "citations")
    cited = citations.filter(pl.col("citing_pmid") == 38060191)["cited_pmid"].to_list()
    assert len(cited) == 61
    assert cited[:3] == [25895156, 31146874, 22887722]
    assert cited[-1] == 33651430
    assert cited.count(28849609) == 1


def test_corrections_retraction_of_and_notice_type() -> None:
    relative = "mirror/baseline/pubmed26n1334.xml.gz"
    assert frame(relative, "corrections").rows() == [
        (41578200, 1, "RetractionOf", 21595987),
        (41599792, 1, "ErratumFor", 36422535),
    ]
    assert frame(relative, "pubtypes").filter(pl.col("pmid") == 41578200).drop("pmid").rows() == [
        (1, "D016428", "Journal Article"),
        (1, "D016440", "Retraction Notice"),
    ]
    notice = frame(relative, "articles").filter(pl.col("pmid") == 41578200).row(0, named=True)
    assert notice["title"] == (
        "Retraction Note: Y-box protein-1/p18 fragment identifies malignancies in patients "
        "with chronic liver disease."
    )
    assert (notice["abstract"], notice["has_abstract"], notice["journal"]) == (
        None,
        False,
        "BMC cancer",
    )


def test_retraction_in_and_retracted_publication() -> None:
    relative = "samples/pubmed24/updatefiles/pubmed24n1220.xml.gz"
    assert frame(relative, "corrections").rows() == [
        (15146069, 1, "RetractionIn", 15516371),
        (17375092, 1, "CommentOn", 17273171),
        (17375092, 1, "CommentOn", 17322887),
        (17607606, 1, "CommentIn", 17607595),
    ]
    retracted = frame(relative, "pubtypes").filter(pl.col("name") == "Retracted Publication")
    assert retracted.rows() == [(15146069, 1, "D016441", "Retracted Publication")]
    article = frame(relative, "articles").filter(pl.col("pmid") == 15146069).row(0, named=True)
    assert article["year"] == 2004
    assert article["title"].startswith("Suppression of pathogen-inducible NO synthase (iNOS)")


def test_structured_abstract_keeps_section_labels() -> None:
    articles = frame("mirror/baseline/pubmed26n1334.xml.gz", "articles")
    abstract = articles.filter(pl.col("pmid") == 41576520)["abstract"].item()
    sections = abstract.split("\n")
    assert [s.split(": ", 1)[0] for s in sections] == [
        "BACKGROUND",
        "METHODS",
        "RESULTS",
        "CONCLUSIONS",
    ]
    assert sections[3] == (
        "CONCLUSIONS: In one of the first studies to examine SUA and neurocognition in children "
        "with mild to moderate CKD, no clear associations were uncovered."
    )


def test_empty_title_is_null_and_language_is_kept() -> None:
    # <ArticleTitle/> with only a VernacularTitle
    row = (
        frame("mirror/baseline/pubmed26n1334.xml.gz", "articles")
        .filter(pl.col("pmid") == 41605226)
        .row(0, named=True)
    )
    assert (row["title"], row["language"], row["journal"], row["year"]) == (
        None,
        "ger",
        "RoFo : Fortschritte auf dem Gebiete der Rontgenstrahlen und der Nuklearmedizin",
        2026,
    )


def test_deletions_of_the_first_2026_update() -> None:
    deletions = frame("mirror/updatefiles/pubmed26n1335.xml.gz", "deletions")
    assert deletions["pmid"].to_list() == [
        41456105,
        41557076,
        41616784,
        41618748,
        41618749,
        41618779,
    ]


def test_versions_two_sort_after_version_one() -> None:
    articles = frame("samples/pubmed23/baseline/pubmed23n1166.xml.gz", "articles")
    versioned = articles.filter(pl.col("pmid").is_in([36447600, 36447759]))
    assert versioned.select("pmid", "version").rows() == [
        (36447600, 1),
        (36447600, 2),
        (36447759, 1),
        (36447759, 2),
    ]
    citations = frame("samples/pubmed23/baseline/pubmed23n1166.xml.gz", "citations")
    per_version = (
        citations.filter(pl.col("citing_pmid").is_in([36447600, 36447759]))
        .group_by("citing_pmid", "version")
        .len()
        .sort("citing_pmid", "version")
    )
    # only version 2 of each carries a reference list
    assert per_version.rows() == [(36447600, 2, 75), (36447759, 2, 22)]


def test_multiple_reference_lists_and_deletions_in_efetch_form() -> None:
    relative = "efetch/tipplerow_pubmed_sample.xml"
    citations = frame(relative, "citations")
    # PMID 31687927 gives each of its 47 references its own ReferenceList
    assert citations.filter(pl.col("citing_pmid") == 31687927).height == 47
    assert frame(relative, "deletions")["pmid"].to_list() == [30830050, 30830053, 30830055]
    assert file_key(relative) == "tipplerow_pubmed_sample"


def test_legacy_medline_citation_set_is_parsed() -> None:
    relative = "legacy/medline16n0902.xml.gz"
    tables, stats = parse_file_stats(require_reference("pubmed", relative))
    assert stats.format == "MedlineCitationSet"
    assert stats.articles == 604
    articles = pl.from_arrow(tables["articles"])
    first = articles.filter(pl.col("pmid") == 17942999).row(0, named=True)
    assert first["title"] == (
        "Neuroplasticity in the processing of pitch dimensions: a multidimensional scaling "
        "analysis of the mismatch negativity."
    )
    assert (first["year"], first["journal"], first["version"]) == (
        2007,
        "Restorative neurology and neuroscience",
        1,
    )
    assert first["abstract"].startswith("PURPOSE: An auditory electrophysiological study")
    # the legacy format has no PubmedData, so no references
    assert tables["citations"].num_rows == 0
    assert pl.from_arrow(tables["deletions"])["pmid"].to_list() == [26432306]
    # 62 records carry a <MedlineDate> instead of a <Year>; their year comes from its text
    assert articles["year"].null_count() == 0


def test_file_name_override_and_default() -> None:
    path = require_reference("pubmed", "mirror/baseline/pubmed26n1334.xml.gz")
    tables = parse_file(path, file="custom-name")
    assert set(tables["articles"].column("file").to_pylist()) == {"custom-name"}
    assert file_key(Path("x/pubmed26n0001.xml.gz")) == "pubmed26n0001"
    assert file_key("pubmed26n0001.xml") == "pubmed26n0001"


@pytest.mark.parametrize("block", [13, 64, 4096])
def test_cutting_unread_subtrees_does_not_depend_on_block_boundaries(
    block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the reader cuts AuthorList, History, ... from the byte stream before libxml2 sees it;
    # with tiny blocks every marker and end tag is split somewhere, and the tables must not move
    from kg_platform.pubmed import parse as parse_module

    relative = "mirror/updatefiles/pubmed26n1335.xml.gz"
    monkeypatch.setattr(parse_module, "_READ_BLOCK", block)
    monkeypatch.setattr(parse_module, "_PROLOG_BYTES", 200)
    small_blocks = parse_file(require_reference("pubmed", relative))
    for name in TABLE_NAMES:
        assert small_blocks[name].equals(tables_of(relative)[name]), name


def test_cut_keeps_line_numbers_and_unrelated_tags() -> None:
    from kg_platform.pubmed.parse import _cut_unread

    data = (
        b"<A><AuthorList CompleteYN='Y'>\n<Author>x</Author>\n</AuthorList>"
        b"<AuthorListing>kept</AuthorListing><History>\n</History><B/></A>"
    )
    out, held = _cut_unread(data, final=True)
    assert held == b""
    assert out == b"<A>\n\n<AuthorListing>kept</AuthorListing>\n<B/></A>"
    # an unfinished subtree is held back until its end tag arrives
    out, held = _cut_unread(b"<A><AuthorList>\n<Author>", final=False)
    assert (out, held) == (b"<A>", b"<AuthorList>\n<Author>")


@pytest.mark.parametrize("relative", sorted(EXPECTED_ROWS))
def test_recount_of_the_bytes_the_parse_inflates_is_its_own_read(
    monkeypatch, relative: str
) -> None:
    # a file run's recount scans the blocks the parse's fast path inflates (one inflate);
    # when the fast path gives up before the end, the recount reads the file itself
    from kg_platform.pubmed.tables import parse_and_recount

    path = require_reference("pubmed", relative)
    own = recount_file(path)
    handed = recount.Recount()
    tables, _ = parse_file_stats(path, inflated=handed.feed)
    assert tables["articles"].num_rows == own["articles"]
    if handed.complete:
        assert handed.counts() == own
        monkeypatch.setattr(recount, "recount_file", None)  # not read again
    assert parse_and_recount(str(path), file_key(path))[2] == own


def test_which_reference_files_the_recount_counts_from_the_parse() -> None:
    # the legacy MedlineCitationSet goes to lxml (the fast path reads PubmedArticleSet only):
    # its recount reads the file itself; every other file is inflated once
    not_handed = set()
    for relative in sorted(EXPECTED_ROWS):
        handed = recount.Recount()
        parse_file_stats(require_reference("pubmed", relative), inflated=handed.feed)
        if not handed.complete:
            not_handed.add(relative)
    assert not_handed == {"legacy/medline16n0902.xml.gz"}


@pytest.mark.parametrize("block", [997, 65536])
def test_recount_of_handed_blocks_is_the_same_whatever_its_block(monkeypatch, block: int) -> None:
    # the parse hands 1 MiB blocks (and a 64 KiB head); the recount scans them in pieces
    path = require_reference("pubmed", "mirror/updatefiles/pubmed26n1335.xml.gz")
    monkeypatch.setattr(recount, "_BLOCK", block)
    handed = recount.Recount()
    parse_file_stats(path, inflated=handed.feed)
    assert handed.complete
    counts = handed.counts()
    keys = ("articles", "mesh_headings", "pubmed_references", "deletions")
    assert tuple(counts[k] for k in keys) == (30, 214, 1063, 6)
