"""The compiled reader (``_reader.c``) behind the fast path: built where it must be, used on
the real files, never accepting what libxml2 rejects and never reading a field differently.

The same-output tests over every reference file run with it in test_parse_fast.py."""

from __future__ import annotations

import gzip
import importlib.util
import re
import sys
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kg_platform.pubmed
from kg_platform.pubmed import _fast
from kg_platform.pubmed.columns import Columns
from kg_platform.pubmed.errors import PubmedFileError
from kg_platform.pubmed.parse import TABLE_NAMES, _open_xml, _slow_record, parse_file
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.support.parse import (
    EXPECTED_ROWS,
    HEAD,
    assert_same,
    fast_only,
    first_record,
    lxml_tables,
    require_compiled_reader,
    with_title,
)

END = b"\n</PubmedArticleSet>\n"
RECORD = re.compile(rb"<PubmedArticle>.*?</PubmedArticle>", re.S)


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch):
    """The compiled reader, with the pattern reader made to fail if anything reaches it."""
    require_compiled_reader()

    def not_here(*args: object) -> str:
        raise AssertionError("the pattern reader ran instead of the compiled one")

    monkeypatch.setattr(_fast, "_stream_checked", not_here)
    return _fast.compiled_reader


def test_the_compiled_reader_is_built() -> None:
    # skips in a source tree that was never built; under CI=true (make venv ran) it must be
    require_compiled_reader()
    assert len(Columns("x").row_lists()) == _fast.compiled_reader.N_COLUMN_LISTS


def test_without_the_extension_the_fast_path_imports_and_uses_the_pattern_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a fresh copy of _fast imported as in a source tree never built: no error, no reader
    monkeypatch.setitem(sys.modules, "kg_platform.pubmed._reader", None)
    monkeypatch.delattr(kg_platform.pubmed, "_reader", raising=False)
    spec = importlib.util.spec_from_file_location("_fast_unbuilt", _fast.__file__)
    unbuilt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(unbuilt)
    assert unbuilt.compiled_reader is None
    # and the parser then reads every file exactly through the pattern reader
    # (test_parse_fast.py runs each file that way); one here through parse_file
    monkeypatch.setattr(_fast, "compiled_reader", None)
    path = require_reference("pubmed", "mirror/updatefiles/pubmed26n1335.xml.gz")
    tables = parse_file(path)
    assert (
        tuple(tables[name].num_rows for name in TABLE_NAMES)
        == EXPECTED_ROWS["mirror/updatefiles/pubmed26n1335.xml.gz"]
    )


# articles in every PubmedArticleSet file of the reference data, and those the compiled
# reader declines: one, holding a <?nihms ?> processing instruction (pubmed25n1274)
ALL_ARTICLES = 288
ALL_DECLINED = 1


def test_the_compiled_reader_reads_the_real_files_itself(compiled) -> None:
    mirror = ["mirror/baseline/pubmed26n1334.xml.gz", "mirror/updatefiles/pubmed26n1335.xml.gz"]
    for relative in mirror:
        tables, declined = fast_only(require_reference("pubmed", relative))
        assert (tables["articles"].num_rows, declined) == (30, 0), relative
    articles = declined = 0
    for relative in EXPECTED_ROWS:
        if relative.startswith("legacy/"):
            continue
        tables, handed = fast_only(require_reference("pubmed", relative))
        articles += tables["articles"].num_rows
        declined += handed
    assert (articles, declined) == (ALL_ARTICLES, ALL_DECLINED)


@pytest.mark.parametrize("flush_every", [1, 7])
def test_flushes_between_batches_change_nothing(compiled, flush_every: int) -> None:
    path = require_reference("pubmed", "mirror/updatefiles/pubmed26n1335.xml.gz")
    columns = Columns("pubmed26n1335")
    with _open_xml(path, fast=True) as stream:
        _fast.stream_records(
            stream, path.name, columns, _slow_record(columns, path.name), flush_every
        )
    # one flush each time flush_every articles are pending (to_tables flushes the rest)
    assert len(columns.parts["articles"]) == 30 // flush_every
    assert_same(columns.to_tables(), lxml_tables(path))


def document(tmp_path: Path, *records: bytes, gzipped: bool = True) -> Path:
    data = HEAD + b"\n".join(records) + END
    path = tmp_path / ("pubmed26n0042.xml.gz" if gzipped else "pubmed26n0042.xml")
    path.write_bytes(gzip.compress(data) if gzipped else data)
    return path


