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
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
from lxml import etree

from kg_platform.pubmed import _fast
from kg_platform.pubmed.errors import PubmedFileError
from kg_platform.schemas import ARROW_SCHEMAS, PUBMED_TABLES

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

TABLE_NAMES = tuple(PUBMED_TABLES)

# derived from the pandera models in kg_platform.schemas, the one declaration of the columns
SCHEMAS: Mapping[str, pa.Schema] = ARROW_SCHEMAS

_PUBMED_SET = "PubmedArticleSet"
_LEGACY_SET = "MedlineCitationSet"
_RECORD_TAGS = ("PubmedArticle", "PubmedBookArticle", "MedlineCitation", "DeleteCitation")
# the records of a PubmedArticleSet that the fast path may hand to _slow_record one at a time
_SET_RECORD_TAGS = ("PubmedArticle", "PubmedBookArticle", "DeleteCitation")
_YEAR_IN_MEDLINE_DATE = re.compile(r"\d{4}")
_ENTITY_DECLARATION = re.compile(rb"<!ENTITY\s+(?:%\s+)?([^\s>]+)")
_PROLOG_BYTES = 1 << 16
_SUFFIXES = (".xml.gz", ".xml", ".gz")
# records held as Python lists before they move into Arrow; bounds the parser's memory
_FLUSH_EVERY = 2048

# the elements of a MedlineCitation that feed the tables (see _Columns.add_record)
_CITATION_TAGS = (
    "PMID",
    "ArticleTitle",
    "AbstractText",
    "OtherAbstract",
    "Title",
    "Language",
    "PubDate",
    "PublicationType",
    "MeshHeading",
    "Chemical",
    "CommentsCorrections",
)


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
    path: str | Path, file: str | None = None
) -> tuple[dict[str, pa.Table], ParseStats]:
    """:func:`parse_file` plus the counts and timing of the run."""
    path = Path(path)
    name = path.name
    started = time.perf_counter()
    file = file if file is not None else file_key(path)
    columns = _Columns(file)
    try:
        with _open_xml(path, fast=True) as stream:
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


def _read_with_lxml(path: Path, file: str) -> tuple[_Columns, str]:
    """The whole file through lxml's tree (the slow path, and the reference for the fast one)."""
    columns = _Columns(file)
    with _open_xml(path) as stream:
        set_format = _stream_records(stream, path.name, columns)
    return columns, set_format


@contextmanager
def _open_xml(path: Path, fast: bool = False) -> Iterator[_HeadThenRest]:
    """The decompressed file after the prolog check; ``fast`` inflates with ISA-L when it is
    installed (a third of the fast path's time goes to inflating) and reads every byte."""
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


def _slow_record(columns: _Columns, name: str) -> Callable[[bytes], None]:
    """lxml for one record the fast path finds unusual (inline markup with attributes, a
    self-closed element, ...); a record that fails here sends the whole file to lxml, and so
    does one holding another record, which the whole-file reader would read as two."""
    # one parser per file: lxml parsers are not to be shared between threads
    parser = etree.XMLParser(
        load_dtd=False,
        no_network=True,
        resolve_entities=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )

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


