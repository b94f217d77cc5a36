"""Broken and hostile files: each gives a PubmedFileError naming the file, nothing is expanded
or fetched. The files are written into tmp_path from a real record where one is needed."""

from __future__ import annotations

import gzip
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kg_platform.pubmed.errors import PubmedFileError
from kg_platform.pubmed.parse import parse_file, parse_file_stats
from kg_platform.pubmed.recount import recount_file
from kg_platform_tests.conftest import require_reference

HEAD = b'<?xml version="1.0" encoding="UTF-8"?>\n'


def real_xml() -> bytes:
    path = require_reference("pubmed", "mirror/baseline/pubmed26n1334.xml.gz")
    return gzip.decompress(path.read_bytes())


def first_record() -> bytes:
    return re.search(rb"<PubmedArticle>.*?</PubmedArticle>", real_xml(), re.S).group(0)


def write_gz(path: Path, data: bytes) -> Path:
    path.write_bytes(gzip.compress(data))
    return path


class ListeningServer:
    """A TCP listener on 127.0.0.1 that records whether anything connected to it."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def server() -> Iterator[ListeningServer]:
    listening = ListeningServer()
    yield listening
    listening.close()


def test_truncated_gzip(tmp_path: Path) -> None:
    source = require_reference("pubmed", "mirror/baseline/pubmed26n1334.xml.gz").read_bytes()
    path = tmp_path / "pubmed26n0042.xml.gz"
    path.write_bytes(source[: len(source) // 2])
    with pytest.raises(PubmedFileError, match=r"^pubmed26n0042\.xml\.gz: gzip stream is truncated"):
        parse_file(path)
    with pytest.raises(PubmedFileError, match=r"^pubmed26n0042\.xml\.gz: "):
        recount_file(path)


def test_gzip_cut_after_the_last_tag_is_still_an_error(tmp_path: Path) -> None:
    # the XML is complete, only the gzip trailer (CRC and length) is missing
    data = gzip.compress(real_xml())
    path = tmp_path / "pubmed26n0043.xml.gz"
    path.write_bytes(data[:-8])
    with pytest.raises(PubmedFileError, match=r"^pubmed26n0043\.xml\.gz: gzip stream"):
        parse_file(path)


def test_xml_that_breaks_mid_file(tmp_path: Path) -> None:
    xml = real_xml()
    # the 10th record's end tag is mangled: everything before it is well formed
    cut = [m.start() for m in re.finditer(rb"</PubmedArticle>", xml)][9]
    broken = xml[:cut] + b"</PubmedArticl>" + xml[cut + len(b"</PubmedArticle>") :]
    path = write_gz(tmp_path / "pubmed26n0042.xml.gz", broken)
    line = broken[:cut].count(b"\n") + 1
    with pytest.raises(PubmedFileError) as error:
        parse_file(path)
    message = str(error.value)
    assert message.startswith(f"pubmed26n0042.xml.gz: XML breaks at line {line}: ")
    assert "mismatch" in message


def test_xml_cut_off_mid_record(tmp_path: Path) -> None:
    xml = real_xml()
    path = write_gz(tmp_path / "pubmed26n0044.xml.gz", xml[: len(xml) // 2])
    with pytest.raises(PubmedFileError, match=r"^pubmed26n0044\.xml\.gz: XML breaks at line "):
        parse_file(path)


def test_record_without_pmid(tmp_path: Path) -> None:
    xml = real_xml().replace(b'<PMID Version="1">41576697</PMID>', b"", 1)
    path = write_gz(tmp_path / "pubmed26n0042.xml.gz", xml)
    with pytest.raises(
        PubmedFileError, match=r"^pubmed26n0042\.xml\.gz: record at line 4 has no PMID"
    ):
        parse_file(path)


def test_record_with_empty_pmid(tmp_path: Path) -> None:
    xml = real_xml().replace(b'<PMID Version="1">41576697</PMID>', b'<PMID Version="1"> </PMID>')
    path = write_gz(tmp_path / "pubmed26n0042.xml.gz", xml)
    with pytest.raises(PubmedFileError, match=r"has no PMID"):
        parse_file(path)


def test_non_numeric_pmid(tmp_path: Path) -> None:
    xml = real_xml().replace(
        b'<PMID Version="1">41576697</PMID>', b'<PMID Version="1">41576X97</PMID>', 1
    )
    path = write_gz(tmp_path / "pubmed26n0042.xml.gz", xml)
    with pytest.raises(
        PubmedFileError,
        match=r"^pubmed26n0042\.xml\.gz: record at line 4 has a non-numeric PMID '41576X97'",
    ):
        parse_file(path)


def test_external_entity_to_a_local_file_is_refused(tmp_path: Path) -> None:
    record = first_record().replace(b"<ArticleTitle>", b"<ArticleTitle>&xxe;", 1)
    doc = (
        HEAD
        + b'<!DOCTYPE PubmedArticleSet [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>\n'
        + b"<PubmedArticleSet>"
        + record
        + b"</PubmedArticleSet>"
    )
    path = tmp_path / "evil.xml"
    path.write_bytes(doc)
    with pytest.raises(PubmedFileError, match=r"^evil\.xml: declares XML entities \(xxe\)"):
        parse_file(path)


def test_external_entity_over_http_is_neither_fetched_nor_expanded(
    tmp_path: Path, server: ListeningServer
) -> None:
    url = f"http://127.0.0.1:{server.port}/secret".encode()
    record = first_record().replace(b"<ArticleTitle>", b"<ArticleTitle>&remote;", 1)
    doc = (
        HEAD
        + b'<!DOCTYPE PubmedArticleSet [<!ENTITY remote SYSTEM "'
        + url
        + b'"><!ENTITY % param SYSTEM "'
        + url
        + b'/param.dtd"> %param;]>\n<PubmedArticleSet>'
        + record
        + b"</PubmedArticleSet>"
    )
    path = write_gz(tmp_path / "pubmed26n0042.xml.gz", doc)
    with pytest.raises(PubmedFileError, match=r"^pubmed26n0042\.xml\.gz: declares XML entities"):
        parse_file(path)
    assert server.connections == 0


def test_remote_dtd_in_doctype_is_ignored_not_fetched(
    tmp_path: Path, server: ListeningServer
) -> None:
    doc = (
        HEAD
        + b'<!DOCTYPE PubmedArticleSet SYSTEM "http://127.0.0.1:'
        + str(server.port).encode()
        + b'/pubmed_190101.dtd">\n<PubmedArticleSet>'
        + first_record()
        + b"</PubmedArticleSet>"
    )
    path = tmp_path / "pubmed26n0045.xml"
    path.write_bytes(doc)
    tables = parse_file(path)
    assert tables["articles"].column("pmid").to_pylist() == [41576520]
    assert server.connections == 0


def test_billion_laughs_is_refused_without_expansion(tmp_path: Path) -> None:
    entities = b'<!ENTITY lol0 "lol">' + b"".join(
        b'<!ENTITY lol%d "%s">' % (i, b"".join([b"&lol%d;" % (i - 1)] * 10)) for i in range(1, 10)
    )
    record = first_record().replace(b"<ArticleTitle>", b"<ArticleTitle>&lol9;", 1)
    doc = (
        HEAD
        + b"<!DOCTYPE PubmedArticleSet ["
        + entities
        + b"]>\n<PubmedArticleSet>"
        + record
        + b"</PubmedArticleSet>"
    )
    path = write_gz(tmp_path / "pubmed26n0042.xml.gz", doc)
    with pytest.raises(PubmedFileError) as error:
        parse_file(path)
    assert str(error.value).startswith(
        "pubmed26n0042.xml.gz: declares XML entities (lol0, lol1, lol2, lol3, lol4); "
    )
    assert "not expanded" in str(error.value)


def test_undeclared_entity_is_an_xml_error(tmp_path: Path) -> None:
    record = first_record().replace(b"<ArticleTitle>", b"<ArticleTitle>&nbsp;", 1)
    path = tmp_path / "pubmed26n0046.xml"
    path.write_bytes(HEAD + b"<PubmedArticleSet>" + record + b"</PubmedArticleSet>")
    with pytest.raises(PubmedFileError, match=r"^pubmed26n0046\.xml: XML breaks at line 2: "):
        parse_file(path)


def test_not_a_pubmed_document(tmp_path: Path) -> None:
    path = tmp_path / "mesh.xml"
    path.write_bytes(HEAD + b"<DescriptorRecordSet><DescriptorRecord/></DescriptorRecordSet>")
    with pytest.raises(PubmedFileError, match=r"^mesh\.xml: root element is <DescriptorRecordSet>"):
        parse_file(path)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "pubmed26n0047.xml.gz"
    path.write_bytes(b"")
    with pytest.raises(PubmedFileError, match=r"^pubmed26n0047\.xml\.gz: "):
        parse_file(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PubmedFileError, match=r"^pubmed26n0048\.xml\.gz: cannot open"):
        parse_file(tmp_path / "pubmed26n0048.xml.gz")


def test_book_articles_are_counted_and_skipped(tmp_path: Path) -> None:
    book = (
        b'<PubmedBookArticle><BookDocument><PMID Version="1">20301295</PMID>'
        b"<ArticleTitle>GeneReviews chapter</ArticleTitle></BookDocument>"
        b'<PubmedBookData><ArticleIdList><ArticleId IdType="pubmed">20301295</ArticleId>'
        b"</ArticleIdList></PubmedBookData></PubmedBookArticle>"
    )
    doc = HEAD + b"<PubmedArticleSet>" + book + first_record() + book + b"</PubmedArticleSet>"
    path = write_gz(tmp_path / "pubmed26n0049.xml.gz", doc)
    tables, stats = parse_file_stats(path)
    assert stats.book_articles_skipped == 2
    assert stats.articles == 1
    assert tables["articles"].column("pmid").to_pylist() == [41576520]
    recount = recount_file(path)
    assert (recount["articles"], recount["book_articles"]) == (1, 2)


def test_empty_set_gives_empty_tables(tmp_path: Path) -> None:
    path = write_gz(tmp_path / "pubmed26n0050.xml.gz", HEAD + b"<PubmedArticleSet/>")
    tables, stats = parse_file_stats(path)
    assert all(t.num_rows == 0 for t in tables.values())
    assert stats.format == "PubmedArticleSet"
    assert recount_file(path)["articles"] == 0


def test_a_duplicated_record_fails_the_schema_check_naming_its_pmid(tmp_path: Path) -> None:
    from kg_platform.pubmed.tables import check_tables

    xml = real_xml()
    record = first_record()
    pmid = int(re.search(rb"<PMID[^>]*>(\d+)</PMID>", record).group(1))
    version = int(re.search(rb'<PMID[^>]*Version="(\d+)"', record).group(1))
    doubled = xml.replace(record, record + b"\n" + record, 1)
    path = write_gz(tmp_path / "pubmed26n1334.xml.gz", doubled)
    tables, _ = parse_file_stats(str(path), file="pubmed26n1334")
    checks = {c.name: c for c in check_tables(tables, recount_file(str(path)))}
    schema = checks["schema"]
    assert not schema.passed
    assert schema.details == (
        f"articles: duplicated (pmid, version) pmid {pmid}, version {version} (2 rows)"
    )


def test_rows_of_no_article_fail_the_check_counting_their_distinct_keys() -> None:
    import pyarrow as pa

    from kg_platform.pubmed.tables import check_tables
    from kg_platform.schemas import ARROW_SCHEMAS

    def table(name: str, rows: list[dict]) -> pa.Table:
        return pa.Table.from_pylist(rows, schema=ARROW_SCHEMAS[name])

    tables = {name: ARROW_SCHEMAS[name].empty_table() for name in ARROW_SCHEMAS}
    tables["articles"] = table("articles", [{"pmid": 1, "version": 1, "file": "f", "title": "t"}])
    # (2, 1) in two rows and (1, 2) in one: two keys; (1, 1) is an article's
    tables["mesh_edges"] = table(
        "mesh_edges",
        [
            {"pmid": p, "version": v, "descriptor_ui": d, "descriptor_major": False}
            for p, v, d in ((1, 1, "D1"), (2, 1, "D1"), (2, 1, "D2"), (1, 2, "D3"))
        ],
    )
    tables["citations"] = table(
        "citations", [{"citing_pmid": 3, "version": 1, "cited_pmid": 1}] * 2
    )
    checks = {c.name: c for c in check_tables(tables, {})}
    assert not checks["pmids_in_articles"].passed
    assert checks["pmids_in_articles"].details == "mesh_edges: 2; citations: 1"


def _mesh_table(rows: list[tuple]):
    import pyarrow as pa

    from kg_platform.schemas import ARROW_SCHEMAS

    return pa.Table.from_pylist(
        [
            {"pmid": p, "version": v, "descriptor_ui": d, "descriptor_major": False}
            for p, v, d in rows
        ],
        schema=ARROW_SCHEMAS["mesh_edges"],
    )


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        # in (pmid, version) order: D1 twice in record (1, 1), not next to each other; the
        # same descriptor in other records and versions counts again
        ([(1, 1, "D1"), (1, 1, "D2"), (1, 1, "D1"), (1, 2, "D1"), (2, 1, "D1"), (2, 1, "D2")], 5),
        # the same rows out of order (counted as the unique of the three columns)
        ([(2, 1, "D1"), (1, 1, "D1"), (1, 2, "D1"), (1, 1, "D2"), (2, 1, "D2"), (1, 1, "D1")], 5),
        # a null descriptor is one value
        ([(1, 1, "D1"), (1, 1, None), (1, 1, None), (3, 1, "D1")], 3),
        # qualifier rows of one heading: one heading each
        ([(5, 1, "D3"), (5, 1, "D3"), (5, 1, "D3"), (6, 1, "D3"), (7, 1, "D03")], 3),
        ([], 0),
    ],
)
def test_distinct_headings_is_the_unique_of_pmid_version_descriptor(rows, expected) -> None:
    import polars as pl

    from kg_platform.pubmed.tables import distinct_headings

    table = _mesh_table(rows)
    unique = pl.from_arrow(table).select("pmid", "version", "descriptor_ui").unique().height
    assert distinct_headings(table) == unique == expected
    # split in chunks, as a parse's flushes leave it
    if rows:
        chunked = pa_concat([table.slice(0, 1), table.slice(1)])
        assert distinct_headings(chunked) == expected


def pa_concat(tables):
    import pyarrow as pa

    return pa.concat_tables(tables)


def test_orphan_keys_beyond_one_integer_are_counted_on_both_columns() -> None:
    import polars as pl
    import pyarrow as pa

    from kg_platform.pubmed.tables import orphan_keys
    from kg_platform.schemas import ARROW_SCHEMAS

    def frame(name: str, rows: list[dict]) -> pl.DataFrame:
        return pl.from_arrow(pa.Table.from_pylist(rows, schema=ARROW_SCHEMAS[name]))

    big = (1 << 39) + 1
    frames = {name: frame(name, []) for name in ARROW_SCHEMAS}
    frames["articles"] = frame(
        "articles", [{"pmid": p, "version": 1, "file": "f"} for p in (1, 2, big)]
    )
    # (1, 2**23 + 1) as pmid * 2**23 + version would be (2, 1)'s integer: an orphan all the same
    frames["mesh_edges"] = frame(
        "mesh_edges",
        [
            {"pmid": p, "version": v, "descriptor_ui": "D1", "descriptor_major": False}
            for p, v in ((big, 1), (big, 2), (big, 2), (1, 1), (1, (1 << 23) + 1))
        ],
    )
    frames["pubtypes"] = frame("pubtypes", [{"pmid": 1, "version": 3, "name": "x"}])
    assert orphan_keys(frames) == {
        "mesh_edges": 2,
        "citations": 0,
        "corrections": 0,
        "chemicals": 0,
        "pubtypes": 1,
    }
    # every key inside one integer's range: counted on that integer, the same way
    frames["articles"] = frames["articles"].filter(pl.col("pmid") < big)
    frames["mesh_edges"] = frames["mesh_edges"].filter(pl.col("pmid") < big, pl.col("version") < 9)
    assert orphan_keys(frames) == {
        "mesh_edges": 0,
        "citations": 0,
        "corrections": 0,
        "chemicals": 0,
        "pubtypes": 1,
    }


@pytest.mark.parametrize(
    ("articles", "edges", "expected"),
    [
        # in (pmid, version) order, as a parse writes them: orphans before the first
        # article, between two, after the last, a version no article has, repeated rows
        ([(2, 1), (4, 1), (4, 2), (9, 1)], [(1, 1), (2, 1), (2, 1), (3, 1), (3, 1), (4, 3)], 3),
        ([(2, 1), (4, 1)], [(2, 1), (4, 1), (4, 1), (10, 1), (11, 1)], 2),
        ([(2, 1)], [(2, 1), (2, 1)], 0),
        ([], [(1, 1), (1, 1), (2, 1)], 2),
        ([(1, 1)], [], 0),
        # out of order (the anti-join): the same counts
        ([(4, 1), (2, 1)], [(11, 1), (2, 1), (10, 1), (4, 1), (4, 1)], 2),
        ([(2, 1), (4, 1)], [(3, 1), (1, 1), (3, 1)], 2),
        # a negative pmid packs in order too (the schema check fails it, not this count)
        ([(-5, 1), (2, 1)], [(-5, 1), (-5, 2), (2, 1)], 1),
    ],
)
def test_orphan_keys_are_the_distinct_keys_an_anti_join_leaves(articles, edges, expected) -> None:
    import polars as pl
    import pyarrow as pa

    from kg_platform.pubmed.tables import orphan_keys
    from kg_platform.schemas import ARROW_SCHEMAS

    def frame(name: str, rows: list[dict]) -> pl.DataFrame:
        return pl.from_arrow(pa.Table.from_pylist(rows, schema=ARROW_SCHEMAS[name]))

    frames = {name: frame(name, []) for name in ARROW_SCHEMAS}
    frames["articles"] = frame(
        "articles", [{"pmid": p, "version": v, "file": "f"} for p, v in articles]
    )
    frames["mesh_edges"] = frame(
        "mesh_edges",
        [
            {"pmid": p, "version": v, "descriptor_ui": "D1", "descriptor_major": False}
            for p, v in edges
        ],
    )
    frames["citations"] = frame(
        "citations", [{"citing_pmid": p, "version": v, "cited_pmid": 7} for p, v in edges]
    )
    anti_join = (
        frames["mesh_edges"]
        .select("pmid", "version")
        .join(frames["articles"].select("pmid", "version"), on=["pmid", "version"], how="anti")
        .unique()
        .height
    )
    assert orphan_keys(frames) == {
        "mesh_edges": expected,
        "citations": expected,
        "corrections": 0,
        "chemicals": 0,
        "pubtypes": 0,
    }
    assert anti_join == expected
