"""The seven tables of one PubMed file as column lists, filled record by record and turned
into Arrow once (:class:`Columns`): the one row writer both readers of
:mod:`kg_platform.pubmed.parse` share (lxml's tree through :meth:`Columns.add_record`, the
fast path of :mod:`kg_platform.pubmed._fast` and the compiled reader through the ``add_*``
writers and :meth:`Columns.row_lists`), so the two cannot drift apart in what a row holds."""

from __future__ import annotations

import re
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc
from lxml import etree

from kg_platform.pubmed import _fast
from kg_platform.pubmed.errors import PubmedFileError
from kg_platform.schemas import ARROW_SCHEMAS, PUBMED_TABLES

TABLE_NAMES = tuple(PUBMED_TABLES)

# derived from the pandera models in kg_platform.schemas, the one declaration of the columns
SCHEMAS: Mapping[str, pa.Schema] = ARROW_SCHEMAS

_YEAR_IN_MEDLINE_DATE = re.compile(r"\d{4}")

# the elements of a MedlineCitation that feed the tables (see Columns.add_record)
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


class Columns:
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
