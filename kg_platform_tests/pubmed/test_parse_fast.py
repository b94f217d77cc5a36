"""The fast path gives exactly the tables of the lxml tree, on every real file and on records
written in every unusual form the fast path hands to lxml (a record, or the whole file).

Each test runs with both readers behind the fast path: the compiled one (``_reader.c``) and
the checked pattern reader that runs when the extension is not built."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from kg_platform.pubmed import _fast
from kg_platform.pubmed.parse import (
    TABLE_NAMES,
    parse_file,
)
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

READERS = ("compiled", "patterns")

# records of each file that each reader hands to lxml, and why
RECORDS_READ_BY_LXML = {
    "compiled": {
        "samples/pubmed25/baseline/pubmed25n1274.xml.gz": 1,  # a <?nihms ?> instruction
    },
    "patterns": {
        "efetch/biopython_pubmed6.xml": 1,  # MathML with attributes in the abstract
        "efetch/biopython_pubmed7.xml": 1,  # MathML with attributes in the abstract
        "mirror/baseline/pubmed26n1334.xml.gz": 1,  # a self-closed <ArticleTitle/>
        "samples/pubmed25/baseline/pubmed25n1274.xml.gz": 1,  # a <?nihms ?> instruction
        "samples/pubmed25/updatefiles/pubmed25n1275.xml.gz": 1,  # a self-closed <AbstractText/>
    },
}


@pytest.fixture(params=READERS)
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The reader behind the fast path for one test: the compiled one, or the pattern reader
    that runs when the extension is not built."""
    if request.param == "compiled":
        require_compiled_reader()
    else:
        monkeypatch.setattr(_fast, "compiled_reader", None)
    return request.param


@pytest.mark.parametrize(
    "relative", sorted(r for r in EXPECTED_ROWS if not r.startswith("legacy/"))
)
def test_fast_path_reads_every_pubmed_article_set_file_exactly(relative: str, reader: str) -> None:
    path = require_reference("pubmed", relative)
    fast, handed = fast_only(path)
    assert handed == RECORDS_READ_BY_LXML[reader].get(relative, 0)
    assert tuple(fast[name].num_rows for name in TABLE_NAMES) == EXPECTED_ROWS[relative]
    assert_same(fast, lxml_tables(path))


def test_legacy_set_goes_to_lxml(reader: str) -> None:
    path = require_reference("pubmed", "legacy/medline16n0902.xml.gz")
    with pytest.raises(_fast.NotSimple, match="prolog"):
        fast_only(path)


def with_abstract(record: bytes, abstract: bytes) -> bytes:
    return re.sub(rb"<Abstract>.*?</Abstract>", abstract, record, count=1, flags=re.S)


UNUSUAL = {
    # read by the fast path itself
    "inline markup": lambda r: with_title(
        r, b"<ArticleTitle>A <i>B</i> C<sup>2</sup></ArticleTitle>"
    ),
    "references": lambda r: with_title(
        r, b"<ArticleTitle>&lt;5 &amp; &#x3b1;&#946; &quot;q&quot;</ArticleTitle>"
    ),
    "label with reference": lambda r: with_abstract(
        r, b'<Abstract><AbstractText Label="A &amp; B">x</AbstractText></Abstract>'
    ),
    "empty sections": lambda r: with_abstract(
        r,
        b'<Abstract><AbstractText Label="X"> </AbstractText><AbstractText>y</AbstractText></Abstract>',
    ),
    # one record handed to lxml
    "markup with attributes": lambda r: with_title(
        r, b'<ArticleTitle>A <sup a="&gt;">2</sup></ArticleTitle>'
    ),
    "processing instruction": lambda r: with_title(r, b"<ArticleTitle>A<?pi x?>B</ArticleTitle>"),
    "comment": lambda r: with_title(r, b"<ArticleTitle>A<!-- c -->B</ArticleTitle>"),
    "self-closed title": lambda r: with_title(r, b"<ArticleTitle/>"),
    "label with a tab": lambda r: with_abstract(
        r, b'<Abstract><AbstractText Label="A\tB">x</AbstractText></Abstract>'
    ),
    "single-quoted label": lambda r: with_abstract(
        r, b"<Abstract><AbstractText Label='L'>x</AbstractText></Abstract>"
    ),
    # the whole file handed to lxml
    "CDATA": lambda r: with_title(r, b"<ArticleTitle><![CDATA[a<b]]></ArticleTitle>"),
    "comment holding markup": lambda r: with_title(
        r, b"<ArticleTitle>A<!-- <i> -->B</ArticleTitle>"
    ),
    "carriage return": lambda r: with_title(r, b"<ArticleTitle>A\r\nB</ArticleTitle>"),
    "element between records": lambda r: r + b"\n<Other>x</Other>",
    # forms the compiled reader reads or declines on its own terms
    "prefixed MathML": lambda r: with_title(
        r, b'<ArticleTitle>A <mml:math xmlns:mml="urn:m">x</mml:math></ArticleTitle>'
    ),
    "default namespace": lambda r: with_title(
        r, b'<ArticleTitle>A <Title xmlns="urn:m">x</Title></ArticleTitle>'
    ),
    "white space by reference": lambda r: with_title(
        r, b"<ArticleTitle>&#160;&#x2009;A&#10;B&#x3000;</ArticleTitle>"
    ),
    "non-ASCII white space": lambda r: with_title(
        r, "<ArticleTitle>\u00a0\u2028A\u00a0B\u202f</ArticleTitle>".encode()
    ),
    "spaced attributes and tags": lambda r: with_abstract(
        r,
        b"<Abstract ><AbstractText \n Label = 'A\nB' NlmCategory=\"X\" >x</AbstractText\n>"
        b'<AbstractText Label="E"/></Abstract >',
    ),
    "other abstract": lambda r: with_abstract(
        r,
        b"<Abstract><AbstractText>a</AbstractText></Abstract>"
        b"<OtherAbstract><AbstractText>b</AbstractText></OtherAbstract>"
        b"<AbstractText>c</AbstractText>",
    ),
    "title inside an author list": lambda r: r.replace(
        b"<LastName>", b"<LastName><Title>T</Title>", 1
    ),
    "record inside a record": lambda r: with_title(
        r, b"<ArticleTitle>A</ArticleTitle><DeleteCitation><PMID>5</PMID></DeleteCitation>"
    ),
}


