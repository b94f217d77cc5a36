"""The recount's compiled scan (``_recount.c``): the same counts as its Python scan.

``recount_file`` counts a block of records in one compiled pass when the extension is built,
else with one ``bytes`` scan per tag; both must give the same dict on every real file and on
records written to reach each rule of the scan.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from kg_platform.pubmed import recount
from kg_platform.pubmed.recount import recount_file
from kg_platform_tests.conftest import require_reference
from kg_platform_tests.support.parse import EXPECTED_ROWS


def require_compiled_scan() -> None:
    """Skip when the extension is not built (a source tree), fail under CI=true."""
    if recount._compiled_scan is None:
        message = "the recount's compiled scan is not built (pip install -e .)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)


def both_ways(monkeypatch: pytest.MonkeyPatch, path: Path, block: int) -> tuple[dict, dict]:
    """recount_file compiled and in Python, blocks of ``block`` bytes."""
    monkeypatch.setattr(recount, "_BLOCK", block)
    compiled = recount_file(path)
    monkeypatch.setattr(recount, "_compiled_scan", None)
    python = recount_file(path)
    monkeypatch.undo()
    return compiled, python


@pytest.mark.parametrize("relative", sorted(EXPECTED_ROWS))
def test_compiled_and_python_scans_count_every_real_file_the_same(
    monkeypatch: pytest.MonkeyPatch, relative: str
) -> None:
    require_compiled_scan()
    path = require_reference("pubmed", relative)
    for block in (997, 256 << 10):
        compiled, python = both_ways(monkeypatch, path, block)
        assert compiled == python, (relative, block)


RECORDS = b"""<?xml version="1.0" encoding="UTF-8"?>
<PubmedArticleSet>
<PubmedArticle><MedlineCitation><PMID Version="1">1</PMID><MeshHeadingList>
<MeshHeading><DescriptorName UI="D1">A</DescriptorName></MeshHeading>
<MeshHeading  ><DescriptorName UI="D2">B</DescriptorName></MeshHeading>
</MeshHeadingList></MedlineCitation><PubmedData><ArticleIdList>
<ArticleId IdType="pubmed">1</ArticleId></ArticleIdList><ReferenceList>
<Reference><ArticleIdList><ArticleId IdType="pubmed">7</ArticleId></ArticleIdList></Reference>
<Reference><ArticleIdList><ArticleId  IdType = 'pubmed' > 007 </ArticleId></ArticleIdList>
</Reference><Reference><ArticleIdList><ArticleId IdType="pmc">PMC9</ArticleId>
<ArticleId IdType="pubmed">0</ArticleId></ArticleIdList></Reference><Reference><ArticleIdList>
<ArticleId\tIdType="pubmed">12345678901234567890123</ArticleId></ArticleIdList></Reference>
</ReferenceList><ArticleId IdType="pubmed">99</ArticleId></PubmedData></PubmedArticle>
<PubmedArticle><MedlineCitation><PMID Version="1">2</PMID><MeshHeadingList></MeshHeadingList>
</MedlineCitation><PubmedData><ArticleIdList><ArticleId IdType="pubmed">5</ArticleId>
</ArticleIdList></PubmedData></PubmedArticle>
<PubmedArticle><MedlineCitation><PMID Version="1">3</PMID></MedlineCitation><PubmedData>
<ReferenceList><Reference><ArticleIdList><ArticleId IdType="pubmed">41</ArticleId>
</ArticleIdList></Reference></ReferenceList><ArticleId IdType="pubmed">42</ArticleId>
<ReferenceList Type="x"><Reference><ArticleIdList><ArticleId IdType="pubmed">41</ArticleId>
<ArticleId IdType="pubmed">43</ArticleId></ArticleIdList></Reference></ReferenceList>
</PubmedData></PubmedArticle>
<PubmedArticle><MedlineCitation><PMID Version="1">4</PMID><MeshHeadingList>
<MeshHeading><DescriptorName UI="D3">C</DescriptorName></MeshHeading></MeshHeadingList>
</MedlineCitation><PubmedData><ReferenceList><ArticleId IdType="pubmed">8</ArticleId>
</PubmedData></PubmedArticle>
"""
# per record: headings 2, 0, 0, 1; distinct reference ids from the first <ReferenceList to
# the last </ReferenceList> (to the record's end when none closes): {7, 123...} (007 is 7, 0
# and the pmc id match nothing, 1 is before the list and 99 after it), none, {41, 42, 43},
# {8}
EXPECTED = {
    "articles": 4,
    "mesh_headings": 3,
    "pubmed_references": 6,
    "deletions": 0,
    "book_articles": 0,
}
BOOK_AND_DELETION = b"""<PubmedBookArticle><BookDocument><PMID>9</PMID></BookDocument>
</PubmedBookArticle>
<DeleteCitation><PMID Version="1">11</PMID><PMID Version="1">12</PMID><PMID>11</PMID>
</DeleteCitation>
"""


@pytest.mark.parametrize("block", [64, 997, 256 << 10])
@pytest.mark.parametrize("packed", ["xml", "gz"])
def test_each_rule_of_the_scan_counts_the_same_both_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int, packed: str
) -> None:
    require_compiled_scan()
    plain = RECORDS + b"</PubmedArticleSet>\n"
    mixed = RECORDS + BOOK_AND_DELETION + RECORDS.split(b"<PubmedArticleSet>\n")[1]
    mixed += b"</PubmedArticleSet>\n"
    legacy = (
        RECORDS.replace(b"PubmedArticleSet", b"MedlineCitationSet")
        .replace(b"</PubmedArticle>", b"")
        .replace(b"<PubmedArticle>", b"")
        .replace(b"</MedlineCitation><PubmedData>", b"")
        .replace(b"</PubmedData>", b"</MedlineCitation>")
        + b"</MedlineCitationSet>\n"
    )
    twice = {k: 2 * v for k, v in EXPECTED.items()}
    for name, data, expected in (
        ("plain", plain, EXPECTED),
        ("mixed", mixed, {**twice, "deletions": 2, "book_articles": 1}),
        ("legacy", legacy, EXPECTED),
    ):
        path = tmp_path / f"{name}.{packed}"
        path.write_bytes(gzip.compress(data) if packed == "gz" else data)
        compiled, python = both_ways(monkeypatch, path, block)
        assert compiled == python == expected, (name, block)


def test_the_scan_alone() -> None:
    require_compiled_scan()
    tag = b"</PubmedArticle>"
    data = RECORDS + b"<PubmedArticle><MedlineCitation><MeshHeading>"  # an incomplete record
    last = data.rfind(tag)
    assert recount._compiled_scan(data, tag, last) == (4, 3, 6)
    assert recount._compiled_scan(data + b"</DeleteCitation>", tag, last) is None
    assert recount._compiled_scan(b"x</PubmedBookArticle>" + data, tag, last + 21) is None
    with pytest.raises(ValueError, match="last must be where end_tag starts"):
        recount._compiled_scan(data, tag, len(data))


@pytest.mark.parametrize("shift", range(18))
def test_the_scan_counts_the_same_at_every_offset_in_its_16_byte_steps(shift: int) -> None:
    # the scan looks for the tags it reads 16 bytes at a time (SSE2) and byte by byte in the
    # last 17: every tag at every offset, and a block ending right after a record's end tag
    require_compiled_scan()
    tag = b"</PubmedArticle>"
    data = b" " * shift + RECORDS
    last = data.rfind(tag)
    assert recount._compiled_scan(data, tag, last) == (4, 3, 6)
    assert recount._compiled_scan(data[: last + len(tag)], tag, last) == (4, 3, 6)
    deleted = data[: last + len(tag)] + b" " * shift + b"</DeleteCitation>"
    assert recount._compiled_scan(deleted, tag, last) is None
    legacy = b"</MedlineCitation>"  # a legacy set's record end: "</M" is read too
    records = data.replace(legacy, b"").replace(tag, legacy)
    assert recount._compiled_scan(records, legacy, records.rfind(legacy)) == (4, 3, 6)
