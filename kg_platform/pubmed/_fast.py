"""The fast path of :mod:`kg_platform.pubmed.parse`: compiled patterns over the decompressed text.

NLM's files are machine-written in one canonical form, so each field of a record can be read
with a pattern instead of a tree. Exactness comes from two rules:

- Well-formedness is still enforced by a real XML parser: libxml2, as in the lxml path, reads
  the very same bytes through a parser target with no callbacks, so it builds nothing. Any complaint from it, and any
  document-level surprise (another root, an internal DTD subset, a comment, a processing
  instruction, a carriage return, an encoding other than UTF-8), raises :class:`NotSimple`,
  and the caller parses the whole file again with lxml, which gives the error it always gave.
- Every pattern is checked against a plain count of the tags it reads; a record where they
  disagree, or where an attribute or inline markup is not in the canonical form, goes to the
  caller's lxml code for that record alone (``slow_record``).

Nothing here expands an entity: only the five predefined ones and character references are
turned into text; any other reference makes the record unusual.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, BinaryIO
from lxml import etree

_PUBMED_SET = "PubmedArticleSet"


class NotSimple(Exception):
    """The file is not in the canonical form this path reads; parse it with lxml instead."""


class UnusualRecord(Exception):
    """One record is not in the canonical form; read it with lxml instead."""


_PROLOG = re.compile(
    rb'(?:<\?xml(?P<decl>[^?>]*)\?>)?\s*(?:<!DOCTYPE\s+PubmedArticleSet\b[^\[<>]*>)?\s*'
    rb"<PubmedArticleSet>"
)
_ENCODING = re.compile(rb"""encoding\s*=\s*["']([^"']*)["']""")
_RECORD_START = re.compile(rb"\s*<(PubmedArticle|PubmedBookArticle|DeleteCitation)>")
_SET_END = re.compile(rb"\s*</PubmedArticleSet>\s*")
_OTHER_REFERENCE = re.compile(rb"&(?!(?:lt|gt|amp|quot|apos|#[0-9]+|#x[0-9a-fA-F]+);)")
_MAX_RECORD_BYTES = 1 << 26
_SIMPLE_MARKUP = re.compile(rb"<\?[^<>]*\?>|<!--[^<>]*-->")
_RECORD_ENDS = {
    b"PubmedArticle": b"</PubmedArticle>",
    b"PubmedBookArticle": b"</PubmedBookArticle>",
    b"DeleteCitation": b"</DeleteCitation>",
}

_A = re.ASCII
_S = re.ASCII | re.DOTALL
_HEAD = re.compile(
    r'\s*<MedlineCitation(?: [\w]+="[^"<>&]*")*>\s*<PMID(?: Version="([^"<>&]*)")?>([^<]*)</PMID>',
    _A,
)
_SELF_CLOSED = re.compile(
    r"<(?:PMID|ArticleTitle|AbstractText|OtherAbstract|Title|Language|PubDate|Year|MedlineDate|"
    r"PublicationType|MeshHeading|DescriptorName|QualifierName|Chemical|RegistryNumber|"
    r"NameOfSubstance|CommentsCorrections|ReferenceList|ArticleId|MedlineCitation)\b[^>]*/>",
    _A,
)
_ARTICLE_TITLE = re.compile(r"<ArticleTitle\b([^>]*)>(.*?)</ArticleTitle>", _S)
_ABSTRACT_TEXT = re.compile(r"<AbstractText\b([^>]*)>(.*?)</AbstractText>", _S)
_LABEL = re.compile(r'\sLabel="([^"]*)"', _A)
_JOURNAL_TITLE = re.compile(r"<Title>(.*?)</Title>", _S)
_LANGUAGE = re.compile(r"<Language>([^<]*)</Language>", _A)
_PUB_DATE = re.compile(r"<PubDate>(.*?)</PubDate>", _S)
_DATE_PART = re.compile(r"<(Year|MedlineDate)>([^<]*)</(?:Year|MedlineDate)>", _A)
_YEAR_IN_MEDLINE_DATE = re.compile(r"\d{4}")
_PUBTYPE = re.compile(r'<PublicationType UI="([^"<>&\t\n]*)">([^<]*)</PublicationType>', _A)
_MESH_NAME = re.compile(
    r'<(Descriptor|Qualifier)Name UI="([^"<>&\t\n]*)" MajorTopicYN="([YN])"'
    r'(?: \w+="[^"<>&]*")*>',
    _A,
)
_CHEMICAL = re.compile(
    r"<Chemical>\s*<RegistryNumber>([^<]*)</RegistryNumber>\s*"
    r'<NameOfSubstance UI="([^"<>&\t\n]*)">([^<]*)</NameOfSubstance>\s*</Chemical>',
    _A,
)
_CORRECTION = re.compile(
    r'<CommentsCorrections RefType="([^"<>&\t\n]*)">(.*?)</CommentsCorrections>', _S
)
_ANY_PMID = re.compile(r"<PMID(?: Version=\"[^\"<>&]*\")?>([^<]*)</PMID>", _A)
_REFERENCE_ID = re.compile(r'<ArticleId IdType="pubmed">\s*(\d+)\s*</ArticleId>', _A)
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


def _positive_int(text: str) -> int | None:
    text = text.strip()
    if not text.isdigit():
        return None
    value = int(text)
    return value if value > 0 else None


def _count_start(section: str, tag: str) -> int:
    return section.count(f"<{tag}>") + section.count(f"<{tag} ")


class _NoTree:
    """A parser target with no callbacks: libxml2 checks well-formedness and builds nothing."""

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
    checker = etree.XMLParser(
        target=_NoTree(),
        load_dtd=False,
        no_network=True,
        resolve_entities=False,
        huge_tree=False,
    )
    buffer = b""
    started = False
    while True:
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
            prolog = _PROLOG.match(buffer)
            if prolog is None:
                if final or len(buffer) > 1 << 16:
                    raise NotSimple("prolog")
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
        if b"<!" in buffer or b"<?" in buffer:
            # NLM leaves the odd processing instruction (<?nihms ?>) inside a record: lxml reads
            # that record; one holding a '<' or '>', or any CDATA, sends the file to lxml
            whole = buffer[: buffer.rfind(b">") + 1]
            n_markup = whole.count(b"<!") + whole.count(b"<?")
            if n_markup != len(_SIMPLE_MARKUP.findall(whole)):
                raise NotSimple("CDATA, or a comment or processing instruction holding markup")
        if b"&" in buffer and _OTHER_REFERENCE.search(buffer):
            raise NotSimple("entity reference other than the predefined ones")
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
            if kind == b"PubmedArticle":
                body = buffer[body_start:end]
                if b"<PubmedArticle" in body:
                    raise NotSimple("nested record")
                try:
                    _add_article(body.decode("utf-8"), columns)
                except UnusualRecord:
                    slow_record(buffer[start.start() : end + len(_RECORD_ENDS[kind])].strip())
                if columns.pending >= flush_every:
                    columns.flush()
            elif kind == b"PubmedBookArticle":
                columns.book_articles += 1
            else:
                _add_deletions(buffer[body_start:end].decode("utf-8"), columns)
            pos = end + len(_RECORD_ENDS[kind])
        buffer = buffer[pos:]
        if final:
            if _SET_END.fullmatch(buffer) is None:
                raise NotSimple("content outside records")
            return _PUBMED_SET
        stripped = buffer.lstrip()
        if (stripped and not stripped.startswith(b"<")) or len(buffer) > _MAX_RECORD_BYTES:
            raise NotSimple("text or an oversized element between records")


def _add_deletions(body: str, columns: Any) -> None:
    values = _ANY_PMID.findall(body)
    if body.count("<PMID") != len(values) or _ANY_PMID.sub("", body).strip():
        raise NotSimple("unusual DeleteCitation")
    for text in values:
        pmid = _positive_int(_unescape(text) if "&" in text else text)
        if pmid is None:
            raise NotSimple("non-numeric deleted PMID")
        columns.deleted[pmid] = None


def _add_article(record: str, columns: Any) -> None:
    head = _HEAD.match(record)
    if head is None:
        raise NotSimple("record does not open with MedlineCitation and its PMID")
    cut = record.find("</MedlineCitation>")
    if cut < 0 or record.count("<MedlineCitation") != 1:
        raise UnusualRecord("MedlineCitation")
    citation = record[:cut]
    if "<?" in record or "<!" in record:
        raise UnusualRecord("processing instruction or comment")
    if "/>" in record and _SELF_CLOSED.search(record):
        raise UnusualRecord("self-closed element")
    version_text, pmid_text = head.groups()
    if "&" in pmid_text:
        pmid_text = _unescape(pmid_text)
    pmid = _positive_int(pmid_text)
    if pmid is None:
        raise NotSimple("non-numeric PMID")
    version = 1 if version_text is None else _positive_int(version_text)
    if version is None:
        raise NotSimple("non-numeric Version")

    titles = _ARTICLE_TITLE.findall(citation)
    if len(titles) != citation.count("<ArticleTitle"):
        raise UnusualRecord("ArticleTitle")
    title = None
    if titles:
        attrs, inner = titles[-1]
        if attrs and ("'" in attrs or attrs.count('"') % 2):
            raise UnusualRecord("ArticleTitle attributes")
        title = _flat(inner)

    other = citation.find("<OtherAbstract")
    abstract_part = citation if other < 0 else citation[:other]
    sections = []
    texts = _ABSTRACT_TEXT.findall(abstract_part)
    if len(texts) != abstract_part.count("<AbstractText"):
        raise UnusualRecord("AbstractText")
    for attrs, inner in texts:
        text = _flat(inner)
        if text is None:
            continue
        label = None
        if attrs:
            if "'" in attrs or attrs.count('"') % 2:
                raise UnusualRecord("AbstractText attributes")
            found = _LABEL.search(attrs)
            if found is None and "Label" in attrs:
                raise UnusualRecord("Label attribute")
            if found:
                label = found.group(1)
                if "&" in label:
                    label = _unescape(label)
                if "\t" in label or "\n" in label:
                    raise UnusualRecord("Label needs normalising")
        sections.append(f"{label}: {text}" if label else text)

    journals = _JOURNAL_TITLE.findall(citation)
    if len(journals) != citation.count("<Title"):
        raise UnusualRecord("Title")
    journal = _flat(journals[-1]) if journals else None

    language = None
    if "<Language" in citation:
        found = _LANGUAGE.search(citation)
        if found is None or found.start() != citation.find("<Language"):
            raise UnusualRecord("Language")
        language = _flat(found.group(1))

    year = None
    dates = _PUB_DATE.findall(citation)
    if len(dates) != citation.count("<PubDate"):
        raise UnusualRecord("PubDate")
    if dates:
        date = dates[-1]
        found = _DATE_PART.search(date)
        first_year = date.find("<Year")
        first_medline = date.find("<MedlineDate")
        firsts = [at for at in (first_year, first_medline) if at >= 0]
        if (found is None) != (not firsts):
            raise UnusualRecord("PubDate parts")
        if found is not None:
            if found.start() != min(firsts):
                raise UnusualRecord("PubDate parts")
            part, text = found.groups()
            if "&" in text:
                text = _unescape(text)
            if part == "Year":
                year = _positive_int(text)
            else:
                digits = _YEAR_IN_MEDLINE_DATE.search(text)
                year = int(digits.group(0)) if digits else None
            if year is not None and not 1000 <= year <= 2100:
                year = None

    pubtypes = _PUBTYPE.findall(citation)
    if len(pubtypes) != _count_start(citation, "PublicationType"):
        raise UnusualRecord("PublicationType")

    names = _MESH_NAME.findall(citation) if "<MeshHeading" in citation else []
    if names:
        n_headings = citation.count("<MeshHeading>")
        n_descriptors = citation.count("<DescriptorName")
        if (
            citation.count("<MeshHeading ")
            or n_descriptors != n_headings
            or len(names) != n_descriptors + citation.count("<QualifierName")
            or names[0][0] != "Descriptor"
        ):
            raise UnusualRecord("MeshHeading")
    elif "<MeshHeading>" in citation or "<DescriptorName" in citation:
        raise UnusualRecord("MeshHeading")

    chemicals = _CHEMICAL.findall(citation) if "<Chemical" in citation else []
    if len(chemicals) != _count_start(citation, "Chemical"):
        raise UnusualRecord("Chemical")

    corrections = []
    if "<CommentsCorrections" in citation:
        found_corrections = _CORRECTION.findall(citation)
        if len(found_corrections) != _count_start(citation, "CommentsCorrections"):
            raise UnusualRecord("CommentsCorrections")
        for ref_type, inner in found_corrections:
            ref_pmid = None
            values = _ANY_PMID.findall(inner)
            if len(values) != inner.count("<PMID"):
                raise UnusualRecord("CommentsCorrections PMID")
            if values:
                text = values[-1]
                ref_pmid = _positive_int(_unescape(text) if "&" in text else text)
            corrections.append((ref_type, ref_pmid))

    cited: dict[int, None] = {}
    first_list = record.find("<ReferenceList", cut)
    if first_list >= 0:
        references = record[first_list : record.rfind("</ReferenceList>")]
        ids = _REFERENCE_ID.findall(references)
        if len(ids) != references.count('IdType="pubmed"') or references.count(
            "IdType"
        ) != references.count('IdType="'):
            raise UnusualRecord("ReferenceList")
        for value in ids:
            number = int(value)
            if number > 0:
                cited[number] = None

    n_pubtypes = len(pubtypes)
    columns.a_pmid.append(pmid)
    columns.a_version.append(version)
    columns.a_title.append(title)
    columns.a_abstract.append("\n".join(sections) if sections else None)
    columns.a_year.append(year)
    columns.a_journal.append(journal)
    columns.a_language.append(language)
    columns.a_n_pubtypes.append(n_pubtypes)

    if pubtypes:
        columns.p_pmid.extend([pmid] * n_pubtypes)
        columns.p_version.extend([version] * n_pubtypes)
        for ui, text in pubtypes:
            columns.p_ui.append(ui)
            columns.p_name.append(_flat(text) or "")

    if names:
        m_pmid = columns.m_pmid
        m_version = columns.m_version
        m_descriptor = columns.m_descriptor
        m_descriptor_major = columns.m_descriptor_major
        m_qualifier = columns.m_qualifier
        m_qualifier_major = columns.m_qualifier_major
        ui = ""
        major = False
        bare = False
        for kind, name_ui, name_major in names:
            if kind == "Descriptor":
                if bare:
                    m_pmid.append(pmid)
                    m_version.append(version)
                    m_descriptor.append(ui)
                    m_descriptor_major.append(major)
                    m_qualifier.append(None)
                    m_qualifier_major.append(None)
                ui = name_ui
                major = name_major == "Y"
                bare = True
            else:
                bare = False
                m_pmid.append(pmid)
                m_version.append(version)
                m_descriptor.append(ui)
                m_descriptor_major.append(major)
                m_qualifier.append(name_ui)
                m_qualifier_major.append(name_major == "Y")
        if bare:
            m_pmid.append(pmid)
            m_version.append(version)
            m_descriptor.append(ui)
            m_descriptor_major.append(major)
            m_qualifier.append(None)
            m_qualifier_major.append(None)

    for registry, substance_ui, substance_name in chemicals:
        columns.h_pmid.append(pmid)
        columns.h_version.append(version)
        columns.h_registry.append(_flat(registry))
        columns.h_ui.append(substance_ui)
        columns.h_name.append(_flat(substance_name) or "")

    for ref_type, ref_pmid in corrections:
        columns.k_pmid.append(pmid)
        columns.k_version.append(version)
        columns.k_type.append(ref_type)
        columns.k_ref.append(ref_pmid)

    if cited:
        n = len(cited)
        columns.c_pmid.extend([pmid] * n)
        columns.c_version.extend([version] * n)
        columns.c_cited.extend(cited)