# how each reader reads each case: by itself, one record by lxml, or the whole file by lxml
READ_BY = {
    "compiled": {
        "inline markup": 0,
        "references": 0,
        "label with reference": 0,
        "empty sections": 0,
        "markup with attributes": 0,
        "processing instruction": 1,
        "comment": 1,
        "self-closed title": 0,
        "label with a tab": 0,
        "single-quoted label": 0,
        "CDATA": 1,
        "comment holding markup": 1,
        "carriage return": 1,
        "element between records": "file",
        "prefixed MathML": 0,
        "default namespace": 1,
        "white space by reference": 0,
        "non-ASCII white space": 0,
        "spaced attributes and tags": 0,
        "other abstract": 0,
        "title inside an author list": 1,
        "record inside a record": "file",
    },
    "patterns": {
        "inline markup": 0,
        "references": 0,
        "label with reference": 0,
        "empty sections": 0,
        "markup with attributes": 1,
        "processing instruction": 1,
        "comment": 1,
        "self-closed title": 1,
        "label with a tab": 1,
        "single-quoted label": 1,
        "CDATA": "file",
        "comment holding markup": "file",
        "carriage return": "file",
        "element between records": "file",
        "prefixed MathML": 1,
        "default namespace": 1,
        "white space by reference": 0,
        "non-ASCII white space": 0,
        "spaced attributes and tags": 1,
        "other abstract": 0,
        "title inside an author list": 0,
        "record inside a record": "file",
    },
}


@pytest.mark.parametrize("case", sorted(UNUSUAL))
def test_unusual_forms_give_the_tables_of_the_lxml_tree(
    case: str, reader: str, tmp_path: Path
) -> None:
    record = UNUSUAL[case](first_record())
    other = first_record().replace(b">41576520<", b">41576521<", 1)
    path = tmp_path / "pubmed26n0042.xml.gz"
    path.write_bytes(gzip.compress(HEAD + record + b"\n" + other + b"\n</PubmedArticleSet>\n"))
    if READ_BY[reader][case] == "file":
        with pytest.raises(_fast.NotSimple):
            fast_only(path)
    else:
        assert fast_only(path)[1] == READ_BY[reader][case]
    tables = parse_file(path)
    assert tables["articles"].column("pmid").to_pylist() == [41576520, 41576521]
    assert_same(tables, lxml_tables(path))


@pytest.mark.parametrize("block", [64, 4096])
@pytest.mark.parametrize(
    "relative",
    [
        "samples/pubmed25/baseline/pubmed25n1274.xml.gz",  # the <?nihms ?> record
        "mirror/baseline/pubmed26n1334.xml.gz",
    ],
)
def test_both_paths_do_not_depend_on_block_boundaries(
    relative: str, block: int, reader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # with small blocks a record, and the instruction inside one, spans many reads; the
    # tree path's cut of unread subtrees is split everywhere too
    from kg_platform.pubmed import parse as parse_module

    path = require_reference("pubmed", relative)
    whole_blocks, _ = fast_only(path)
    monkeypatch.setattr(parse_module, "_READ_BLOCK", block)
    monkeypatch.setattr(parse_module, "_PROLOG_BYTES", 200)
    fast, handed = fast_only(path)
    assert handed == RECORDS_READ_BY_LXML[reader].get(relative, 0)
    assert_same(fast, whole_blocks)
    assert_same(lxml_tables(path), whole_blocks)
