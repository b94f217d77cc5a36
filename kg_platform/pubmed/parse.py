"""Stream one NLM PubMed XML file (gzipped or plain) into seven Arrow tables.

Accepts the baseline/update and E-utilities efetch form (``PubmedArticleSet``) and the retired
2016 ``MedlineCitationSet`` form (bare ``MedlineCitation`` records, which carry no
``PubmedData`` and so no references). ``PubmedBookArticle`` records are counted and skipped.

Two readers give the same tables: a fast path (:mod:`kg_platform.pubmed._fast`: a compiled
byte-level reader, ``_reader.c``, checks and reads each record in one pass, or, where that
extension is not built, libxml2 checks the bytes and compiled patterns read the fields; lxml
reads any record either declines), and lxml's tree for the whole file, used whenever the fast
path finds anything it cannot read exactly, bad input included, so errors are the tree
parser's.

Safety: the parser never loads a DTD, never touches the network and never substitutes
entities; a document that declares any entity is rejected before any text is read, so a
billion-laughs or external-entity file is refused rather than expanded.

Row definitions (the recount in :mod:`kg_platform.pubmed.recount` counts the same things):

Every table is sorted by pmid, then version (a stable sort: rows of one record keep NLM's order).

- ``articles``: one row per ``PubmedArticle`` (or legacy ``MedlineCitation``). Title and
  abstract are the element text with inline markup flattened; abstract sections are joined
  with newlines as ``LABEL: text``; ``year`` is the issue's ``PubDate`` year (first year of a
  ``MedlineDate``); ``language`` is the first ``Language``.
- ``mesh_edges``: one row per heading without qualifiers (qualifier columns null) and one
  row per heading/qualifier pair otherwise, as NLM gives them.
- ``citations``: the ``ArticleId IdType="pubmed"`` values under the record's
  ``ReferenceList`` elements (nested lists included), kept once per citing record in first-seen
  order; a value that is not a positive integer is not a PMID and is dropped.
- ``deletions``: the distinct PMIDs listed in ``DeleteCitation``.
"""

from __future__ import annotations

import gzip
import re
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
from lxml import etree

from kg_platform.pubmed import _fast

# the tables' names and Arrow schemas are named here for the parser's callers too
from kg_platform.pubmed.columns import SCHEMAS, TABLE_NAMES, Columns  # noqa: F401
from kg_platform.pubmed.errors import PubmedFileError

try:  # optional: ISA-L inflates about three times as fast as zlib
    from isal import igzip as _fast_gzip
    from isal.isal_zlib import error as _IsalError
except ImportError:  # pragma: no cover - the fast path then inflates with zlib
    _fast_gzip = None
    _IsalError = zlib.error

# what makes the fast path hand the whole file to lxml, which then reports any bad input
_FAST_PATH_GIVES_UP = (
    _fast.NotSimple,
    PubmedFileError,
    EOFError,
    zlib.error,
    _IsalError,
    OSError,
    UnicodeDecodeError,
)

_PUBMED_SET = "PubmedArticleSet"
_LEGACY_SET = "MedlineCitationSet"
_RECORD_TAGS = ("PubmedArticle", "PubmedBookArticle", "MedlineCitation", "DeleteCitation")
# the records of a PubmedArticleSet that the fast path may hand to _slow_record one at a time
_SET_RECORD_TAGS = ("PubmedArticle", "PubmedBookArticle", "DeleteCitation")
_ENTITY_DECLARATION = re.compile(rb"<!ENTITY\s+(?:%\s+)?([^\s>]+)")
_PROLOG_BYTES = 1 << 16
# lxml over records: the fast path's safe parsing, comments and processing instructions dropped
_RECORD_PARSING = {**_fast.SAFE_PARSING, "remove_comments": True, "remove_pis": True}
_SUFFIXES = (".xml.gz", ".xml", ".gz")
# records held as Python lists before they move into Arrow; bounds the parser's memory
_FLUSH_EVERY = 2048


@dataclass(frozen=True)
class ParseStats:
    """What one parse saw: records written and skipped, and how long it took."""

    file: str
    articles: int
    book_articles_skipped: int
    deletions: int
    seconds: float
    format: str = _PUBMED_SET
    mesh_edges: int = 0
    citations: int = 0

    @property
    def records_per_s(self) -> float:
        return self.articles / self.seconds if self.seconds > 0 else 0.0


