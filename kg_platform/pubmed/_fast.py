"""The fast path of :mod:`kg_platform.pubmed.parse`: the decompressed bytes read without a tree.

Two readers sit behind :func:`stream_records`, the same tables from both:

- the compiled reader (``_reader.c``, built at install), used whenever it imports: it checks
  each record's well-formedness itself and reads its fields in one pass over the bytes; any
  record it is not sure to read exactly as lxml does, it declines, and lxml reads that record
  (:func:`_stream_compiled`);
- the checked pattern reader below, used when the extension is not built (a source tree run
  without ``pip install -e .``): libxml2 checks the bytes, patterns read the fields.

The rest of this docstring is about the second.

NLM's files are machine-written in one canonical form, so each field of a record can be found
by searching for its tag, moving forward through the record in the element order of NLM's DTD,
and read with an anchored pattern. Exactness rests on these rules:

- Well-formedness is still enforced by libxml2, as on the lxml path: it reads the very same
  bytes through a parser target with no element callbacks, so it builds nothing. Any complaint
  from it, and any document-level surprise (another root, an internal DTD subset, CDATA, a
  comment or processing instruction holding markup, a carriage return, an encoding other than
  UTF-8, text between records), raises :class:`NotSimple`, and the caller parses the whole
  file again with lxml, which gives the tables and the errors it always gave.
- A record holding a comment or processing instruction, or a field not in the canonical form
  (inline markup with attributes, a self-closed element, a single-quoted or unnormalised
  attribute, a list whose items the pattern does not all read), raises
  :class:`UnusualRecord`, and the caller's lxml code reads that record alone.
- Only the five predefined entities and character references are turned into text; any other
  reference makes the record unusual (and libxml2 has already refused an undeclared one).

What it takes on trust, as libxml2 does not validate: that elements sit where the DTD puts
them (one ``Journal/Title``, ``ArticleTitle``, ``PubDate``; ``Abstract`` before ``Language``;
``PublicationTypeList`` in ``Article``; ``ChemicalList``, ``CommentsCorrectionsList`` and
``MeshHeadingList`` in that order after ``MedlineJournalInfo``; ``ReferenceList`` last in
``PubmedData``).

Why one module of over 600 lines: the pattern reader's exactness rests on the rules above and
on the patterns and record walk below, which a reader checks against each other line by line;
the compiled reader's driver beside it shares the prolog check and the NotSimple contract.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, BinaryIO

from lxml import etree

try:  # built by `pip install -e .` (setup.py); without it the checked pattern reader is used
    from kg_platform.pubmed import _reader as compiled_reader
except ImportError:  # pragma: no cover - a source tree that was never built
    compiled_reader = None

_PUBMED_SET = "PubmedArticleSet"


# every libxml2 parser over a PubMed file (kg_platform.pubmed.parse's too): no DTD loaded, no
# network, no entity substituted, no huge tree
SAFE_PARSING = {
    "load_dtd": False,
    "no_network": True,
    "resolve_entities": False,
    "huge_tree": False,
}


class NotSimple(Exception):
    """The file is not in the canonical form this path reads; parse it with lxml instead."""


class UnusualRecord(Exception):
    """One record is not in the canonical form; read it with lxml instead."""


_PROLOG = re.compile(
    rb"(?:<\?xml(?P<decl>[^?>]*)\?>)?\s*(?:<!DOCTYPE\s+PubmedArticleSet\b[^\[<>]*>)?\s*"
    rb"<PubmedArticleSet>"
)
_ENCODING = re.compile(rb"""encoding\s*=\s*["']([^"']*)["']""")
_VERSION_1_0 = re.compile(rb"""\s+version\s*=\s*["']1\.0["']""")
_RECORD_START = re.compile(rb"\s*<(PubmedArticle|PubmedBookArticle|DeleteCitation)>")
_SET_END = re.compile(rb"\s*</PubmedArticleSet>\s*")
_MAX_RECORD_BYTES = 1 << 24
_SIMPLE_MARKUP = re.compile(rb"<\?[^<>]*\?>|<!--[^<>]*-->")
_RECORD_ENDS = {
    b"PubmedArticle": b"</PubmedArticle>",
    b"PubmedBookArticle": b"</PubmedBookArticle>",
    b"DeleteCitation": b"</DeleteCitation>",
}

_A = re.ASCII
_S = re.ASCII | re.DOTALL
_HEAD = re.compile(
    rb'\s*<MedlineCitation(?: [\w]+="[^"<>&]*")*>\s*<PMID(?: Version="([^"<>&]*)")?>([^<]*)</PMID>',
    _A,
)
_ARTICLE_TITLE = re.compile(rb"<ArticleTitle\b([^>]*)>", _S)
_ABSTRACT_TEXT = re.compile(rb"<AbstractText\b([^>]*)>", _S)
_LABEL = re.compile(rb'\sLabel="([^"]*)"', _A)

_LANGUAGE = re.compile(rb"<Language>([^<]*)</Language>", _A)

_DATE_PART = re.compile(rb"<(Year|MedlineDate)>([^<]*)</(?:Year|MedlineDate)>", _A)
_YEAR_IN_MEDLINE_DATE = re.compile(r"\d{4}")
_PUBTYPE = re.compile(rb'<PublicationType UI="([^"<>&\t\n]*)">([^<]*)</PublicationType>', _A)
_MESH_NAME = re.compile(
    rb'<(Descriptor|Qualifier)Name UI="([^"<>&\t\n]*)" MajorTopicYN="([YN])"'
    rb'(?: \w+="[^"<>&]*")*>',
    _A,
)
_CHEMICAL = re.compile(
    rb"<Chemical>\s*<RegistryNumber>([^<]*)</RegistryNumber>\s*"
    rb'<NameOfSubstance UI="([^"<>&\t\n]*)">([^<]*)</NameOfSubstance>\s*</Chemical>',
    _A,
)
_CORRECTION = re.compile(
    rb'<CommentsCorrections RefType="([^"<>&\t\n]*)">(.*?)</CommentsCorrections>', _S
)
_ANY_PMID = re.compile(rb"<PMID(?: Version=\"[^\"<>&]*\")?>([^<]*)</PMID>", _A)
_REFERENCE_ID_TAIL = re.compile(rb">\s*(\d+)\s*</ArticleId>", _A)
_INLINE_TAG = re.compile(r"<[^>]*>")
_REFERENCE = re.compile(r"&(#x[0-9a-fA-F]+|#[0-9]+|lt|gt|amp|quot|apos);", _A)
_PREDEFINED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"', "apos": "'"}


def _reference(match: re.Match[str]) -> str:
    ref = match.group(1)
    if ref[0] == "#":
        return chr(int(ref[2:], 16)) if ref[1] == "x" else chr(int(ref[1:]))
    return _PREDEFINED[ref]


def _unescape(text: str) -> str:
    """Character and predefined entity references to text; anything else is unusual."""
    if text.count("&") != len(_REFERENCE.findall(text)):
        raise UnusualRecord("entity reference")
    return _REFERENCE.sub(_reference, text)


def _flat(inner: str) -> str | None:
    """The text of an element's content, inline markup such as <i> dropped, as lxml gives it."""
    if "<" in inner:
        tags = _INLINE_TAG.findall(inner)
        # a quote in a tag means attributes, where a '>' could hide; lxml reads those
        for tag in tags:
            if '"' in tag or "'" in tag:
                raise UnusualRecord("inline markup with attributes")
        inner = _INLINE_TAG.sub("", inner)
    if "&" in inner:
        inner = _unescape(inner)
    inner = inner.strip()
    return inner or None


def _text(raw: bytes) -> str | None:
    if b"<" in raw or b"&" in raw:
        return _flat(raw.decode())
    return raw.decode().strip() or None


def positive_int(text: str | None) -> int | None:
    """A strictly positive integer written in decimal digits, else None (both readers)."""
    if text is None:
        return None
    text = text.strip()
    if not text.isdigit():
        return None
    value = int(text)
    return value if value > 0 else None


class _NoTree:
    """A parser target with no element callbacks: libxml2 checks well-formedness and builds
    nothing. It only notes the round in which it last met a processing instruction, which
    NLM leaves in the odd record (``<?nihms ?>``)."""

    def __init__(self) -> None:
        self.round = 0
        self.pi_round = -1

    def pi(self, target: str, data: str | None) -> None:
        self.pi_round = self.round

    def close(self) -> None:
        return None


def stream_records(
    stream: BinaryIO | Any,
    name: str,
    columns: Any,
    slow_record: Callable[[bytes], None],
    flush_every: int,
) -> str:
    """Read every record of the stream into ``columns``; returns the set's root tag.

    Raises :class:`NotSimple` for anything it cannot prove it reads exactly as lxml does."""
    if compiled_reader is not None:
        return _stream_compiled(stream, columns, slow_record, flush_every)
    return _stream_checked(stream, columns, slow_record, flush_every)


_BLOCK = 1 << 20
_XML_SPACE = re.compile(rb"[ \t\r\n]*")


def _stream_compiled(
    stream: BinaryIO | Any,
    columns: Any,
    slow_record: Callable[[bytes], None],
    flush_every: int,
) -> str:
    """The records of the stream through the compiled reader; declined records through
    ``slow_record`` (lxml), in file order. libxml2 reads only the prolog and those records."""
    reader = compiled_reader
    buffer = b""
    pos = 0
    started = closed = False
    while True:
        block = stream.read(_BLOCK)
        final = not block
        buffer = buffer[pos:] + block if pos else buffer + block
        pos = 0
        if not started:
            prolog = _prolog(buffer, final)
            if prolog is None:
                continue
            _check_prolog_with_libxml2(buffer[: prolog.end()], prolog)
            started = True
            pos = prolog.end()
        while not closed:
            pos, state, decline_end, books = reader.scan(
                buffer, pos, columns.row_lists(), columns.deleted, flush_every - columns.pending
            )
            columns.book_articles += books
            if state == reader.DECLINED:
                slow_record(buffer[pos:decline_end])
                pos = decline_end
            elif state == reader.END:
                closed = True
            elif state == reader.NOT_SIMPLE:
                raise NotSimple("text, a comment or another element between records")
            if columns.pending >= flush_every:
                columns.flush()
            if state == reader.MORE:
                break
        if closed:
            # after the set's end tag only white space, as _SET_END
            if _XML_SPACE.fullmatch(buffer, pos) is None:
                raise NotSimple("content after the set")
            pos = len(buffer)
        if final:
            if not closed:
                raise NotSimple("the set is not closed")
            return _PUBMED_SET
        if len(buffer) - pos > _MAX_RECORD_BYTES:
            raise NotSimple("an oversized record")


def _prolog(buffer: bytes, final: bool) -> re.Match[bytes] | None:
    """The prolog at the head of ``buffer``, or None while more of the stream may complete
    it; NotSimple when none can (the stream ended, or 64 KiB hold no prolog)."""
    prolog = _PROLOG.match(buffer)
    if prolog is None and (final or len(buffer) > 1 << 16):
        raise NotSimple("prolog")
    return prolog


def _check_prolog_with_libxml2(prolog: bytes, found: re.Match[bytes]) -> None:
    """The prolog matched by :data:`_PROLOG` must be UTF-8 and well formed to libxml2 (read
    with the set closed at once, the same options as the tree path, no DTD loaded)."""
    declared = found.group("decl")
    if declared:
        encoding = _ENCODING.search(declared)
        if encoding and encoding.group(1).lower() not in (b"utf-8", b"utf8"):
            raise NotSimple("encoding")
        # the reader checks characters by XML 1.0's rules
        if not _VERSION_1_0.match(declared):
            raise NotSimple("XML version")
    parser = etree.XMLParser(**SAFE_PARSING)
    try:
        etree.fromstring(prolog + b"</" + _PUBMED_SET.encode() + b">", parser)
    except etree.XMLSyntaxError as exc:
        raise NotSimple(f"prolog: {exc}") from exc


def _stream_checked(
    stream: BinaryIO | Any,
    columns: Any,
    slow_record: Callable[[bytes], None],
    flush_every: int,
) -> str:
    """The records of the stream, libxml2 checking the bytes and patterns reading fields."""
    target = _NoTree()
    checker = etree.XMLParser(target=target, **SAFE_PARSING)
    buffer = b""
    started = False
    # the round in which the oldest byte still held in the buffer was read
    oldest = 0
    while True:
        target.round += 1
        block = stream.read(1 << 20)
        final = not block
        try:
            if final:
                checker.close()
            else:
                checker.feed(block)
        except etree.XMLSyntaxError as exc:
            raise NotSimple(str(exc)) from exc
        buffer += block
        if not started:
            prolog = _prolog(buffer, final)
            if prolog is None:
                continue
            declared = prolog.group("decl")
            if declared:
                encoding = _ENCODING.search(declared)
                if encoding and encoding.group(1).lower() not in (b"utf-8", b"utf8"):
                    raise NotSimple("encoding")
            started = True
            buffer = buffer[prolog.end() :]
        if b"\r" in buffer:
            raise NotSimple("carriage return")
        odd: list[int] = []
        if b"<!" in buffer or target.pi_round >= oldest:
            # a comment, CDATA or processing instruction: the records holding one go to lxml,
            # and one holding a '<' or '>' (or any CDATA) sends the whole file there
            whole = buffer[: buffer.rfind(b">") + 1]
            odd = _odd_positions(whole)
            if len(odd) != len(_SIMPLE_MARKUP.findall(whole)):
                raise NotSimple("CDATA, or a comment or processing instruction holding markup")
        pos = 0
        while True:
            start = _RECORD_START.match(buffer, pos)
            if start is None:
                break
            kind = start.group(1)
            body_start = start.end()
            end = buffer.find(_RECORD_ENDS[kind], body_start)
            if end < 0:
                break
            if _holds_a_record(buffer, body_start, end):
                raise NotSimple("a record inside a record")
            if kind == b"PubmedArticle":
                try:
                    if odd and odd[0] < end:
                        while odd and odd[0] < body_start:
                            odd.pop(0)
                        if odd and odd[0] < end:
                            raise UnusualRecord("comment or processing instruction")
                    _add_article(buffer, body_start, end, columns)
                except UnusualRecord:
                    slow_record(buffer[start.start() : end + len(_RECORD_ENDS[kind])].strip())
                if columns.pending >= flush_every:
                    columns.flush()
            elif kind == b"PubmedBookArticle":
                columns.book_articles += 1
            else:
                _add_deletions(buffer[body_start:end], columns)
            pos = end + len(_RECORD_ENDS[kind])
        if pos:
            held = len(buffer) - pos
            if held == 0:
                oldest = target.round + 1
            elif held <= len(block):
                oldest = target.round
        buffer = buffer[pos:]
        if final:
            if _SET_END.fullmatch(buffer) is None:
                raise NotSimple("content outside records")
            return _PUBMED_SET
        stripped = buffer.lstrip()
        if (
            (stripped and not stripped.startswith(b"<"))
            or (len(buffer) > 1 << 16 and _RECORD_START.match(buffer) is None)
            or len(buffer) > _MAX_RECORD_BYTES
        ):
            # held bytes must be the start of a record: anything else would be held to the end
            raise NotSimple("text, another element or an oversized record between records")


def _holds_a_record(buffer: bytes, start: int, end: int) -> bool:
    """A record tag inside a record: the tree path reads it as a record of its own."""
    return any(buffer.find(tag, start, end) >= 0 for tag in _NESTED_RECORD_TAGS)


_NESTED_RECORD_TAGS = (b"<PubmedArticle", b"<PubmedBookArticle", b"<DeleteCitation")


def _odd_positions(buffer: bytes) -> list[int]:
    """Where the comments, CDATA sections and processing instructions start, in order."""
    odd = []
    for marker in (b"<?", b"<!"):
        at = buffer.find(marker)
        while at >= 0:
            odd.append(at)
            at = buffer.find(marker, at + 2)
    odd.sort()
    return odd


def _add_deletions(body: bytes, columns: Any) -> None:
    values = _ANY_PMID.findall(body)
    if body.count(b"<PMID") != len(values) or _ANY_PMID.sub(b"", body).strip():
        raise NotSimple("unusual DeleteCitation")
    for raw in values:
        pmid = positive_int(_text(raw) or "")
        if pmid is None:
            raise NotSimple("non-numeric deleted PMID")
        columns.deleted[pmid] = None


def _add_article(buf: bytes, start: int, end: int, columns: Any) -> None:
    """One ``PubmedArticle`` whose content is ``buf[start:end]``, read by landmarks.

    Each field is found by a byte search for its tag, moving forward through the record in
    the element order of NLM's DTD (stable since the 2000s), and read by an anchored pattern;
    an element that is there but not in the canonical form makes the record unusual."""
    head = _HEAD.match(buf, start, end)
    if head is None:
        raise NotSimple("record does not open with MedlineCitation and its PMID")
    version_text, pmid_text = head.groups()
    pmid = positive_int(_text(pmid_text) or "")
    if pmid is None:
        raise NotSimple("non-numeric PMID")
    version = 1 if version_text is None else positive_int(version_text.decode())
    if version is None:
        raise NotSimple("non-numeric Version")
    find = buf.find
    pos = head.end()
    # Article: Journal (JournalIssue/PubDate, Title), ArticleTitle, Abstract, AuthorList,
    # Language, PublicationTypeList; then MedlineJournalInfo and the citation's lists
    cut = find(b"</MedlineCitation>", pos, end)
    if cut < 0:
        raise NotSimple("MedlineCitation")

    year = None
    at = find(b"<PubDate", pos, cut)
    if at >= 0:
        close = find(b"</PubDate>", at, cut)
        if close < 0 or not buf.startswith(b"<PubDate>", at):
            raise UnusualRecord("PubDate")
        date = buf[at + 9 : close]
        pos = close
        first_year = date.find(b"<Year")
        first_medline = date.find(b"<MedlineDate")
        firsts = [where for where in (first_year, first_medline) if where >= 0]
        if firsts:
            part = _DATE_PART.match(date, min(firsts))
            if part is None:
                raise UnusualRecord("PubDate parts")
            kind, raw = part.groups()
            text = raw.decode()
            if "&" in text:
                text = _unescape(text)
            if kind == b"Year":
                year = positive_int(text)
            else:
                digits = _YEAR_IN_MEDLINE_DATE.search(text)
                year = int(digits.group(0)) if digits else None
            if year is not None and not 1000 <= year <= 2100:
                year = None

    # Language follows the Abstract and the (long) AuthorList: found first, it bounds the rest
    language_at = find(b"<Language", pos, cut)
    bound = cut if language_at < 0 else language_at

    journal = None
    at = find(b"<Title", pos, bound)
    if at >= 0:
        close = find(b"</Title>", at, bound)
        if close < 0 or not buf.startswith(b"<Title>", at):
            raise UnusualRecord("Title")
        journal = _text(buf[at + 7 : close])
        pos = close

    title = None
    at = find(b"<ArticleTitle", pos, bound)
    if at >= 0:
        found = _ARTICLE_TITLE.match(buf, at, bound)
        close = find(b"</ArticleTitle>", at, bound)
        if found is None or close < 0:
            raise UnusualRecord("ArticleTitle")
        attrs = found.group(1)
        inner = buf[found.end() : close]
        pos = close
        if attrs and (b"'" in attrs or attrs.count(b'"') % 2 or attrs.endswith(b"/")):
            raise UnusualRecord("ArticleTitle attributes")
        title = _text(inner)

    sections = []
    at = find(b"<Abstract", pos, bound)
    if at >= 0:
        close = find(b"</Abstract>", at, bound)
        if close < 0 or buf[at + 9 : at + 10] not in (b">", b" "):
            raise UnusualRecord("Abstract")
        pos = at
        while True:
            at = find(b"<AbstractText", pos, close)
            if at < 0:
                break
            found = _ABSTRACT_TEXT.match(buf, at, close)
            text_close = find(b"</AbstractText>", at, close)
            if found is None or text_close < 0:
                raise UnusualRecord("AbstractText")
            attrs = found.group(1)
            if attrs.endswith(b"/"):
                raise UnusualRecord("self-closed AbstractText")
            inner = buf[found.end() : text_close]
            pos = text_close
            text = _text(inner)
            if text is None:
                continue
            label = None
            if attrs:
                if b"'" in attrs or attrs.count(b'"') % 2:
                    raise UnusualRecord("AbstractText attributes")
                label_found = _LABEL.search(attrs)
                if label_found is None:
                    if b"Label" in attrs:
                        raise UnusualRecord("Label attribute")
                else:
                    label = label_found.group(1).decode()
                    if "&" in label:
                        label = _unescape(label)
                    if "\t" in label or "\n" in label:
                        raise UnusualRecord("Label needs normalising")
            sections.append(f"{label}: {text}" if label else text)
        pos = close

    language = None
    if language_at >= 0:
        found = _LANGUAGE.match(buf, language_at, cut)
        if found is None:
            raise UnusualRecord("Language")
        pos = found.end()
        language = _text(found.group(1))

    pubtypes, pos = _list_items(buf, pos, cut, b"PublicationType", _PUBTYPE)
    at = find(b"</MedlineJournalInfo>", pos, cut)
    if at >= 0:
        pos = at
    chemicals, pos = _list_items(buf, pos, cut, b"Chemical", _CHEMICAL)
    found_corrections, pos = _list_items(buf, pos, cut, b"CommentsCorrections", _CORRECTION)
    names, pos = _list_items(buf, pos, cut, b"MeshHeading", _MESH_NAME)

    corrections = []
    for ref_type, inner in found_corrections:
        ref_pmid = None
        values = _ANY_PMID.findall(inner)
        if len(values) != inner.count(b"<PMID"):
            raise UnusualRecord("CommentsCorrections PMID")
        if values:
            ref_pmid = positive_int(_text(values[-1]) or "")
        corrections.append((ref_type.decode(), ref_pmid))

    cited: dict[int, None] = {}
    at = find(b"<ReferenceList", cut, end)
    if at >= 0:
        # one fast split at each IdType="pubmed"; each must sit in a canonical ArticleId
        pieces = buf[at:end].split(b'IdType="pubmed"')
        previous = pieces[0]
        for piece in pieces[1:]:
            value = _REFERENCE_ID_TAIL.match(piece)
            if value is None or not previous.endswith(b"<ArticleId "):
                raise UnusualRecord("ReferenceList")
            number = int(value.group(1))
            if number > 0:
                cited[number] = None
            previous = piece

    abstract = "\n".join(sections) if sections else None
    columns.add_article(pmid, version, title, abstract, year, journal, language, len(pubtypes))
    for ui, text in pubtypes:
        columns.add_pubtype(pmid, version, ui.decode(), _text(text) or "")

    # a descriptor without qualifiers gives one row with null qualifier columns
    ui = ""
    major = False
    bare = False
    for kind, name_ui, name_major in names:
        if kind == b"Descriptor":
            if bare:
                columns.add_heading(pmid, version, ui, major, None, None)
            ui = name_ui.decode()
            major = name_major == b"Y"
            bare = True
        else:
            bare = False
            columns.add_heading(pmid, version, ui, major, name_ui.decode(), name_major == b"Y")
    if bare:
        columns.add_heading(pmid, version, ui, major, None, None)

    for registry, substance_ui, substance_name in chemicals:
        name = _text(substance_name) or ""
        columns.add_chemical(pmid, version, _text(registry), substance_ui.decode(), name)

    for ref_type, ref_pmid in corrections:
        columns.add_correction(pmid, version, ref_type, ref_pmid)

    columns.add_citations(pmid, version, cited)


def _list_items(
    buf: bytes, start: int, cut: int, tag: bytes, pattern: re.Pattern[bytes]
) -> tuple[list, int]:
    """The matches of ``pattern`` inside the record's ``<tag>List`` at or after ``start``, and
    where the list ends; an item the pattern does not read makes the record unusual."""
    at = buf.find(b"<" + tag + b"List>", start, cut)
    if at < 0:
        return [], start
    close = buf.find(b"</" + tag + b"List>", at, cut)
    if close < 0:
        raise UnusualRecord(tag.decode())
    section = buf[at:close]
    items = pattern.findall(section)
    if tag == b"MeshHeading":
        # every name read, one descriptor per heading, and a descriptor first
        n_descriptors = section.count(b"<DescriptorName")
        if (
            not items
            or items[0][0] != b"Descriptor"
            or n_descriptors != section.count(b"<MeshHeading") - 1
            or len(items) != n_descriptors + section.count(b"<QualifierName")
        ):
            raise UnusualRecord("MeshHeading")
    elif len(items) != section.count(b"<" + tag) - 1:
        raise UnusualRecord(tag.decode())
    return items, close
