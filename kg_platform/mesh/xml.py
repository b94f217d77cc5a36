"""Streaming readers for NLM's MeSH XML (descriptor, qualifier and supplementary record sets).

Each record is parsed and then cleared with its processed siblings, so memory stays bounded
on NLM's full files (~300 MB descriptors, ~700 MB supplementary). The parser never loads the
DTD named in the DOCTYPE (a remote URL) and never touches the network.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

import polars as pl
from lxml import etree

from kg_platform.mesh.fetch import open_location
from kg_platform.mesh.records import (
    ALLOWABLE_SCHEMA,
    DESCRIPTOR_SCHEMA,
    ENTRY_SCHEMA,
    QUALIFIER_SCHEMA,
    SCR_HEADING_SCHEMA,
    SCR_SURFACE_SCHEMA,
    TREE_SCHEMA,
    frame,
)


class MeshXmlError(ValueError):
    """A MeSH XML file is malformed or is not the record set it was expected to be."""


def iter_records(stream: IO[bytes], tag: str, source_name: str) -> Iterator[etree._Element]:
    """Yield each complete `<tag>` element, then free it and everything parsed before it."""
    context = etree.iterparse(
        stream,
        events=("end",),
        tag=tag,
        load_dtd=False,  # the DOCTYPE names https://www.nlm.nih.gov/...dtd: never fetch it
        no_network=True,
        resolve_entities=False,
        dtd_validation=False,
        huge_tree=True,
        remove_blank_text=True,
    )
    try:
        for _, element in context:
            yield element
            element.clear(keep_tail=False)
            while element.getprevious() is not None:
                del element.getparent()[0]
    except etree.XMLSyntaxError as exc:
        raise MeshXmlError(f"{source_name}: malformed MeSH XML ({exc})") from exc


def _text(element: etree._Element, path: str) -> str | None:
    found = element.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip()


def _require(value: str | None, what: str, source_name: str, ui: str | None) -> str:
    if not value:
        where = f" record {ui}" if ui else ""
        raise MeshXmlError(f"{source_name}:{where} missing {what}")
    return value


def read_descriptor_xml(location: str) -> dict[str, pl.DataFrame]:
    """descriptors, tree, entries (every term of every concept, see `MeshRecords`),
    allowable and the qualifiers named in allowable lists."""
    descriptors: list[tuple[str, str]] = []
    tree: list[tuple[str, str]] = []
    entries: list[tuple] = []
    allowable: list[tuple[str, str]] = []
    qualifiers: dict[str, tuple[str, str, str | None]] = {}
    n_records = 0
    with open_location(location) as stream:
        for record in iter_records(stream, "DescriptorRecord", location):
            n_records += 1
            ui = _require(_text(record, "DescriptorUI"), "DescriptorUI", location, None)
            name = _require(_text(record, "DescriptorName/String"), "DescriptorName", location, ui)
            descriptors.append((ui, name))
            for number in record.iterfind("TreeNumberList/TreeNumber"):
                if number.text and number.text.strip():
                    tree.append((ui, number.text.strip()))
            for allowed in record.iterfind("AllowableQualifiersList/AllowableQualifier"):
                q_ui = _text(allowed, "QualifierReferredTo/QualifierUI")
                if not q_ui:
                    raise MeshXmlError(f"{location}: record {ui}: AllowableQualifier without UI")
                allowable.append((ui, q_ui))
                q_name = _text(allowed, "QualifierReferredTo/QualifierName/String")
                if q_name and q_ui not in qualifiers:
                    qualifiers[q_ui] = (q_ui, q_name, _text(allowed, "Abbreviation"))
            entries.extend(_concept_terms(record, ui))
    if n_records == 0:
        raise MeshXmlError(f"{location}: no DescriptorRecord elements (not a descriptor file?)")
    return {
        "descriptors": frame(descriptors, DESCRIPTOR_SCHEMA),
        "tree": frame(tree, TREE_SCHEMA),
        "entries": frame(entries, ENTRY_SCHEMA),
        "allowable": frame(allowable, ALLOWABLE_SCHEMA),
        "qualifiers": frame(list(qualifiers.values()), QUALIFIER_SCHEMA),
    }


def _concept_terms(record: etree._Element, ui: str) -> Iterator[tuple]:
    """(ui, term, concept_ui, term_ui, concept_preferred, permuted, lexical_tag,
    record_preferred) for every term of every concept, as the thesaurus table has them."""
    for concept in record.iterfind("ConceptList/Concept"):
        concept_ui = _text(concept, "ConceptUI")
        for term in concept.iterfind("TermList/Term"):
            text = _text(term, "String")
            if not text:
                continue
            yield (
                ui,
                text,
                concept_ui,
                _text(term, "TermUI"),
                _flag(term.get("ConceptPreferredTermYN")),
                _flag(term.get("IsPermutedTermYN")),
                term.get("LexicalTag"),
                term.get("RecordPreferredTermYN") == "Y",
            )


def _flag(value: str | None) -> bool | None:
    """NLM's Y/N attribute as a bool; None when the attribute is absent."""
    return None if value is None else value == "Y"


def read_qualifier_xml(location: str) -> pl.DataFrame:
    """qualifiers: ui, name, abbreviation (from the record-preferred term)."""
    rows: list[tuple[str, str, str | None]] = []
    with open_location(location) as stream:
        for record in iter_records(stream, "QualifierRecord", location):
            ui = _require(_text(record, "QualifierUI"), "QualifierUI", location, None)
            name = _require(_text(record, "QualifierName/String"), "QualifierName", location, ui)
            abbreviation = None
            for term in record.iterfind("ConceptList/Concept/TermList/Term"):
                if term.get("RecordPreferredTermYN") == "Y":
                    abbreviation = _text(term, "Abbreviation")
                    break
            rows.append((ui, name, abbreviation))
    if not rows:
        raise MeshXmlError(f"{location}: no QualifierRecord elements (not a qualifier file?)")
    return frame(rows, QUALIFIER_SCHEMA)


def read_supplementary_xml(location: str) -> dict[str, object]:
    """scr_surfaces (name and every term), scr_headings (HeadingMappedTo) and the record count."""
    surfaces: list[tuple[str, str]] = []
    headings: list[tuple[str, str]] = []
    n_records = 0
    with open_location(location) as stream:
        for record in iter_records(stream, "SupplementalRecord", location):
            n_records += 1
            ui = _require(
                _text(record, "SupplementalRecordUI"), "SupplementalRecordUI", location, None
            )
            name = _require(
                _text(record, "SupplementalRecordName/String"),
                "SupplementalRecordName",
                location,
                ui,
            )
            seen = {name}
            surfaces.append((ui, name))
            for term in record.iterfind("ConceptList/Concept/TermList/Term/String"):
                text = (term.text or "").strip()
                if text and text not in seen:
                    seen.add(text)
                    surfaces.append((ui, text))
            for mapped in record.iterfind("HeadingMappedToList/HeadingMappedTo"):
                heading = _text(mapped, "DescriptorReferredTo/DescriptorUI")
                if heading:
                    # a leading * marks a major heading; the mapping itself is the same
                    headings.append((ui, heading.lstrip("*")))
    if n_records == 0:
        raise MeshXmlError(
            f"{location}: no SupplementalRecord elements (not a supplementary file?)"
        )
    return {
        "scr_surfaces": frame(surfaces, SCR_SURFACE_SCHEMA),
        "scr_headings": frame(headings, SCR_HEADING_SCHEMA),
        "n_supplementary": n_records,
    }