def file_key(path: str | Path) -> str:
    """``.../pubmed26n1334.xml.gz`` -> ``pubmed26n1334``."""
    name = Path(path).name
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def parse_file(path: str | Path, file: str | None = None) -> dict[str, pa.Table]:
    """Parse one PubMed XML file into the seven per-file tables, each sorted by pmid, version."""
    tables, _ = parse_file_stats(path, file)
    return tables


def parse_file_stats(
    path: str | Path, file: str | None = None, inflated: Callable[[bytes], None] | None = None
) -> tuple[dict[str, pa.Table], ParseStats]:
    """:func:`parse_file` plus the counts and timing of the run. ``inflated``, when given, is
    handed every block of the decompressed file as the fast path reads it, in order, then
    b"" at the stream's end (a fast path that gives up stops handing blocks, and lxml's
    read is not handed any): `kg_platform.pubmed.recount.Recount.feed` counts them, so
    that the file is inflated once for both."""
    path = Path(path)
    name = path.name
    started = time.perf_counter()
    file = file if file is not None else file_key(path)
    columns = Columns(file)
    try:
        with _open_xml(path, fast=True, inflated=inflated) as stream:
            set_format = _fast.stream_records(
                stream, name, columns, _slow_record(columns, name), _FLUSH_EVERY
            )
    except _FAST_PATH_GIVES_UP:
        # anything the fast path cannot read exactly, bad input included, is read again by
        # lxml from the start: same tables, same error messages as ever
        columns, set_format = _read_with_lxml(path, file)
    tables = columns.to_tables()
    stats = ParseStats(
        file=columns.file,
        articles=tables["articles"].num_rows,
        book_articles_skipped=columns.book_articles,
        deletions=tables["deletions"].num_rows,
        seconds=time.perf_counter() - started,
        format=set_format,
        mesh_edges=tables["mesh_edges"].num_rows,
        citations=tables["citations"].num_rows,
    )
    return tables, stats


def _read_with_lxml(path: Path, file: str) -> tuple[Columns, str]:
    """The whole file through lxml's tree (the slow path, and the reference for the fast one)."""
    columns = Columns(file)
    with _open_xml(path) as stream:
        set_format = _stream_records(stream, path.name, columns)
    return columns, set_format


@contextmanager
def _open_xml(
    path: Path, fast: bool = False, inflated: Callable[[bytes], None] | None = None
) -> Iterator[_HeadThenRest]:
    """The decompressed file after the prolog check; ``fast`` inflates with ISA-L when it is
    installed (a third of the fast path's time goes to inflating) and reads every byte;
    every block read is also handed to ``inflated`` (:func:`parse_file_stats`)."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 - closed below, wrapped by gzip when needed
    except OSError as exc:
        raise PubmedFileError(f"{path.name}: cannot open: {exc.strerror or exc}") from exc
    try:
        magic = raw.read(2)
        raw.seek(0)
        # sniff rather than trust the suffix: NLM's files are gzipped, efetch output is not
        opener = _fast_gzip.IGzipFile if fast and _fast_gzip is not None else gzip.GzipFile
        stream = opener(fileobj=raw, mode="rb") if magic == b"\x1f\x8b" else raw
        if inflated is not None:
            stream = _Handed(stream, inflated)
        try:
            head = stream.read(_PROLOG_BYTES)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise PubmedFileError(
                f"{path.name}: gzip stream is truncated or corrupt: {exc}"
            ) from exc
        _check_prolog(head, path.name)
        rest = _HeadThenRest(head, stream)
        # the fast path reads every byte: scanning them costs less than the cut
        rest.cut = not fast
        yield rest
    finally:
        raw.close()


# subtrees the tables never read, cut from the byte stream before libxml2 builds them: they
# are a third of a record's bytes (authors and affiliations above all). A cut keeps the
# newlines, so error line numbers stay true; a marker split across blocks is simply parsed.
_UNREAD_SUBTREES = (
    (b"<AuthorList", b"</AuthorList>"),
    (b"<InvestigatorList", b"</InvestigatorList>"),
    (b"<History>", b"</History>"),
    (b"<GrantList", b"</GrantList>"),
    (b"<KeywordList", b"</KeywordList>"),
)
_READ_BLOCK = 1 << 20
# a start marker that _cut_unread would cut from (one left after a cut found no end marker)
_UNREAD_START = re.compile(
    b"|".join(
        re.escape(start) + (b"" if start.endswith(b">") else b"[ >]")
        for start, _ in _UNREAD_SUBTREES
    )
)


class _Handed:
    """A read()-able stream handing each block it reads to ``sink`` (b"" at the end)."""

    def __init__(self, stream: BinaryIO, sink: Callable[[bytes], None]) -> None:
        self._stream = stream
        self._sink = sink

    def read(self, size: int = -1) -> bytes:
        block = self._stream.read(size)
        self._sink(block)
        return block


class _HeadThenRest:
    """A read()-able stream over the decompressed file: first the bytes already read for the
    prolog check, then the rest, with the unread subtrees cut out."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._pending = head
        self._rest = rest
        self._eof = False
        self.cut = True

    def read(self, size: int = -1) -> bytes:
        if not self.cut:
            out, self._pending = self._pending, b""
            return out or self._rest.read(_READ_BLOCK)
        starved = False
        while True:
            # a held-back subtree longer than a block needs more data before anything is ready
            if not self._eof and (starved or len(self._pending) < _READ_BLOCK):
                block = self._rest.read(_READ_BLOCK)
                if block:
                    self._pending += block
                else:
                    self._eof = True
            out, self._pending = _cut_unread(self._pending, final=self._eof)
            if out or self._eof:
                return out
            starved = True


