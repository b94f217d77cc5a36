"""An independent, cheap recount of a PubMed XML file, to check the rows a parse wrote.

It shares nothing with :mod:`kg_platform.pubmed.parse`: no XML parser, only a byte scan of the
decompressed stream cut at record end tags. Each key equals a table expression of the parse
of the same file:

- ``articles``: ``PubmedArticle`` records (legacy ``MedlineCitationSet``: ``MedlineCitation``
  records) == ``articles.num_rows``.
- ``mesh_headings``: ``MeshHeading`` elements of those records == distinct
  ``(pmid, version, descriptor_ui)`` of ``mesh_edges`` (a heading yields one row, or one row
  per qualifier, all with its descriptor).
- ``pubmed_references``: per record, the distinct positive integers in
  ``ArticleId IdType="pubmed"`` inside its ``ReferenceList`` elements, summed over records ==
  ``citations.num_rows``.
- ``deletions``: distinct PMIDs listed in ``DeleteCitation`` == ``deletions.num_rows``.
- ``book_articles``: ``PubmedBookArticle`` records, which the parse skips.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

from kg_platform.pubmed.errors import PubmedFileError

_BLOCK = 8 << 20
_PUBMED_ENDS = re.compile(rb"</(PubmedArticle|PubmedBookArticle|DeleteCitation)>")
_LEGACY_ENDS = re.compile(rb"</(MedlineCitation|DeleteCitation)>")
_REFERENCE_ID = re.compile(
    rb"<ArticleId\s+IdType\s*=\s*[\"']pubmed[\"']\s*>\s*0*([1-9][0-9]*)\s*</ArticleId>"
)
_DELETED_PMID = re.compile(rb"<PMID(?:\s[^>]*)?>\s*0*([1-9][0-9]*)\s*</PMID>")


def recount_file(path: str | Path) -> dict[str, int]:
    """Count records, MeSH headings, PubMed-id references and deletions by scanning bytes."""
    path = Path(path)
    counts = {
        "articles": 0,
        "mesh_headings": 0,
        "pubmed_references": 0,
        "deletions": 0,
        "book_articles": 0,
    }
    deleted: set[bytes] = set()
    ends: re.Pattern[bytes] | None = None
    record_tag = b"PubmedArticle"
    pending = b""
    try:
        with open(path, "rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            stream = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
            while True:
                block = stream.read(_BLOCK)
                if not block:
                    break
                pending += block
                if ends is None:
                    if b"<MedlineCitationSet" in pending:
                        ends, record_tag = _LEGACY_ENDS, b"MedlineCitation"
                    elif b"<PubmedArticleSet" in pending:
                        ends = _PUBMED_ENDS
                    else:
                        continue
                start = 0
                for end in ends.finditer(pending):
                    unit = pending[start : end.start()]
                    start = end.end()
                    kind = end.group(1)
                    if kind == record_tag:
                        counts["articles"] += 1
                        counts["mesh_headings"] += unit.count(b"<MeshHeading>") + unit.count(
                            b"<MeshHeading "
                        )
                        counts["pubmed_references"] += _distinct_references(unit)
                    elif kind == b"PubmedBookArticle":
                        counts["book_articles"] += 1
                    else:
                        deleted.update(
                            _DELETED_PMID.findall(unit[unit.rfind(b"<DeleteCitation") :])
                        )
                pending = pending[start:]
    except (OSError, EOFError) as exc:
        raise PubmedFileError(f"{path.name}: recount cannot read the file: {exc}") from exc
    counts["deletions"] = len(deleted)
    return counts


def _distinct_references(record: bytes) -> int:
    first = record.find(b"<ReferenceList")
    if first < 0:
        return 0
    last = record.rfind(b"</ReferenceList>")
    return len(set(_REFERENCE_ID.findall(record, first, last if last > first else len(record))))