def _stream_records(stream: _HeadThenRest | BinaryIO, name: str, columns: _Columns) -> str:
    context = etree.iterparse(
        stream,
        events=("end",),
        tag=_RECORD_TAGS,
        load_dtd=False,
        no_network=True,
        resolve_entities=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
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


def _text(elem: etree._Element | None) -> str | None:
    """All text of an element (inline markup such as <i> flattened), None when empty."""
    if elem is None:
        return None
    if len(elem):
        text = etree.tostring(elem, method="text", encoding=str, with_tail=False)
    else:
        text = elem.text
    if text is None:
        return None
    text = text.strip()
    return text or None


def _pub_year(pub_date: etree._Element) -> int | None:
    year = None
    for part in pub_date:
        if part.tag == "Year":
            year = _fast.positive_int(part.text)
            break
        if part.tag == "MedlineDate":
            # e.g. <MedlineDate>1998 Dec-1999 Jan</MedlineDate>: the first year is the issue's
            found = _YEAR_IN_MEDLINE_DATE.search(part.text or "")
            year = int(found.group(0)) if found else None
            break
    return year if year is not None and 1000 <= year <= 2100 else None


class _Columns:
    """Column lists for the seven tables, filled record by record, turned into Arrow once."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.book_articles = 0
        self.deleted: dict[int, None] = {}
        self.parts: dict[str, list[pa.Table]] = {name: [] for name in TABLE_NAMES}
        self._reset()

    def _reset(self) -> None:
        self.a_pmid: list[int] = []
        self.a_version: list[int] = []
        self.a_title: list[str | None] = []
        self.a_abstract: list[str | None] = []
        self.a_year: list[int | None] = []
        self.a_journal: list[str | None] = []
        self.a_language: list[str | None] = []
        self.a_n_pubtypes: list[int] = []
        self.m_pmid: list[int] = []
        self.m_version: list[int] = []
        self.m_descriptor: list[str] = []
        self.m_descriptor_major: list[bool] = []
        self.m_qualifier: list[str | None] = []
        self.m_qualifier_major: list[bool | None] = []
        self.c_pmid: list[int] = []
        self.c_version: list[int] = []
        self.c_cited: list[int] = []
        self.k_pmid: list[int] = []
        self.k_version: list[int] = []
        self.k_type: list[str] = []
        self.k_ref: list[int | None] = []
        self.h_pmid: list[int] = []
        self.h_version: list[int] = []
        self.h_registry: list[str | None] = []
        self.h_ui: list[str | None] = []
        self.h_name: list[str] = []
        self.p_pmid: list[int] = []
        self.p_version: list[int] = []
        self.p_ui: list[str | None] = []
        self.p_name: list[str] = []

    @property
    def pending(self) -> int:
        return len(self.a_pmid)

    def row_lists(self) -> tuple[list, ...]:
        """The column lists the compiled reader (``_reader.c``, ``emit_article``) appends an
        accepted record's rows to, in this order: the rows are those of :meth:`add_record`."""
        return (
            *(self.a_pmid, self.a_version, self.a_title, self.a_abstract, self.a_year),
            *(self.a_journal, self.a_language, self.a_n_pubtypes),
            *(self.m_pmid, self.m_version, self.m_descriptor, self.m_descriptor_major),
            *(self.m_qualifier, self.m_qualifier_major),
            *(self.c_pmid, self.c_version, self.c_cited),
            *(self.k_pmid, self.k_version, self.k_type, self.k_ref),
            *(self.h_pmid, self.h_version, self.h_registry, self.h_ui, self.h_name),
            *(self.p_pmid, self.p_version, self.p_ui, self.p_name),
        )

    # One writer per table row, shared by the lxml path and the fast path (_fast.py), so
    # the two cannot drift apart in what a row holds.
    def add_article(
        self,
        pmid: int,
        version: int,
        title: str | None,
        abstract: str | None,
        year: int | None,
        journal: str | None,
        language: str | None,
        n_pubtypes: int,
    ) -> None:
        self.a_pmid.append(pmid)
        self.a_version.append(version)
        self.a_title.append(title)
        self.a_abstract.append(abstract)
        self.a_year.append(year)
        self.a_journal.append(journal)
        self.a_language.append(language)
        self.a_n_pubtypes.append(n_pubtypes)

    def add_heading(
        self,
        pmid: int,
        version: int,
        descriptor: str,
        major: bool,
        qualifier: str | None,
        qualifier_major: bool | None,
    ) -> None:
        self.m_pmid.append(pmid)
        self.m_version.append(version)
        self.m_descriptor.append(descriptor)
        self.m_descriptor_major.append(major)
        self.m_qualifier.append(qualifier)
        self.m_qualifier_major.append(qualifier_major)

    def add_pubtype(self, pmid: int, version: int, ui: str | None, name: str) -> None:
        self.p_pmid.append(pmid)
        self.p_version.append(version)
        self.p_ui.append(ui)
        self.p_name.append(name)

    def add_chemical(
        self, pmid: int, version: int, registry: str | None, ui: str | None, name: str
    ) -> None:
        self.h_pmid.append(pmid)
        self.h_version.append(version)
        self.h_registry.append(registry)
        self.h_ui.append(ui)
        self.h_name.append(name)

    def add_correction(self, pmid: int, version: int, ref_type: str, ref_pmid: int | None) -> None:
        self.k_pmid.append(pmid)
        self.k_version.append(version)
        self.k_type.append(ref_type)
        self.k_ref.append(ref_pmid)

    def add_citations(self, pmid: int, version: int, cited: dict[int, None]) -> None:
        n = len(cited)
        self.c_pmid.extend([pmid] * n)
        self.c_version.extend([version] * n)
        self.c_cited.extend(cited)

    def add_record(
        self, article: etree._Element | None, citation: etree._Element | None, name: str
    ) -> None:
        where = (article if article is not None else citation).sourceline
        if citation is None:
            raise PubmedFileError(f"{name}: record at line {where} has no MedlineCitation")
        # one C-level walk over the citation yields only the elements we read, in document
        # order; ElementPath lookups per field cost several times more per record
        pmid_elem = title = journal = language = year = None
        sections: list[str] = []
        in_other_abstract = False
        mesh: list[etree._Element] = []
        chemicals: list[etree._Element] = []
        corrections: list[etree._Element] = []
        pubtypes: list[etree._Element] = []
        for elem in citation.iter(_CITATION_TAGS):
            tag = elem.tag
            if tag == "MeshHeading":
                mesh.append(elem)
            elif tag == "PublicationType":
                pubtypes.append(elem)
            elif tag == "AbstractText":
                # OtherAbstract (translations) follows Article; its sections are not the abstract
                if not in_other_abstract:
                    text = _text(elem)
                    if text is not None:
                        label = elem.get("Label")
                        sections.append(f"{label}: {text}" if label else text)
            elif tag == "PMID":
                # the record's own PMID is MedlineCitation's first child; later ones belong to
                # CommentsCorrections and are read there
                if pmid_elem is None:
                    pmid_elem = elem
            elif tag == "Chemical":
                chemicals.append(elem)
            elif tag == "CommentsCorrections":
                corrections.append(elem)
            elif tag == "ArticleTitle":
                title = _text(elem)
            elif tag == "Title":
                journal = _text(elem)
            elif tag == "Language":
                if language is None:
                    language = _text(elem)
            elif tag == "PubDate":
                year = _pub_year(elem)
            elif tag == "OtherAbstract":
                in_other_abstract = True

        if (
            pmid_elem is None
            or pmid_elem.getparent() is not citation
            or not (pmid_elem.text or "").strip()
        ):
            raise PubmedFileError(f"{name}: record at line {where} has no PMID")
        pmid_text = pmid_elem.text
        pmid = _fast.positive_int(pmid_text)
        if pmid is None:
            raise PubmedFileError(
                f"{name}: record at line {where} has a non-numeric PMID {pmid_text.strip()!r}"
            )
        version_text = pmid_elem.get("Version")
        version = 1 if version_text is None else _fast.positive_int(version_text)
        if version is None:
            raise PubmedFileError(f"{name}: PMID {pmid} has a non-numeric Version {version_text!r}")

        abstract = "\n".join(sections) if sections else None
        self.add_article(pmid, version, title, abstract, year, journal, language, len(pubtypes))
        for pubtype in pubtypes:
            self.add_pubtype(pmid, version, pubtype.get("UI"), _text(pubtype) or "")

        for heading in mesh:
            descriptor = None
            n_qualifiers = 0
            for part in heading:
                if part.tag == "DescriptorName":
                    descriptor = part
                    ui = part.get("UI")
                    major = part.get("MajorTopicYN") == "Y"
                elif part.tag == "QualifierName" and descriptor is not None:
                    n_qualifiers += 1
                    qualifier_major = part.get("MajorTopicYN") == "Y"
                    self.add_heading(pmid, version, ui, major, part.get("UI"), qualifier_major)
            if descriptor is None:
                raise PubmedFileError(f"{name}: PMID {pmid} has a MeshHeading without descriptor")
            if n_qualifiers == 0:
                self.add_heading(pmid, version, ui, major, None, None)

        for chemical in chemicals:
            registry = substance = None
            for part in chemical:
                if part.tag == "RegistryNumber":
                    registry = _text(part)
                elif part.tag == "NameOfSubstance":
                    substance = part
            substance_ui = substance.get("UI") if substance is not None else None
            self.add_chemical(pmid, version, registry, substance_ui, _text(substance) or "")

        for correction in corrections:
            ref_pmid = None
            for part in correction:
                if part.tag == "PMID":
                    ref_pmid = _fast.positive_int(part.text)
            self.add_correction(pmid, version, correction.get("RefType") or "", ref_pmid)

        if article is not None:
            cited: dict[int, None] = {}
            for data in article.iterchildren("PubmedData"):
                for references in data.iterchildren("ReferenceList"):
                    for article_id in references.iter("ArticleId"):
                        if article_id.get("IdType") == "pubmed":
                            value = _fast.positive_int(article_id.text)
                            if value is not None:
                                cited[value] = None
            self.add_citations(pmid, version, cited)

    def add_deletions(self, elem: etree._Element, name: str) -> None:
        for pmid_elem in elem.iterfind("PMID"):
            pmid = _fast.positive_int(pmid_elem.text)
            if pmid is None:
                raise PubmedFileError(
                    f"{name}: DeleteCitation at line {elem.sourceline} lists a non-numeric "
                    f"PMID {(pmid_elem.text or '').strip()!r}"
                )
            self.deleted[pmid] = None

    def flush(self) -> None:
        """Move the column lists into Arrow: Python objects cost several times their bytes."""
        n = len(self.a_pmid)
        raw = {
            "articles": [
                self.a_pmid,
                self.a_version,
                [self.file] * n,
                self.a_title,
                self.a_abstract,
                [a is not None for a in self.a_abstract],
                self.a_year,
                self.a_journal,
                self.a_language,
                self.a_n_pubtypes,
            ],
            "mesh_edges": [
                self.m_pmid,
                self.m_version,
                self.m_descriptor,
                self.m_descriptor_major,
                self.m_qualifier,
                self.m_qualifier_major,
            ],
            "citations": [self.c_pmid, self.c_version, self.c_cited],
            "corrections": [self.k_pmid, self.k_version, self.k_type, self.k_ref],
            "chemicals": [self.h_pmid, self.h_version, self.h_registry, self.h_ui, self.h_name],
            "pubtypes": [self.p_pmid, self.p_version, self.p_ui, self.p_name],
        }
        self._reset()
        for table_name, values in raw.items():
            schema = SCHEMAS[table_name]
            self.parts[table_name].append(
                pa.Table.from_arrays(
                    [pa.array(v, type=f.type) for v, f in zip(values, schema, strict=True)],
                    schema=schema,
                )
            )
            values.clear()

    def to_tables(self) -> dict[str, pa.Table]:
        self.flush()
        self.parts["deletions"] = [
            pa.Table.from_arrays(
                [pa.array(list(self.deleted), type=SCHEMAS["deletions"].field("pmid").type)],
                schema=SCHEMAS["deletions"],
            )
        ]
        tables = {}
        for table_name in TABLE_NAMES:
            schema = SCHEMAS[table_name]
            parts = self.parts.pop(table_name)
            # chunks stay as they are: Parquet writes them as row groups, no extra copy
            table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
            del parts
            keys = [(schema.names[0], "ascending")]
            if "version" in schema.names:
                keys.append(("version", "ascending"))
            if not _is_sorted(table, schema.names[0]):
                # Arrow's sort is stable, so rows of one record keep NLM's order
                table = table.sort_by(keys)
            tables[table_name] = table
        return tables


def _is_sorted(table: pa.Table, key: str) -> bool:
    """True when the key column never decreases and no key repeats out of version order."""
    if table.num_rows < 2:
        return True
    keys = table.column(key)
    ahead, behind = keys.slice(1), keys.slice(0, table.num_rows - 1)
    if pc.any(pc.less(ahead, behind)).as_py():
        return False
    if "version" not in table.column_names:
        return True
    versions = table.column("version")
    same_key = pc.equal(ahead, behind)
    went_down = pc.less(versions.slice(1), versions.slice(0, table.num_rows - 1))
    return not pc.any(pc.and_(same_key, went_down)).as_py()