def _cut_unread(data: bytes, final: bool) -> tuple[bytes, bytes]:
    """(bytes ready for the parser, bytes to hold until more data arrives)."""
    pieces = []
    pos = 0
    # next start of each marker, found once and refreshed only when passed, so an absent
    # marker costs one scan per block
    starts = [data.find(start) for start, _ in _UNREAD_SUBTREES]
    while True:
        best = -1
        for k, at in enumerate(starts):
            if at >= 0 and (best < 0 or at < starts[best]):
                best = k
        if best < 0:
            break
        start_marker, end_marker = _UNREAD_SUBTREES[best]
        begin = starts[best]
        after = data[begin + len(start_marker) : begin + len(start_marker) + 1]
        if start_marker[-1:] != b">" and after not in (b" ", b">"):
            if not after and not final:
                pieces.append(data[pos:begin])
                return b"".join(pieces), data[begin:]
            starts[best] = data.find(start_marker, begin + 1)
            continue
        end = data.find(end_marker, begin)
        if end < 0:
            if final:
                break
            pieces.append(data[pos:begin])
            return b"".join(pieces), data[begin:]
        end += len(end_marker)
        pieces.append(data[pos:begin])
        pieces.append(b"\n" * data.count(b"\n", begin, end))
        pos = end
        for k, at in enumerate(starts):
            if 0 <= at < pos:
                starts[k] = data.find(_UNREAD_SUBTREES[k][0], pos)
    if final:
        pieces.append(data[pos:])
        return b"".join(pieces), b""
    # hold back a tail that could be the beginning of a marker cut by the block boundary
    keep = max(len(start) for start, _ in _UNREAD_SUBTREES)
    split = max(pos, len(data) - keep)
    lt = data.rfind(b"<", split)
    cut = lt if lt >= 0 else len(data)
    pieces.append(data[pos:cut])
    return b"".join(pieces), data[cut:]


def _slow_record(columns: Columns, name: str) -> Callable[[bytes], None]:
    """lxml for one record the fast path finds unusual (inline markup with attributes, a
    self-closed element, ...); a record that fails here sends the whole file to lxml, and so
    does one holding another record, which the whole-file reader would read as two."""
    # one parser per file: lxml parsers are not to be shared between threads
    parser = etree.XMLParser(**_RECORD_PARSING)

    def read(record: bytes) -> None:
        # the record as the whole-file reader sees it, its unread subtrees cut; a subtree not
        # closed inside the record would be cut across records there
        record, _ = _cut_unread(record, final=True)
        if _UNREAD_START.search(record):
            raise _fast.NotSimple("an unread subtree is not closed inside its record")
        try:
            article = etree.fromstring(record, parser)
        except etree.XMLSyntaxError as exc:
            raise _fast.NotSimple(str(exc)) from exc
        tag = article.tag
        nested = next(article.iterdescendants(_SET_RECORD_TAGS), None)
        if tag not in _SET_RECORD_TAGS or nested is not None:
            raise _fast.NotSimple(f"record <{tag}> is not a plain record")
        if tag == "PubmedBookArticle":
            columns.book_articles += 1
            return
        if tag == "DeleteCitation":
            columns.add_deletions(article, name)
            return
        first = article[0] if len(article) else None
        if first is None or first.tag != "MedlineCitation":
            first = article.find("MedlineCitation")
        columns.add_record(article, first, name)

    return read


