"""An independent, cheap recount of a PubMed XML file, to check the rows a parse wrote.

It shares nothing with :mod:`kg_platform.pubmed.parse`: no XML parser, only a byte scan of the
decompressed stream cut at record end tags. A block of records only is scanned in one
compiled pass (``_recount.c``, the same counts as the ``bytes`` scans below, a third of their
CPU) when the extension is built. Each key equals a table expression of the parse
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
import zlib
from pathlib import Path

from kg_platform.pubmed.errors import PubmedFileError

try:  # ISA-L inflates several times faster than zlib (the parse uses it too, when installed)
    from isal import igzip as _igzip
    from isal.isal_zlib import error as _isal_error
except ImportError:  # pragma: no cover - isal is a dependency; zlib reads the same bytes
    _igzip = None
    _isal_error = zlib.error
_READ_ERRORS = (OSError, EOFError, zlib.error, _isal_error)

try:  # the scan below in one compiled pass (_recount.c, built at install): the same counts
    from kg_platform.pubmed._recount import scan as _compiled_scan
except ImportError:  # a source tree run without ``pip install -e .``: the scan below
    _compiled_scan = None

# small enough that the several scans of a block find it in the core's cache (8 MiB blocks
# cost a third more CPU)
_BLOCK = 256 << 10
_PUBMED_ENDS = re.compile(rb"</(PubmedArticle|PubmedBookArticle|DeleteCitation)>")
_LEGACY_ENDS = re.compile(rb"</(MedlineCitation|DeleteCitation)>")
_REFERENCE_ID = re.compile(
    rb"<ArticleId\s+IdType\s*=\s*[\"']pubmed[\"']\s*>\s*0*([1-9][0-9]*)\s*</ArticleId>"
)
# end tags of units that are not records of the set: a block holding one is counted one unit
# at a time
_OTHER_ENDS = (b"</PubmedBookArticle>", b"</DeleteCitation>")
_DELETED_PMID = re.compile(rb"<PMID(?:\s[^>]*)?>\s*0*([1-9][0-9]*)\s*</PMID>")


def recount_file(path: str | Path) -> dict[str, int]:
    """Count records, MeSH headings, PubMed-id references and deletions by scanning bytes."""
    path = Path(path)
    recount = Recount()
    try:
        with open(path, "rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            stream = _gzip_reader(raw) if gzipped else raw
            while True:
                block = stream.read(_BLOCK)
                recount.feed(block)
                if not block:
                    break
    except _READ_ERRORS as exc:
        raise PubmedFileError(f"{path.name}: recount cannot read the file: {exc}") from exc
    return recount.counts()


class Recount:
    """The recount of one file's decompressed bytes, handed over in order by whoever
    inflates the file: :func:`recount_file` (its own read), or the parse's fast path, which
    hands each block it inflates here before reading it (``parse_file_stats(inflated=...)``:
    one inflate serves both; the scan below still shares nothing with the parse's reader).
    ``feed(b"")`` says the stream ended: ``complete`` is then true and :meth:`counts` the
    file's counts; a reader that stops early leaves it false, and the caller recounts the
    file itself."""

    def __init__(self) -> None:
        self._counts = {
            "articles": 0,
            "mesh_headings": 0,
            "pubmed_references": 0,
            "deletions": 0,
            "book_articles": 0,
        }
        self._deleted: set[bytes] = set()
        self._ends: re.Pattern[bytes] | None = None
        self._record_tag = b"PubmedArticle"
        self._pending = b""
        self.complete = False

    def feed(self, block: bytes) -> None:
        """The next bytes of the decompressed stream (b"": the stream ended), scanned
        ``_BLOCK`` bytes at a time (a block that stays in the core's cache)."""
        if not block:
            self.complete = True
            return
        size = _BLOCK
        if len(block) <= size:
            self._scan(block)
            return
        view = memoryview(block)  # each piece is copied once, joined to the bytes pending
        for start in range(0, len(block), size):
            self._scan(view[start : start + size])

    def _scan(self, block: bytes | memoryview) -> None:
        pending = self._pending + block if self._pending else bytes(block)
        if self._ends is None:
            if b"<MedlineCitationSet" in pending:
                self._ends, self._record_tag = _LEGACY_ENDS, b"MedlineCitation"
            elif b"<PubmedArticleSet" in pending:
                self._ends = _PUBMED_ENDS
            else:
                self._pending = pending
                return
        start = _count_units(pending, self._ends, self._record_tag, self._counts, self._deleted)
        self._pending = pending[start:]

    def counts(self) -> dict[str, int]:
        """The counts of the bytes fed so far (the file's, once ``complete``)."""
        return {**self._counts, "deletions": len(self._deleted)}


def _gzip_reader(raw):
    """The inflated stream: ISA-L's when it is installed (several times zlib's speed), else
    zlib's; either checks the stream's CRC and length."""
    if _igzip is None:
        return gzip.GzipFile(fileobj=raw, mode="rb")
    return _igzip.IGzipFile(fileobj=raw, mode="rb")


def _count_units(
    data: bytes, ends: re.Pattern[bytes], record_tag: bytes, counts: dict, deleted: set
) -> int:
    """Count the complete units of ``data`` (each ends at a record or DeleteCitation end
    tag); returns where the incomplete rest starts. Positions index ``data``: no unit is
    copied."""
    end_tag = b"</" + record_tag + b">"
    last = data.rfind(end_tag)
    if last < 0:
        return _count_each_unit(data, ends, record_tag, counts, deleted)
    if _compiled_scan is not None:
        counted = _compiled_scan(data, end_tag, last)
        if counted is None:  # a book article or a deletion: one unit at a time
            return _count_each_unit(data, ends, record_tag, counts, deleted)
        counts["articles"] += counted[0]
        counts["mesh_headings"] += counted[1]
        counts["pubmed_references"] += counted[2]
        return last + len(end_tag)
    if any(tag in data for tag in _OTHER_ENDS):
        return _count_each_unit(data, ends, record_tag, counts, deleted)
    # every unit up to the last record end is a record: a heading or the start of a
    # reference list belongs to the record whose end tag follows it
    done = last + len(end_tag)
    counts["articles"] += data.count(end_tag, 0, done)
    counts["mesh_headings"] += data.count(b"<MeshHeading>", 0, last) + data.count(
        b"<MeshHeading ", 0, last
    )
    pos = 0
    while (first := data.find(b"<ReferenceList", pos, last)) >= 0:
        record_end = data.find(end_tag, first)
        pos = record_end + len(end_tag)
        counts["pubmed_references"] += _distinct_references(data, first, record_end)
    return done


def _count_each_unit(
    data: bytes, ends: re.Pattern[bytes], record_tag: bytes, counts: dict, deleted: set
) -> int:
    """:func:`_count_units` one unit at a time (a block with book articles or deletions)."""
    start = 0
    for end in ends.finditer(data):
        unit_start, unit_end = start, end.start()
        start = end.end()
        kind = end.group(1)
        if kind == record_tag:
            counts["articles"] += 1
            counts["mesh_headings"] += data.count(
                b"<MeshHeading>", unit_start, unit_end
            ) + data.count(b"<MeshHeading ", unit_start, unit_end)
            first = data.find(b"<ReferenceList", unit_start, unit_end)
            if first >= 0:
                counts["pubmed_references"] += _distinct_references(data, first, unit_end)
        elif kind == b"PubmedBookArticle":
            counts["book_articles"] += 1
        else:
            unit = data[unit_start:unit_end]
            deleted.update(_DELETED_PMID.findall(unit[unit.rfind(b"<DeleteCitation") :]))
    return start


def _distinct_references(data: bytes, first: int, record_end: int) -> int:
    """The distinct PubMed ids from a record's first ``<ReferenceList`` (at ``first``) to its
    last ``</ReferenceList>`` (to the record's end when there is none after it)."""
    last = data.rfind(b"</ReferenceList>", first, record_end)
    return len(set(_REFERENCE_ID.findall(data, first, last if last > first else record_end)))
