"""Stream one NLM PubMed XML file (gzipped or plain) into seven Arrow tables.

Accepts the baseline/update and E-utilities efetch form (``PubmedArticleSet``) and the retired
2016 ``MedlineCitationSet`` form (bare ``MedlineCitation`` records, which carry no
``PubmedData`` and so no references). ``PubmedBookArticle`` records are counted and skipped.

Safety: the parser never loads a DTD, never touches the network and never substitutes
entities; a document that declares any entity is rejected before any text is read, so a
billion-laughs or external-entity file is refused rather than expanded.

Row definitions (the recount in :mod:`kg_platform.pubmed.recount` counts the same things):

- ``articles``: one row per ``PubmedArticle`` (or legacy ``MedlineCitation``) in file order.
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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
from lxml import etree

from kg_platform.pubmed.errors import PubmedFileError

TABLE_NAMES = (
    "articles",
    "mesh_edges",
    "citations",
    "corrections",
    "chemicals",
    "pubtypes",
    "deletions",
)

SCHEMAS: dict[str, pa.Schema] = {
    "articles": pa.schema(
        [
            ("pmid", pa.int64()),
            ("version", pa.int32()),
            ("file", pa.string()),
            ("title", pa.string()),
            ("abstract", pa.string()),
            ("has_abstract", pa.bool_()),
            ("year", pa.int32()),
            ("journal", pa.string()),
            ("language", pa.string()),
            ("n_pubtypes", pa.int32()),
        ]
    ),
    "mesh_edges": pa.schema(
        [
            ("pmid", pa.int64()),
            ("version", pa.int32()),
            ("descriptor_ui", pa.string()),
            ("descriptor_major", pa.bool_()),
            ("qualifier_ui", pa.string()),
            ("qualifier_major", pa.bool_()),
        ]
    ),
    "citations": pa.schema(
        [("citing_pmid", pa.int64()), ("version", pa.int32()), ("cited_pmid", pa.int64())]
    ),
    "corrections": pa.schema(
        [
            ("pmid", pa.int64()),
            ("version", pa.int32()),
            ("ref_type", pa.string()),
            ("ref_pmid", pa.int64()),
        ]
    ),
    "chemicals": pa.schema(
        [
            ("pmid", pa.int64()),
            ("version", pa.int32()),
            ("registry_number", pa.string()),
            ("substance_ui", pa.string()),
            ("substance_name", pa.string()),
        ]
    ),
    "pubtypes": pa.schema(
        [
            ("pmid", pa.int64()),
            ("version", pa.int32()),
            ("pubtype_ui", pa.string()),
            ("name", pa.string()),
        ]
    ),
    "deletions": pa.schema([("pmid", pa.int64())]),
}

_PUBMED_SET = "PubmedArticleSet"
_LEGACY_SET = "MedlineCitationSet"
_RECORD_TAGS = ("PubmedArticle", "PubmedBookArticle", "MedlineCitation", "DeleteCitation")
_YEAR_IN_MEDLINE_DATE = re.compile(r"\d{4}")
_SUFFIXES = (".xml.gz", ".xml", ".gz")

# XPath runs inside libxml2 and hands back plain strings: one call per field, no per-element
# Python objects for the references, which dominate the row count
_REFERENCE_PMIDS = etree.XPath(
    'PubmedData/ReferenceList//ArticleId[@IdType="pubmed"]/text()', smart_strings=False
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
    columns = _Columns(file if file is not None else file_key(path))
    with _open_xml(path) as stream:
        set_format = _stream_records(stream, name, columns)
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


@contextmanager
def _open_xml(path: Path) -> Iterator[BinaryIO]:
    try:
        raw = open(path, "rb")  # noqa: SIM115 - closed below, wrapped by gzip when needed
    except OSError as exc:
        raise PubmedFileError(f"{path.name}: cannot open: {exc.strerror or exc}") from exc
    try:
        magic = raw.read(2)
        raw.seek(0)
        # sniff rather than trust the suffix: NLM's files are gzipped, efetch output is not
        yield gzip.GzipFile(fileobj=raw, mode="rb") if magic == b"\x1f\x8b" else raw
    finally:
        raw.close()


def _stream_records(stream: BinaryIO, name: str, columns: _Columns) -> str:
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
                columns.add_record(elem, elem.find("MedlineCitation"), name)
            elif tag == "MedlineCitation":
                # inside PubmedArticle it is handled with its parent; only the legacy set has
                # bare MedlineCitation records
                if set_format != _LEGACY_SET or elem.getparent().tag != _LEGACY_SET:
                    continue
                columns.add_record(None, elem, name)
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
        line = exc.lineno if exc.lineno else "?"
        message = exc.msg.split(", line ")[0] if exc.msg else str(exc)
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


def _positive_int(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    if not text.isdigit():
        return None
    value = int(text)
    return value if value > 0 else None


class _Columns:
    """Column lists for the seven tables, filled record by record, turned into Arrow once."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.book_articles = 0
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
        self.deleted: dict[int, None] = {}

    def add_record(
        self, article: etree._Element | None, citation: etree._Element | None, name: str
    ) -> None:
        where = (article if article is not None else citation).sourceline
        if citation is None:
            raise PubmedFileError(f"{name}: record ending at line {where} has no MedlineCitation")
        pmid_elem = citation.find("PMID")
        pmid_text = pmid_elem.text if pmid_elem is not None else None
        if pmid_text is None or not pmid_text.strip():
            raise PubmedFileError(f"{name}: record at line {where} has no PMID")
        pmid = _positive_int(pmid_text)
        if pmid is None:
            raise PubmedFileError(
                f"{name}: record at line {where} has a non-numeric PMID {pmid_text.strip()!r}"
            )
        version_text = pmid_elem.get("Version")
        version = 1 if version_text is None else _positive_int(version_text)
        if version is None:
            raise PubmedFileError(
                f"{name}: PMID {pmid} has a non-numeric Version {version_text!r}"
            )

        art = citation.find("Article")
        if art is not None:
            title = _text(art.find("ArticleTitle"))
            abstract = self._abstract(art)
            journal = _text(art.find("Journal/Title"))
            language = art.findtext("Language")
            year = self._year(art)
            pubtypes = art.findall("PublicationTypeList/PublicationType")
        else:
            title = abstract = journal = language = year = None
            pubtypes = []
        self.a_pmid.append(pmid)
        self.a_version.append(version)
        self.a_title.append(title)
        self.a_abstract.append(abstract)
        self.a_year.append(year)
        self.a_journal.append(journal)
        self.a_language.append(language.strip() or None if language else None)
        self.a_n_pubtypes.append(len(pubtypes))

        for pubtype in pubtypes:
            self.p_pmid.append(pmid)
            self.p_version.append(version)
            self.p_ui.append(pubtype.get("UI"))
            self.p_name.append(_text(pubtype) or "")

        for heading in citation.iterfind("MeshHeadingList/MeshHeading"):
            descriptor = heading.find("DescriptorName")
            if descriptor is None:
                raise PubmedFileError(f"{name}: PMID {pmid} has a MeshHeading without descriptor")
            ui = descriptor.get("UI")
            major = descriptor.get("MajorTopicYN") == "Y"
            qualifiers = heading.findall("QualifierName")
            if not qualifiers:
                self.m_pmid.append(pmid)
                self.m_version.append(version)
                self.m_descriptor.append(ui)
                self.m_descriptor_major.append(major)
                self.m_qualifier.append(None)
                self.m_qualifier_major.append(None)
                continue
            for qualifier in qualifiers:
                self.m_pmid.append(pmid)
                self.m_version.append(version)
                self.m_descriptor.append(ui)
                self.m_descriptor_major.append(major)
                self.m_qualifier.append(qualifier.get("UI"))
                self.m_qualifier_major.append(qualifier.get("MajorTopicYN") == "Y")

        for chemical in citation.iterfind("ChemicalList/Chemical"):
            substance = chemical.find("NameOfSubstance")
            registry = chemical.findtext("RegistryNumber")
            self.h_pmid.append(pmid)
            self.h_version.append(version)
            self.h_registry.append(registry.strip() or None if registry else None)
            self.h_ui.append(substance.get("UI") if substance is not None else None)
            self.h_name.append(_text(substance) or "")

        for correction in citation.iterfind("CommentsCorrectionsList/CommentsCorrections"):
            self.k_pmid.append(pmid)
            self.k_version.append(version)
            self.k_type.append(correction.get("RefType") or "")
            self.k_ref.append(_positive_int(correction.findtext("PMID")))

        if article is not None:
            cited = _REFERENCE_PMIDS(article)
            if cited:
                seen: dict[int, None] = {}
                for text in cited:
                    value = _positive_int(text)
                    if value is not None:
                        seen[value] = None
                n = len(seen)
                self.c_pmid.extend([pmid] * n)
                self.c_version.extend([version] * n)
                self.c_cited.extend(seen)

    @staticmethod
    def _abstract(art: etree._Element) -> str | None:
        sections = []
        for part in art.iterfind("Abstract/AbstractText"):
            text = _text(part)
            if text is None:
                continue
            label = part.get("Label")
            sections.append(f"{label}: {text}" if label else text)
        return "\n".join(sections) if sections else None

    @staticmethod
    def _year(art: etree._Element) -> int | None:
        pub_date = art.find("Journal/JournalIssue/PubDate")
        if pub_date is None:
            return None
        year = pub_date.findtext("Year")
        if year is None:
            # e.g. <MedlineDate>1998 Dec-1999 Jan</MedlineDate>: the first year is the issue's
            found = _YEAR_IN_MEDLINE_DATE.search(pub_date.findtext("MedlineDate") or "")
            year = found.group(0) if found else None
        value = _positive_int(year)
        return value if value is not None and 1000 <= value <= 2100 else None

    def add_deletions(self, elem: etree._Element, name: str) -> None:
        for pmid_elem in elem.iterfind("PMID"):
            pmid = _positive_int(pmid_elem.text)
            if pmid is None:
                raise PubmedFileError(
                    f"{name}: DeleteCitation at line {elem.sourceline} lists a non-numeric "
                    f"PMID {(pmid_elem.text or '').strip()!r}"
                )
            self.deleted[pmid] = None

    def to_tables(self) -> dict[str, pa.Table]:
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
            "deletions": [list(self.deleted)],
        }
        tables = {}
        for table_name, values in raw.items():
            schema = SCHEMAS[table_name]
            table = pa.Table.from_arrays(
                [pa.array(v, type=f.type) for v, f in zip(values, schema, strict=True)],
                schema=schema,
            )
            keys = [(schema.names[0], "ascending")]
            if "version" in schema.names:
                keys.append(("version", "ascending"))
            # Arrow's sort is stable, so rows of one record keep NLM's order
            tables[table_name] = table.sort_by(keys)
        return tables