def test_white_space_is_stripped_as_python_strips_it(compiled, tmp_path: Path) -> None:
    # every character str.strip() removes (less the controls XML forbids), a few it keeps,
    # written as UTF-8 and as character references, around and inside a title
    spaces = [c for c in range(0x110000) if chr(c).isspace()]
    xml_chars = [c for c in spaces if c in (0x9, 0xA, 0xD) or c >= 0x20]
    kept = [0x200B, 0x180E, 0xFEFF, 0x2060, 0x61]
    records = []
    pmid = 41576520
    for c in xml_chars + kept:
        for written in (chr(c).encode(), f"&#x{c:x};".encode()):
            title = (
                b"<ArticleTitle>" + written + b"A" + written + b"B" + written + b"</ArticleTitle>"
            )
            record = with_title(first_record(), title)
            records.append(record.replace(b">41576520<", f">{pmid}<".encode(), 1))
            pmid += 1
    path = document(tmp_path, *records)
    tables, declined = fast_only(path)
    # a carriage return, raw or by reference, is left to lxml
    assert (tables["articles"].num_rows, declined) == (len(records), 2)
    assert_same(tables, lxml_tables(path))


# records libxml2 rejects: the compiled reader must not accept them, and the parser reports
# lxml's error for the file
BROKEN = {
    "undeclared entity": b"<ArticleTitle>A &nbsp; B</ArticleTitle>",
    "invalid UTF-8": b"<ArticleTitle>A \xff B</ArticleTitle>",
    "overlong UTF-8": b"<ArticleTitle>A \xc0\xae B</ArticleTitle>",
    "surrogate in UTF-8": b"<ArticleTitle>A \xed\xa0\x80 B</ArticleTitle>",
    "control character": b"<ArticleTitle>A \x0b B</ArticleTitle>",
    "reference to a control": b"<ArticleTitle>A &#1; B</ArticleTitle>",
    "reference to a surrogate": b"<ArticleTitle>A &#xD800; B</ArticleTitle>",
    "CDATA end in text": b"<ArticleTitle>A ]]> B</ArticleTitle>",
    "mismatched tag": b"<ArticleTitle>A <i>B</b></ArticleTitle>",
    "repeated attribute": b'<ArticleTitle a="1" a="2">A</ArticleTitle>',
    "unquoted attribute": b"<ArticleTitle a=1>A</ArticleTitle>",
    "attributes run together": b'<ArticleTitle a="1"b="2">A</ArticleTitle>',
    "less-than in an attribute": b'<ArticleTitle a="<">A</ArticleTitle>',
    "bare ampersand": b"<ArticleTitle>A & B</ArticleTitle>",
    "unclosed element": b"<ArticleTitle>A <i>B</ArticleTitle>",
    "undeclared prefix": b"<ArticleTitle>A <m:i>B</m:i></ArticleTitle>",
    "empty namespace": b'<ArticleTitle>A <m:i xmlns:m="">B</m:i></ArticleTitle>',
    "one attribute twice by namespace": (
        b'<ArticleTitle xmlns:m="u" xmlns:n="u" m:a="1" n:a="2">A</ArticleTitle>'
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_records_are_lxml_errors(compiled, case: str, tmp_path: Path) -> None:
    record = with_title(first_record(), BROKEN[case])
    doc = HEAD + record + END
    columns = Columns("x")
    _, state, _, _ = compiled.scan(doc, len(HEAD), columns.row_lists(), columns.deleted, 9)
    assert state == compiled.DECLINED and columns.pending == 0
    path = document(tmp_path, record)
    with pytest.raises(PubmedFileError) as from_parser:
        parse_file(path)
    with pytest.raises(PubmedFileError) as from_lxml:
        lxml_tables(path)
    assert str(from_parser.value) == str(from_lxml.value)


# ---------------------------------------------------------------- fuzzing real records

# what a mutation inserts anywhere: markup the reader must check, references, white space,
# bytes that are not XML, and pieces of the fields it reads
INSERTS = [
    *(b"<", b">", b"&", b"/", b"=", b'"', b"'", b" ", b"\n", b"\t", b"\r", b"\x00", b"\x0b"),
    *(b"&amp;", b"&lt", b"&#65;", b"&#x1F600;", b"&#0;", b"&#xD800;", b"&#13;", b"&#10;"),
    *(b"&foo;", b"&#x;", b"]]>", b"<![CDATA[x]]>", b"<!-- c -->", b"<?pi x?>", b"<!DOCTYPE x>"),
    *(b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xef\xbf\xbe", b"\xe2\x80", b"\xf4\x90\x80\x80"),
    *(b"<i>", b"</i>", b"<b/>", b' a="1"', b" a='&lt;'", b' xmlns="urn:x"', b" xmlns:m='urn:m'"),
    *(b"<m:i>", b"</m:i>", b"<PMID>7</PMID>", b"<PMID>", b"</PMID>", b"<Title>", b"</Title>"),
    *(b"<ArticleTitle/>", b'<AbstractText Label="L">', b"</AbstractText>", b"<OtherAbstract>"),
    *(b"<DeleteCitation>", b"<PubmedArticle>", b"<QualifierName>", b"<MeshHeading>"),
    *(b"<Chemical>", b"<Language>", b"<PubDate>", b"<ReferenceList>", b"<ArticleId>"),
    *(b"<m:i>", b"</m:i>", b":", b"<a:b:c>", b' m:a="1"', b' xmlns:m=""', b' xmlns:xml="u"'),
]
# well-formed pieces for text, which the reader should read itself
TEXT = [
    *(b"&amp;", b"&lt;i&gt;", b"&#65;", b"&#x1F600;", b"&#10;", b"&#160;", b"&quot;&apos;"),
    *(" \u00a0".encode(), "\u2028".encode(), "\u3000x".encode(), "\u0663".encode(), b"]]"),
    *(b"<i>x</i>", b"<b/>", b"<sup>2</sup>", b" ", b"\n", b"\t", b">", b"'", b'"', b"2019"),
    *(b"<PMID>7</PMID>", b'<Year a="1">1999</Year>', b"<Title>T</Title>", b"<Language/>"),
    *(b"<MedlineDate>x 2001</MedlineDate>", b'<AbstractText Label="L">t</AbstractText>'),
    *(b"<OtherAbstract><AbstractText>o</AbstractText></OtherAbstract>", b"<ArticleTitle/>"),
    *(b'<ArticleId IdType="pubmed">123</ArticleId>', b'<QualifierName UI="Q1">q</QualifierName>'),
    *(b'<m:i xmlns:m="urn:m">x<m:b m:a="1"/></m:i>', b'<x:Title xmlns:x="urn:x">T</x:Title>'),
    *(b'<m:math xmlns:m="urn:m"><m:mi>x</m:mi><PMID>8</PMID></m:math>', b'<i xmlns="urn:x">y</i>'),
]
# well-formed attributes, put right after an element's name
ATTRIBUTES = [
    *(b' a="1"', b" a='&lt;'", b' a="x\ty"', b' a = "&#9;"', b' Label="Q"', b' Version="2"'),
    *(b' UI="D9"', b' MajorTopicYN="Y"', b' IdType="pubmed"', b' RefType="X"', b"\n b='\"'"),
    *(b' xmlns:m="urn:m"', b' xmlns="urn:x"', b' m:a="1"', b' xmlns:m="urn:m" m:UI="D1"'),
    *(b' xmlns:m="u" xmlns:n="u" m:a="1" n:a="2"', b' xml:lang="en"'),
]


@cache
def real_records() -> tuple[bytes, ...]:
    records: list[bytes] = []
    for relative in (
        "mirror/baseline/pubmed26n1334.xml.gz",
        "mirror/updatefiles/pubmed26n1335.xml.gz",
    ):
        data = gzip.decompress(require_reference("pubmed", relative).read_bytes())
        records.extend(RECORD.findall(data))
    # the shorter half: a mutation lands in a field more often
    return tuple(sorted(records, key=len)[: len(records) // 2])


@st.composite
def mutated_records(draw: st.DrawFn) -> bytes:
    record = bytearray(draw(st.sampled_from(real_records())))
    for _ in range(draw(st.integers(1, 3))):
        how = draw(
            st.sampled_from(["text", "text", "attribute", "insert", "delete", "byte", "repeat"])
        )
        if how == "text":
            # inside the text of an element
            runs = [m.start() + 1 for m in re.finditer(rb">[^<]", record)]
            at = draw(st.sampled_from(runs)) if runs else 0
            record[at:at] = draw(st.sampled_from(TEXT))
            continue
        if how == "attribute":
            names = [m.end() for m in re.finditer(rb"<[A-Za-z]+", record)]
            at = draw(st.sampled_from(names))
            record[at:at] = draw(st.sampled_from(ATTRIBUTES))
            continue
        # near markup half the time, where the reader makes its decisions
        markup = [m.start() for m in re.finditer(rb'[<>"&]', record)]
        if draw(st.booleans()):
            at = min(len(record), draw(st.sampled_from(markup)) + draw(st.integers(0, 12)))
        else:
            at = draw(st.integers(0, len(record)))
        if how == "insert":
            record[at:at] = draw(st.sampled_from(INSERTS))
        elif how == "delete":
            del record[at : at + draw(st.integers(1, 8))]
        elif how == "byte" and at < len(record):
            record[at] = draw(st.integers(0, 255))
        elif how == "repeat":
            record[at:at] = record[at : at + draw(st.integers(1, 40))]
    return bytes(record)


@settings(
    max_examples=250,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(record=mutated_records())
def test_fuzz_what_the_compiled_reader_accepts_lxml_reads_the_same(
    compiled, tmp_path: Path, record: bytes
) -> None:
    doc = HEAD + record + END
    path = tmp_path / "pubmed26n0042.xml"
    path.write_bytes(doc)
    columns = Columns("pubmed26n0042")
    _, state, _, _ = compiled.scan(doc, len(HEAD), columns.row_lists(), columns.deleted, 9)
    if state == compiled.END:
        # accepted: libxml2 must read the same document without complaint, to the same rows
        assert_same(columns.to_tables(), lxml_tables(path))
    else:
        assert columns.pending == 0  # a declined record leaves no row behind
    # and whatever the reader did, the parser gives lxml's tables or lxml's error
    try:
        expected = lxml_tables(path)
    except PubmedFileError as exc:
        with pytest.raises(PubmedFileError) as got:
            parse_file(path)
        assert str(got.value) == str(exc)
    else:
        assert_same(parse_file(path), expected)