def _stream_records(stream: _HeadThenRest | BinaryIO, name: str, columns: Columns) -> str:
    context = etree.iterparse(
        stream,
        events=("end",),
        tag=_RECORD_TAGS,
        **_RECORD_PARSING,
    )
    set_format = ""
    try:
        for _, elem in context:
            if not set_format:
                set_format = _check_document(elem, name)
            tag = elem.tag
            if tag == "PubmedArticle":
                first = elem[0] if len(elem) else None
                if first is None or first.tag != "MedlineCitation":
                    first = elem.find("MedlineCitation")
                columns.add_record(elem, first, name)
                if columns.pending >= _FLUSH_EVERY:
                    columns.flush()
            elif tag == "MedlineCitation":
                # inside PubmedArticle it is handled with its parent; only the legacy set has
                # bare MedlineCitation records
                if set_format != _LEGACY_SET or elem.getparent().tag != _LEGACY_SET:
                    continue
                columns.add_record(None, elem, name)
                if columns.pending >= _FLUSH_EVERY:
                    columns.flush()
            elif tag == "PubmedBookArticle":
                columns.book_articles += 1
            else:
                columns.add_deletions(elem, name)
            # bounded memory: drop the record and everything already processed before it
            elem.clear()
            parent = elem.getparent()
            if parent is not None:
                while elem.getprevious() is not None:
                    del parent[0]
    except etree.XMLSyntaxError as exc:
        line, message = _first_error(exc)
        raise PubmedFileError(f"{name}: XML breaks at line {line}: {message}") from exc
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise PubmedFileError(f"{name}: gzip stream is truncated or corrupt: {exc}") from exc
    except OSError as exc:
        raise PubmedFileError(f"{name}: cannot read: {exc}") from exc
    if not set_format:
        # no record at all: still make sure the document is well formed and of a known kind
        root = getattr(context, "root", None)
        if root is None:
            raise PubmedFileError(f"{name}: no XML document found")
        set_format = _check_document(root, name)
    return set_format


def _first_error(exc: etree.XMLSyntaxError) -> tuple[int | str, str]:
    """Line and message of the parse error; when lxml reports a vague one without a line (as for
    an undeclared entity), the latest entry of libxml2's log (shared across parses) says more."""
    if exc.lineno and exc.msg:
        return exc.lineno, exc.msg.split(", line ")[0]
    entries = [e for e in exc.error_log if e.level >= etree.ErrorLevels.ERROR]
    if entries:
        return entries[-1].line, entries[-1].message.strip()
    return "?", exc.msg or str(exc)


def _check_prolog(head: bytes, name: str) -> None:
    """Refuse entity declarations from the bytes before the root element, before libxml2 reads
    the DTD subset at all (it would stop a billion-laughs itself, but less clearly)."""
    prolog = re.split(rb"<(?:PubmedArticleSet|MedlineCitationSet)\b", head, maxsplit=1)[0]
    declared = _ENTITY_DECLARATION.findall(prolog)
    if declared:
        names = ", ".join(n.decode("utf-8", "replace") for n in declared[:5])
        raise PubmedFileError(
            f"{name}: declares XML entities ({names}); "
            "PubMed files never do, and they are not expanded"
        )


def _check_document(elem: etree._Element, name: str) -> str:
    """Refuse entity declarations and unknown document kinds before reading any text."""
    tree = elem.getroottree()
    dtd = tree.docinfo.internalDTD
    if dtd is not None:
        declared = [entity.name for entity in dtd.iterentities()]
        if declared:
            raise PubmedFileError(
                f"{name}: declares XML entities ({', '.join(declared[:5])}); "
                "PubMed files never do, and they are not expanded"
            )
    root_tag = tree.getroot().tag
    if root_tag not in (_PUBMED_SET, _LEGACY_SET):
        raise PubmedFileError(
            f"{name}: root element is <{root_tag}>, expected <{_PUBMED_SET}> "
            f"(or the retired <{_LEGACY_SET}>)"
        )
    return root_tag
